#!/usr/bin/env bash
# Resolves the Kafka broker (KRaft) and its logging binding from Maven Central into a classpath
# folder in the cache. The broker is started by the test harness (stack/devstack/kafka.py).
STEP_NAME=kafka
RERUN="stack/install/kafka.sh"
source "$(dirname "$0")/lib.sh"

POM="$INSTALL_DIR/maven/kafka.pom.xml"
DEST="$(cache_entry kafka "v$KAFKA_VERSION-$(recipe_hash "$0" "$POM" "$LOG4J2_VERSION")")"

build() {
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION with log4j2 $LOG4J2_VERSION"
  maven_copy "$POM" "$1/libs" -Dkafka.version="$KAFKA_VERSION" -Dlog4j2.version="$LOG4J2_VERSION" || return 1
  ls "$1/libs" | grep -q "^kafka_2.13-$KAFKA_VERSION.jar$" || { log "kafka_2.13 jar missing"; return 1; }
  log "$(ls "$1/libs" | wc -l) jars"
}

if is_complete "$DEST"; then
  log "Kafka $KAFKA_VERSION already resolved ($DEST)"
else
  log "resolving Kafka $KAFKA_VERSION into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/libs"
