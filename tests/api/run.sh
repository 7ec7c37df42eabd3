#!/usr/bin/env bash
# The REST API fuzzed against its own OpenAPI document by schemathesis (from PyPI, pinned, in a
# virtualenv under ~/.cache/weir): a real `weir serve` with a token and one running pipeline;
# every answer must be a documented status with a body matching its schema, and never a 5xx.
# Not fuzzed: the SSE output (it never ends while a pipeline runs). The check that a
# schema-valid body is accepted is off: a string is schema-valid SQL, and most strings are a
# 400 with the syntax error, as they should be. WEIR_FUZZ_SEED picks another seed.
set -euo pipefail

cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}
version=4.32.5
venv=$HOME/.cache/weir/schemathesis-$version
if [[ ! -x $venv/bin/st ]]; then
  echo "api fuzz: installing schemathesis $version into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
if [[ -z ${WEIR_BIN:-} ]]; then
  cargo test --workspace --all-features --no-run --quiet
  WEIR_BIN=$CARGO_TARGET_DIR/debug/weir
fi

data=$(mktemp -d)
token=fuzz-token
"$WEIR_BIN" serve --listen 127.0.0.1:0 --data-dir "$data/weir" --token "$token" >"$data/stdout" 2>"$data/stderr" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
url=""
for _ in $(seq 100); do
  url=$(sed -n 's/^weir listening on //p' "$data/stdout")
  [[ -n $url ]] && break
  sleep 0.1
done
[[ -n $url ]] || { cat "$data/stderr" >&2; echo "api fuzz: weir serve did not start" >&2; exit 1; }
auth="Authorization: Bearer $token"
sql="CREATE TABLE gen WITH (connector = 'nexmark', rate = '500'); SET checkpoint.interval = '200 ms'; SELECT bid.auction FROM gen WHERE event_type = 2"
curl -sf -H "$auth" -H 'Content-Type: application/json' -d "{\"sql\": \"$sql\"}" "$url/api/v1/statements" >/dev/null
sleep 1
curl -sf -H "$auth" "$url/api/v1/openapi.json" >"$data/openapi.json"
echo "api fuzz: schemathesis against $url" >&2
"$venv/bin/st" --config-file schemathesis.toml run "$data/openapi.json" --url "$url" -H "$auth" \
  --exclude-path '/api/v1/pipelines/{id}/output' --exclude-checks positive_data_acceptance \
  --max-examples 50 --request-timeout 30 --seed "${WEIR_FUZZ_SEED:-20261205}" --no-color
grep -q "panicked" "$data/stderr" && { echo "api fuzz: the server panicked:" >&2; cat "$data/stderr" >&2; exit 1; }
exit 0
