#!/usr/bin/env bash
# A real S3-compatible object store (SeaweedFS: master, volume server, filer and S3 gateway in
# one process) for the tests of checkpoints on S3, on 127.0.0.1 only.
#
#   tests/s3/seaweedfs.sh start | stop | status | clean
#
# `weed` is built once from the Go module proxy (github.com/seaweedfs/seaweedfs at
# $SEAWEEDFS_VERSION) into $WEIR_CACHE_DIR/seaweedfs-$SEAWEEDFS_VERSION/ and reused after; its
# data and log live in $WEIR_CACHE_DIR/seaweedfs-$PORT/, outside the clone. The S3 gateway
# requires signed requests from its one identity (printed by start and status); buckets are
# created by their first upload.
#
# Environment (all optional):
#   WEIR_S3_PORT     the S3 port on 127.0.0.1 (default 9400); the master, volume server and
#                    filer take the next three, and each of the four its port + 10000 for gRPC
#   WEIR_CACHE_DIR   cache root (default ~/.cache/weir)
set -euo pipefail

SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
PORT=${WEIR_S3_PORT:-9400}
MASTER_PORT=$((PORT + 1))
VOLUME_PORT=$((PORT + 2))
FILER_PORT=$((PORT + 3))
CACHE_DIR=${WEIR_CACHE_DIR:-$HOME/.cache/weir}
DIST_DIR=$CACHE_DIR/seaweedfs-$SEAWEEDFS_VERSION
WEED=$DIST_DIR/weed
RUN_DIR=$CACHE_DIR/seaweedfs-$PORT
LOG_FILE=$RUN_DIR/server.log
PID_FILE=$RUN_DIR/weed.pid
ACCESS_KEY=weir
SECRET_KEY=weir-secret
START_TIMEOUT_S=${WEIR_S3_START_TIMEOUT:-90}

SCRIPT=seaweedfs.sh
# Without dirname: the script's own tests run it with a PATH of a few tools.
here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
# shellcheck source=tests/background_server.sh
source "$here/../background_server.sh"

# `go install module@version` refuses a module whose go.mod has replace directives, as
# SeaweedFS's has: the module is downloaded and built as a main module instead.
build() {
  [[ -x $WEED ]] && return 0
  command -v go >/dev/null || die "go is not installed; it builds SeaweedFS from the Go module proxy"
  echo "seaweedfs.sh: building SeaweedFS $SEAWEEDFS_VERSION from the Go module proxy into $DIST_DIR (a few minutes, once)" >&2
  mkdir -p "$DIST_DIR"
  export GOPATH=$CACHE_DIR/go GOFLAGS=-modcacherw
  local module=github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION src
  src=$(cd "$DIST_DIR" && go mod download -json "$module" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [[ -d $src ]] || die "go mod download $module gave no source directory"
  rm -rf "$DIST_DIR/src"
  cp -r "$src" "$DIST_DIR/src"
  chmod -R u+w "$DIST_DIR/src"
  if ! (cd "$DIST_DIR/src" && go build -o "$WEED.partial" ./weed) >"$DIST_DIR/build.log" 2>&1; then
    tail -n 30 "$DIST_DIR/build.log" >&2
    die "building weed failed (log: $DIST_DIR/build.log)"
  fi
  mv "$WEED.partial" "$WEED"
  rm -rf "$DIST_DIR/src"
}

print_endpoint() {
  echo "endpoint: http://127.0.0.1:$PORT"
  echo "access_key_id: $ACCESS_KEY"
  echo "secret_access_key: $SECRET_KEY"
  echo "log: $LOG_FILE"
}

start() {
  local pid
  if pid=$(running_pid); then
    echo "seaweedfs.sh: already running (pid $pid)" >&2
    print_endpoint
    return 0
  fi
  for p in "$PORT" "$MASTER_PORT" "$VOLUME_PORT" "$FILER_PORT"; do
    port_open "$p" && die "port $p on 127.0.0.1 is taken by another process (set WEIR_S3_PORT)"
  done
  build
  mkdir -p "$RUN_DIR/data"
  cat > "$RUN_DIR/s3.json" <<JSON
{"identities": [{"name": "weir", "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  : > "$LOG_FILE"
  # setsid: it outlives the shell (and the test process) that started it; 9>&-: it must not
  # inherit this script's lock. Small volumes: the tests' checkpoints are small, the disk is not.
  cd "$RUN_DIR"
  setsid "$WEED" server -dir="$RUN_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$MASTER_PORT" -volume.port="$VOLUME_PORT" -filer -filer.port="$FILER_PORT" \
    -s3 -s3.port="$PORT" -s3.config="$RUN_DIR/s3.json" -s3.port.iceberg=0 -s3.port.lance=0 \
    -master.volumeSizeLimitMB=64 -volume.max=0 >"$LOG_FILE" 2>&1 < /dev/null 9>&- &
  pid=$!
  echo "$pid" > "$PID_FILE"
  local waited=0
  # Polls every 0.2 s until "$@" succeeds; dies with $1 if weed exits or START_TIMEOUT_S passes
  # (one budget for both waits below).
  wait_for() {
    local failure=$1
    shift
    until "$@"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        tail -n 30 "$LOG_FILE" >&2 || true
        die "weed exited during start-up (log: $LOG_FILE)"
      fi
      if (( waited >= START_TIMEOUT_S * 5 )); then
        die "$failure within ${START_TIMEOUT_S}s (log: $LOG_FILE)"
      fi
      sleep 0.2
      waited=$((waited + 1))
    done
  }
  # The gateway answers an anonymous request with 403 once it is up.
  gateway_up() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/" || true) == 403 ]]; }
  wait_for "the S3 gateway did not answer on 127.0.0.1:$PORT" gateway_up
  # The gateway answers long before a write can land: a master restarted over its data reports
  # "warming up" for about half a minute, and a PUT meanwhile hangs until the client's timeout
  # (a test's first checkpoint failed so). Ready once the master assigns a file id.
  assigns_file_ids() { curl -s -m 5 "http://127.0.0.1:$MASTER_PORT/dir/assign" | grep -q '"fid"'; }
  wait_for "SeaweedFS took no writes" assigns_file_ids
  echo "seaweedfs.sh: SeaweedFS started (pid $pid)" >&2
  print_endpoint
}

status() {
  local pid
  if pid=$(running_pid) && port_open "$PORT"; then
    echo "running (pid $pid)"
    print_endpoint
  else
    echo "not running"
    return 1
  fi
}

serialise "${1:-}" "$CACHE_DIR/seaweedfs-$PORT.lock"

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  clean) stop; rm -rf "$RUN_DIR" "$CACHE_DIR/seaweedfs-$PORT.lock"; echo "seaweedfs.sh: removed $RUN_DIR" >&2 ;;
  *) echo "usage: $0 start|stop|status|clean" >&2; exit 2 ;;
esac
