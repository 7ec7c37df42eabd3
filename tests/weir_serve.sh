# Sourced by the test scripts that drive a real `weir serve` from outside (tests/api/run.sh,
# tests/pg/run.sh): a Python tool pinned in a virtualenv under ~/.cache/weir, the weir binary
# the cargo tests built, and a server started on free ports and waited for.

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}

# python_venv DIR MODULE PIP_SPEC: a virtualenv at DIR in which MODULE imports, made with
# PIP_SPEC installed if it is not there yet.
python_venv() {
  local dir=$1 module=$2 spec=$3
  if [[ ! -x $dir/bin/python ]] || ! "$dir/bin/python" -c "import $module" 2>/dev/null; then
    echo "installing $spec into $dir" >&2
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$spec"
  fi
}

# first_match SED_SCRIPT FILE: waits up to 10 s for `sed -n SED_SCRIPT FILE` to print something,
# and prints it (nothing if it never does).
first_match() {
  local found=""
  for _ in $(seq 100); do
    found=$(sed -n "$1" "$2")
    [[ -n $found ]] && break
    sleep 0.1
  done
  printf '%s' "$found"
}

# start_weir_serve ARGS...: starts `weir serve --listen 127.0.0.1:0 --data-dir <tmp> ARGS` (the
# binary $WEIR_BIN, else the one the cargo tests build), stops it and removes its data on exit,
# and waits for its first line; sets $data (its temporary directory: stdout, stderr there) and
# $url (http://...).
start_weir_serve() {
  if [[ -z ${WEIR_BIN:-} ]]; then
    cargo test --workspace --all-features --no-run --quiet
    WEIR_BIN=$CARGO_TARGET_DIR/debug/weir
  fi
  data=$(mktemp -d)
  "$WEIR_BIN" serve --listen 127.0.0.1:0 --data-dir "$data/weir" "$@" >"$data/stdout" 2>"$data/stderr" &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
  url=$(first_match 's/^weir listening on //p' "$data/stdout")
  [[ -n $url ]] || { cat "$data/stderr" >&2; echo "weir serve did not start" >&2; exit 1; }
}
