#!/usr/bin/env bash
# Runs weir's whole test suite: starts the real Kafka broker (tests/kafka/broker.sh) unless
# WEIR_KAFKA_BOOTSTRAP names one, and the S3-compatible server (tests/s3/seaweedfs.sh) unless
# WEIR_S3_ENDPOINT names one, runs every crate's tests against them, then the web page's tests
# in a headless browser (tests/web/run.sh), the REST API fuzzed against its OpenAPI document
# (tests/api/run.sh) and the Postgres protocol through psycopg (tests/pg/run.sh), and stops the
# broker and the S3 server again if this script started them. Installs psql for the Postgres
# protocol's tests when missing. Arguments go to cargo test (and skip the other three).
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
    # A fresh broker for each run: tests create topics and never delete them (a machine that
    # ran the suite often held 22 GB of old test topics).
    bash tests/kafka/broker.sh clean
  fi
  bootstrap=$(bash tests/kafka/broker.sh start | sed -n 's/^bootstrap: //p')
  export WEIR_KAFKA_BOOTSTRAP=$bootstrap
fi
echo "run.sh: Kafka at $WEIR_KAFKA_BOOTSTRAP" >&2

# The S3-compatible server the tests of checkpoints on S3 use (tests/s3/seaweedfs.sh: SeaweedFS,
# built from the Go module proxy the first time), unless WEIR_S3_ENDPOINT names one.
started_s3=no
if [[ -z ${WEIR_S3_ENDPOINT:-} ]]; then
  if ! bash tests/s3/seaweedfs.sh status >/dev/null 2>&1; then
    started_s3=yes
    bash tests/s3/seaweedfs.sh clean
  fi
  s3=$(bash tests/s3/seaweedfs.sh start)
  export WEIR_S3_ENDPOINT=$(sed -n 's/^endpoint: //p' <<<"$s3")
  export WEIR_S3_ACCESS_KEY_ID=$(sed -n 's/^access_key_id: //p' <<<"$s3")
  export WEIR_S3_SECRET_ACCESS_KEY=$(sed -n 's/^secret_access_key: //p' <<<"$s3")
fi
echo "run.sh: S3 at $WEIR_S3_ENDPOINT" >&2

stop_started() {
  if [[ $started_broker == yes ]]; then bash tests/kafka/broker.sh stop; fi
  if [[ $started_s3 == yes ]]; then bash tests/s3/seaweedfs.sh stop; fi
}
trap stop_started EXIT

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
