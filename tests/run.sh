#!/usr/bin/env bash
# Runs weir's whole test suite: starts the real Kafka broker (tests/kafka/broker.sh) unless
# WEIR_KAFKA_BOOTSTRAP names one, runs every crate's tests against it, then the web page's tests
# in a headless browser (tests/web/run.sh), the REST API fuzzed against its OpenAPI document
# (tests/api/run.sh) and the Postgres protocol through psycopg (tests/pg/run.sh), and stops the
# broker again if this script started it. Installs psql for the Postgres protocol's tests when
# missing. Arguments go to cargo test (and skip the other three).
#
# Builds go to $CARGO_TARGET_DIR (default ~/.cache/weir/target), outside the clone, so a fresh
# clone on the same machine reuses earlier builds.
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}
export CARGO_TERM_COLOR=never

started_broker=no
if [[ -z ${WEIR_KAFKA_BOOTSTRAP:-} ]]; then
  if ! bash tests/kafka/broker.sh status >/dev/null 2>&1; then
    started_broker=yes
  fi
  bootstrap=$(bash tests/kafka/broker.sh start | sed -n 's/^bootstrap: //p')
  export WEIR_KAFKA_BOOTSTRAP=$bootstrap
fi
if [[ $started_broker == yes ]]; then
  trap 'bash tests/kafka/broker.sh stop' EXIT
fi
echo "run.sh: Kafka at $WEIR_KAFKA_BOOTSTRAP" >&2

# The Postgres protocol's tests talk to weir with the real psql, over TLS with a certificate
# made by openssl.
if ! command -v psql >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  echo "run.sh: installing psql (postgresql-client) and openssl" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get install -y -q postgresql-client openssl >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q postgresql-client openssl >/dev/null; } \
    || echo "run.sh: psql or openssl could not be installed; the Postgres protocol's tests will say so" >&2
fi

status=0
cargo test --workspace --all-features --no-fail-fast "$@" || status=$?
if [[ $# -eq 0 ]]; then
  echo "run.sh: the web page's tests" >&2
  bash tests/web/run.sh || status=$?
  echo "run.sh: the REST API fuzzed by schemathesis" >&2
  bash tests/api/run.sh || status=$?
  echo "run.sh: the Postgres protocol through psycopg" >&2
  bash tests/pg/run.sh || status=$?
fi
exit $status
