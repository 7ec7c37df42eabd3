#!/usr/bin/env bash
# weir's Postgres protocol as a Python program uses it: psycopg 3 (from PyPI, pinned, in a
# virtualenv under ~/.cache/weir) against a real `weir serve --pg-listen` (psycopg_check.py:
# session settings, DDL, parameters bound by the driver, typed rows, an updating query's final rows, a
# server-side cursor over a stream, COPY TO STDOUT, errors with their SQLSTATE, the token as
# password).
set -euo pipefail

cd "$(dirname "$0")"
source ../weir_serve.sh
version=3.3.9
venv=$HOME/.cache/weir/psycopg-$version
python_venv "$venv" psycopg "psycopg[binary]==$version"
token=pg-token
start_weir_serve --pg-listen 127.0.0.1:0 --token "$token"
pg=""
for _ in $(seq 50); do
  pg=$(sed -n 's/^weir speaks Postgres on \([^ ]*\) .*/\1/p' "$data/stdout")
  [[ -n $pg ]] && break
  sleep 0.1
done
[[ -n $pg ]] || { echo "pg tests: weir serve did not open its Postgres port" >&2; exit 1; }
"$venv/bin/python" psycopg_check.py "${pg%:*}" "${pg##*:}" "$token"
