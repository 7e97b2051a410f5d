#!/usr/bin/env bash
# Resolves the Delta, Kafka-connector (with its OAUTHBEARER and AWS_MSK_IAM extras), Avro and s3a jars
# for Spark from Maven Central into the cache, and builds the project's JVM jar (spark_runtime/jvm: the
# s3a:// LogStore, strict JSON, from_json over bytes, the Kafka connection check). Jars that the
# pyspark install already ships (Spark itself, Scala, Jackson, Hadoop's client, netty, ...) are left
# out, so the classpath holds one copy of each library.
STEP_NAME=spark-jars
RERUN="stack/install/spark-jars.sh"
source "$(dirname "$0")/lib.sh"

POM="$INSTALL_DIR/maven/spark-jars.pom.xml"
JVM_SRC="$REPO_ROOT/spark_runtime/jvm"
SPARK_MINOR=$(cut -d. -f1,2 <<<"$SPARK_VERSION")
DEST="$(cache_entry spark-jars "spark$SPARK_VERSION-delta$DELTA_VERSION-$(recipe_hash "$0" "$POM" "$JVM_SRC/pom.xml" "$JVM_SRC"/src/main/java/io/deltaflow/*/*.java "avro$SPARK_AVRO_VERSION-hadoop$HADOOP_VERSION-sdk$AWS_SDK_VERSION-jackson$JACKSON_VERSION-avro$AVRO_VERSION-scala$SCALA_VERSION-kafka$KAFKA_CLIENTS_VERSION-jose4j$JOSE4J_VERSION-msk$MSK_IAM_VERSION")")"
PYSPARK_JARS="${PYSPARK_JARS:-$REPO_ROOT/.venv/lib/python3.11/site-packages/pyspark/jars}"

build() {
  local out=$1
  [ -d "$PYSPARK_JARS" ] || { log "pyspark is not installed at $PYSPARK_JARS: run stack/install/python.sh first"; return 1; }
  [ -f "$PYSPARK_JARS/hadoop-client-api-$HADOOP_VERSION.jar" ] || {
    log "pyspark does not ship Hadoop $HADOOP_VERSION ($(ls "$PYSPARK_JARS" | grep hadoop-client-api)): set HADOOP_VERSION in versions.env to match"
    return 1
  }
  [ -f "$PYSPARK_JARS/jackson-databind-$JACKSON_VERSION.jar" ] || {
    log "pyspark does not ship Jackson $JACKSON_VERSION ($(ls "$PYSPARK_JARS" | grep jackson-databind)): set JACKSON_VERSION in versions.env to match"
    return 1
  }
  [ -f "$PYSPARK_JARS/scala-library-$SCALA_VERSION.jar" ] || {
    log "pyspark does not ship Scala $SCALA_VERSION ($(ls "$PYSPARK_JARS" | grep scala-library)): set SCALA_VERSION in versions.env to match"
    return 1
  }
  [ -f "$PYSPARK_JARS/avro-$AVRO_VERSION.jar" ] || {
    log "pyspark does not ship Avro $AVRO_VERSION ($(ls "$PYSPARK_JARS" | grep '^avro-[0-9]')): set AVRO_VERSION in versions.env to match"
    return 1
  }
  log "resolving delta-spark_${SPARK_MINOR}_$SCALA_BINARY:$DELTA_VERSION, spark-sql-kafka-0-10_$SCALA_BINARY:$SPARK_VERSION and spark-avro_$SCALA_BINARY:$SPARK_AVRO_VERSION"
  maven_copy "$POM" "$out/all" -Dspark.version="$SPARK_VERSION" -Dspark.minor="$SPARK_MINOR" \
    -Dscala.binary="$SCALA_BINARY" -Ddelta.version="$DELTA_VERSION" \
    -Dspark.avro.version="$SPARK_AVRO_VERSION" -Dhadoop.version="$HADOOP_VERSION" \
    -Daws.sdk.version="$AWS_SDK_VERSION" -Djose4j.version="$JOSE4J_VERSION" \
    -Dmsk.iam.version="$MSK_IAM_VERSION" || return 1
  mkdir -p "$out/jars"
  local jar base kept=0 skipped=0
  for jar in "$out"/all/*.jar; do
    base=$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)?\.jar$//')
    if compgen -G "$PYSPARK_JARS/$base-[0-9]*.jar" >/dev/null; then
      skipped=$((skipped + 1))
    else
      mv "$jar" "$out/jars/"
      kept=$((kept + 1))
    fi
  done
  rm -rf "$out/all"
  [ -f "$out/jars/kafka-clients-$KAFKA_CLIENTS_VERSION.jar" ] || {
    log "spark-sql-kafka $SPARK_VERSION does not bring kafka-clients $KAFKA_CLIENTS_VERSION ($(ls "$out/jars" | grep kafka-clients)): set KAFKA_CLIENTS_VERSION in versions.env to match"
    return 1
  }
  log "building the runtime's JVM jar (spark_runtime/jvm: s3a:// LogStore, strict JSON, from_json over bytes, Avro body check, the stream's append, Kafka connection check)"
  mvn -B -q -Dstyle.color=never -f "$JVM_SRC/pom.xml" -Dmaven.repo.local="$MAVEN_REPO" \
    -Dbuild.dir="$out/jvm-build" -Ddelta.version="$DELTA_VERSION" -Djackson.version="$JACKSON_VERSION" -Davro.version="$AVRO_VERSION" \
    -Dhadoop.version="$HADOOP_VERSION" -Dspark.version="$SPARK_VERSION" -Dspark.minor="$SPARK_MINOR" -Dscala.binary="$SCALA_BINARY" -Dscala.version="$SCALA_VERSION" \
    -Dkafka.clients.version="$KAFKA_CLIENTS_VERSION" package >&2 || return 1
  mv "$out"/jvm-build/deltaflow-jvm-*.jar "$out/jars/"
  rm -rf "$out/jvm-build"
  log "kept $kept jars, left out $skipped that pyspark already ships"
  # The same list as the Dockerfile's check of the image (tests/unit/test_image.py).
  local j
  for j in delta-spark_ spark-sql-kafka-0-10_ spark-avro_ hadoop-aws- jose4j- aws-msk-iam-auth- deltaflow-jvm-; do
    compgen -G "$out/jars/$j*.jar" >/dev/null || { log "${j%[-_]} jar missing"; return 1; }
  done
}

if is_complete "$DEST"; then
  log "Spark jars already resolved ($DEST)"
else
  log "resolving Spark jars into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/jars"
