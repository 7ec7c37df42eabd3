#!/usr/bin/env bash
# The REST API fuzzed against its own OpenAPI document by schemathesis (from PyPI, pinned, in a
# virtualenv under ~/.cache/weir): a real `weir serve` with a token and one running pipeline;
# every answer must be a documented status with a body matching its schema, and never a 5xx.
# Not fuzzed: the SSE output (it never ends while a pipeline runs). The check that a
# schema-valid body is accepted is off: a string is schema-valid SQL, and most strings are a
# 400 with the syntax error, as they should be. WEIR_FUZZ_SEED picks another seed.
set -euo pipefail

cd "$(dirname "$0")"
source ../weir_serve.sh
version=4.32.5
venv=$HOME/.cache/weir/schemathesis-$version
python_venv "$venv" schemathesis "schemathesis==$version"
token=fuzz-token
start_weir_serve --token "$token"
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
