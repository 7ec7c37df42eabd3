# Sourced by tests/kafka/broker.sh and tests/s3/seaweedfs.sh: what a test server started in the
# background needs around it: its pid file, a port check, stopping it, and one start or stop at
# a time. The sourcing script sets SCRIPT (its name, for messages) and PID_FILE first.

die() { echo "$SCRIPT: $*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The server's pid, if it is running.
running_pid() {
  [[ -f $PID_FILE ]] || return 1
  local pid
  pid=$(cat "$PID_FILE")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# SIGTERM, then SIGKILL after 30 s.
stop() {
  local pid
  if ! pid=$(running_pid); then
    echo "$SCRIPT: not running" >&2
    rm -f "$PID_FILE"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PID_FILE"; echo "$SCRIPT: stopped" >&2; return 0; }
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$PID_FILE"
  echo "$SCRIPT: stopped (killed after 30s)" >&2
}

# For every command but `status` (which only reads): waits for, then holds, the lock file $2,
# since test processes may ask for the server concurrently. A server started meanwhile must not
# inherit it (start it with 9>&-), or every later start or stop would wait for it to exit.
serialise() {
  [[ $1 == status ]] && return 0
  mkdir -p "${2%/*}"
  exec 9>"$2"
  flock 9
}
