#!/usr/bin/env bash
# weir's Postgres protocol as programs use it, against a real `weir serve --pg-listen`:
# psycopg 3 (from PyPI, pinned, in a virtualenv under ~/.cache/weir; psycopg_check.py: session
# settings, DDL, parameters bound by the driver, typed rows, an updating query's final rows, a
# cursor over a stream, COPY TO STDOUT, errors with their SQLSTATE, the token as password),
# SQLAlchemy 2 over psycopg as BI tools use it (sqlalchemy_check.py: connect, reflect tables and
# views, query a reflected view), then the PostgreSQL JDBC driver (from Maven Central, pinned;
# JdbcCheck.java: prepared statements past its server-side threshold, binary rows, metadata).
set -euo pipefail

cd "$(dirname "$0")"
source ../weir_serve.sh
version=3.3.9
venv=$HOME/.cache/weir/psycopg-$version
python_venv "$venv" psycopg "psycopg[binary]==$version"
python_venv "$venv" sqlalchemy "sqlalchemy==2.0.44"
token=pg-token
start_weir_serve --pg-listen 127.0.0.1:0 --token "$token"
pg=$(first_match 's/^weir speaks Postgres on \([^ ]*\) .*/\1/p' "$data/stdout")
[[ -n $pg ]] || { echo "pg tests: weir serve did not open its Postgres port" >&2; exit 1; }
"$venv/bin/python" psycopg_check.py "${pg%:*}" "${pg##*:}" "$token"
"$venv/bin/python" sqlalchemy_check.py "${pg%:*}" "${pg##*:}" "$token"

# The JDBC driver from Maven Central, run as a single-file Java program.
jdbc_version=42.7.14
jdbc=$HOME/.cache/weir/jdbc/postgresql-$jdbc_version.jar
if [[ ! -f $jdbc ]]; then
  echo "pg tests: fetching the PostgreSQL JDBC driver $jdbc_version" >&2
  mvn -q -B dependency:copy -Dartifact="org.postgresql:postgresql:$jdbc_version" \
    -DoutputDirectory="$(dirname "$jdbc")" >"$data/mvn.log" 2>&1 || { cat "$data/mvn.log" >&2; exit 1; }
fi
java -cp "$jdbc" JdbcCheck.java "${pg%:*}" "${pg##*:}" "$token"
