#!/usr/bin/env bash
# A real, single-node Apache Kafka broker (KRaft: broker + controller in one JVM) for weir's tests.
#
# Listeners on 127.0.0.1: PLAINTEXT (the bootstrap every test uses), and for the secured-cluster
# tests SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512), SSL and SASL_SSL. The TLS keys
# (a test CA and the broker's certificate for 127.0.0.1, made with the JDK's keytool) and the
# SASL user are made at start; $RUN_DIR/listeners.env tells tests where they are.
#
#   tests/kafka/broker.sh start | stop | status | clean
#
# The broker's jars come from Maven Central (org.apache.kafka:kafka_2.13 and its dependencies),
# fetched with mvn once into $WEIR_CACHE_DIR/kafka-$KAFKA_VERSION/libs and reused after. Its data,
# configuration and log live in $WEIR_CACHE_DIR/broker-$PORT/, outside the clone.
#
# Environment (all optional):
#   WEIR_KAFKA_PORT             client port on 127.0.0.1 (default 9092)
#   WEIR_KAFKA_CONTROLLER_PORT  KRaft controller port (default: client port + 1)
#   WEIR_KAFKA_SASL_PORT, WEIR_KAFKA_SSL_PORT, WEIR_KAFKA_SASL_SSL_PORT
#                               the secured listeners (default: client port + 2, + 3, + 4)
#   WEIR_KAFKA_VERSION          Apache Kafka version (default 4.4.0; any 4.x)
#   WEIR_CACHE_DIR              cache root (default ~/.cache/weir)
#   WEIR_KAFKA_HEAP             JVM heap (default 1g)
set -euo pipefail

KAFKA_VERSION=${WEIR_KAFKA_VERSION:-4.4.0}
PORT=${WEIR_KAFKA_PORT:-9092}
CONTROLLER_PORT=${WEIR_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
SASL_PORT=${WEIR_KAFKA_SASL_PORT:-$((PORT + 2))}
SSL_PORT=${WEIR_KAFKA_SSL_PORT:-$((PORT + 3))}
SASL_SSL_PORT=${WEIR_KAFKA_SASL_SSL_PORT:-$((PORT + 4))}
CACHE_DIR=${WEIR_CACHE_DIR:-$HOME/.cache/weir}
DIST_DIR=$CACHE_DIR/kafka-$KAFKA_VERSION
LIBS=$DIST_DIR/libs
RUN_DIR=$CACHE_DIR/broker-$PORT
DATA_DIR=$RUN_DIR/data
LOG_FILE=$RUN_DIR/server.log
PID_FILE=$RUN_DIR/broker.pid
SECURITY_DIR=$RUN_DIR/security
# The test cluster's only SASL user, and the password of its key stores.
SASL_USER=weir
SASL_PASSWORD=weir-secret
STORE_PASSWORD=weir-test
# Marks a data directory formatted with the SASL user's SCRAM credentials (KRaft stores them in
# the metadata log, written at format time); an older data directory is formatted again.
FORMAT_MARK=$DATA_DIR/.weir-scram-users
START_TIMEOUT_S=${WEIR_KAFKA_START_TIMEOUT:-90}

SCRIPT=broker.sh
# Without dirname: the script's own tests run it with a PATH of a few tools.
here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
# shellcheck source=tests/background_server.sh
source "$here/../background_server.sh"

require_java() {
  command -v java >/dev/null || die "java is not installed (Kafka $KAFKA_VERSION needs Java 17 or newer)"
  local major
  major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  [[ ${major%%.*} -ge 17 ]] 2>/dev/null || die "java $major found; Kafka $KAFKA_VERSION needs Java 17 or newer"
}

fetch() {
  if [[ -f $DIST_DIR/.complete ]]; then return 0; fi
  command -v mvn >/dev/null || die "mvn (Maven) is not installed; it fetches Kafka $KAFKA_VERSION from Maven Central"
  echo "broker.sh: fetching Apache Kafka $KAFKA_VERSION from Maven Central into $DIST_DIR" >&2
  mkdir -p "$DIST_DIR"
  # A throw-away POM whose only purpose is to let the dependency plugin resolve the broker.
  cat > "$DIST_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.5</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$LIBS"
  if ! (cd "$DIST_DIR" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime \
        > "$DIST_DIR/fetch.log" 2>&1); then
    tail -n 30 "$DIST_DIR/fetch.log" >&2
    die "mvn could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION (log: $DIST_DIR/fetch.log)"
  fi
  [[ -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar ]] || die "mvn finished but $LIBS has no kafka_2.13-$KAFKA_VERSION.jar"
  touch "$DIST_DIR/.complete"
}

write_config() {
  mkdir -p "$RUN_DIR"
  cat > "$RUN_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PORT,SSL://127.0.0.1:$SSL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PORT,SSL://127.0.0.1:$SSL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
# Secured listeners. No authorizer: an authenticated user may do anything, as on PLAINTEXT.
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$SECURITY_DIR/broker.p12
ssl.keystore.password=$STORE_PASSWORD
ssl.key.password=$STORE_PASSWORD
ssl.client.auth=none
log.dirs=$DATA_DIR
# Tests create their topics with explicit partition counts, the sql-examples with
# 'sink.create-topic'. No auto-creation: a pipeline writing a topic nobody made must fail.
num.partitions=2
auto.create.topics.enable=false
# One node: every internal topic has one replica, and transactions need no second in-sync replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests look at aborted transactions and producer fencing: keep the coordinator responsive.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.max.timeout.ms=900000
PROPS
  cat > "$RUN_DIR/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $LOG_FILE
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
LOG
}

# A test CA, and the broker's key with a certificate for 127.0.0.1 and localhost signed by it;
# ca.pem is what clients trust (librdkafka's and rustls' ssl.ca.location).
make_keys() {
  [[ -f $SECURITY_DIR/.complete ]] && return 0
  command -v keytool >/dev/null || die "keytool (the JDK's) is not installed; it makes the test broker's TLS keys"
  rm -rf "$SECURITY_DIR"
  mkdir -p "$SECURITY_DIR"
  local kt=(keytool -storetype PKCS12 -storepass "$STORE_PASSWORD" -keypass "$STORE_PASSWORD" -noprompt)
  (
    cd "$SECURITY_DIR"
    "${kt[@]}" -genkeypair -alias ca -dname CN=weir-test-ca -keyalg RSA -keysize 2048 -validity 3650 \
      -ext bc:c -ext KeyUsage=keyCertSign,cRLSign -keystore ca.p12
    "${kt[@]}" -exportcert -rfc -alias ca -keystore ca.p12 > ca.pem
    "${kt[@]}" -genkeypair -alias broker -dname CN=localhost -keyalg RSA -keysize 2048 -validity 3650 -keystore broker.p12
    "${kt[@]}" -certreq -alias broker -keystore broker.p12 > broker.csr
    "${kt[@]}" -gencert -alias ca -keystore ca.p12 -infile broker.csr -outfile broker.pem -rfc -validity 3650 \
      -ext SAN=IP:127.0.0.1,DNS:localhost -ext KeyUsage=digitalSignature,keyEncipherment -ext ExtendedKeyUsage=serverAuth
    "${kt[@]}" -importcert -alias ca -file ca.pem -keystore broker.p12
    "${kt[@]}" -importcert -alias broker -file broker.pem -keystore broker.p12
  ) >"$RUN_DIR/keys.log" 2>&1 || { cat "$RUN_DIR/keys.log" >&2; die "making the test TLS keys failed"; }
  touch "$SECURITY_DIR/.complete"
}

# What the secured-cluster tests read: the secured listeners, the CA to trust, the SASL user.
write_listeners_env() {
  cat > "$RUN_DIR/listeners.env" <<ENV
sasl_plaintext=127.0.0.1:$SASL_PORT
ssl=127.0.0.1:$SSL_PORT
sasl_ssl=127.0.0.1:$SASL_SSL_PORT
ca_location=$SECURITY_DIR/ca.pem
sasl_username=$SASL_USER
sasl_password=$SASL_PASSWORD
ENV
}

JAVA_ARGS=(-Xms256m "-Xmx${WEIR_KAFKA_HEAP:-1g}" -XX:+UseG1GC
  "-Dlog4j2.configurationFile=$RUN_DIR/log4j2.properties" -cp "$LIBS/*")

start() {
  if pid=$(running_pid); then
    echo "broker.sh: already running (pid $pid)" >&2
    echo "bootstrap: 127.0.0.1:$PORT"
    echo "log: $LOG_FILE"
    return 0
  fi
  require_java
  port_open "$PORT" && die "port $PORT on 127.0.0.1 is taken by another process (set WEIR_KAFKA_PORT)"
  port_open "$CONTROLLER_PORT" && die "controller port $CONTROLLER_PORT is taken (set WEIR_KAFKA_CONTROLLER_PORT)"
  for p in "$SASL_PORT" "$SSL_PORT" "$SASL_SSL_PORT"; do
    port_open "$p" && die "port $p on 127.0.0.1 (a secured listener) is taken (set WEIR_KAFKA_SASL_PORT, WEIR_KAFKA_SSL_PORT, WEIR_KAFKA_SASL_SSL_PORT)"
  done
  fetch
  write_config
  make_keys
  write_listeners_env
  if [[ ! -f $FORMAT_MARK ]]; then
    rm -rf "$DATA_DIR"
    local cluster_id
    cluster_id=$(java "${JAVA_ARGS[@]}" kafka.tools.StorageTool random-uuid 2>>"$RUN_DIR/format.log")
    java "${JAVA_ARGS[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$RUN_DIR/server.properties" \
      --add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]" \
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]" \
      >>"$RUN_DIR/format.log" 2>&1 || { cat "$RUN_DIR/format.log" >&2; die "formatting $DATA_DIR failed"; }
    touch "$FORMAT_MARK"
  fi
  : > "$LOG_FILE"
  # setsid: the broker outlives the shell (and the test process) that started it. 9>&-: it must
  # not inherit this script's lock, or every later start/stop would wait for the broker to exit.
  setsid java "${JAVA_ARGS[@]}" kafka.Kafka "$RUN_DIR/server.properties" >"$RUN_DIR/stdout.log" 2>&1 < /dev/null 9>&- &
  echo $! > "$PID_FILE"
  local pid=$!
  local waited=0
  until port_open "$PORT" && grep -q "Kafka Server started" "$LOG_FILE" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$RUN_DIR/stdout.log" "$LOG_FILE" >&2 || true
      die "the broker exited during start-up (log: $LOG_FILE)"
    fi
    if (( waited >= START_TIMEOUT_S * 5 )); then
      die "the broker did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT_S}s (log: $LOG_FILE)"
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  echo "broker.sh: Apache Kafka $KAFKA_VERSION started (pid $pid)" >&2
  echo "bootstrap: 127.0.0.1:$PORT"
  echo "secured listeners: $RUN_DIR/listeners.env"
  echo "log: $LOG_FILE"
}

status() {
  local pid
  if pid=$(running_pid) && port_open "$PORT"; then
    echo "running (pid $pid)"
    echo "bootstrap: 127.0.0.1:$PORT"
    echo "log: $LOG_FILE"
  else
    echo "not running"
    return 1
  fi
}

serialise "${1:-}" "$CACHE_DIR/broker-$PORT.lock"

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  clean) stop; rm -rf "$RUN_DIR" "$CACHE_DIR/broker-$PORT.lock"; echo "broker.sh: removed $RUN_DIR" >&2 ;;
  *) echo "usage: $0 start|stop|status|clean" >&2; exit 2 ;;
esac
