# One image for the operator, the streaming driver, its executors and the maintenance jobs.
# Versions come from the same pins as the local stack, read from the files themselves: uv.lock
# (Python), stack/install/versions.env (uv, Spark, Delta, Scala, spark-avro) and
# stack/install/maven/spark-jars.pom.xml (the connector jars).
#
# Needs BuildKit (cache, secret and bind mounts) and uses the Dockerfile frontend built into Docker
# >= 20.10: there is no `# syntax=` line on purpose, it would pull a frontend image from a registry.
# Behind an HTTPS-intercepting proxy, pass its CA bundle as a build secret; it is mounted only for
# the RUN steps that download and is never stored in a layer:
#   DOCKER_BUILDKIT=1 docker build --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt .
# stack/install/image.sh builds it with no registry at all (a debootstrapped BASE_IMAGE).
#
# Layers, from the least to the most often changed: Debian packages, the locked Python
# dependencies, the connector jars, then the project itself (a code change rebuilds only the last).

ARG BASE_IMAGE=debian:bookworm-slim

# --- OS: Debian's Python 3.11, Java 17, tini; the runtime user ----------------------------------
FROM ${BASE_IMAGE} AS os
# apt's downloads and lists live in cache mounts, never in a layer. Docker Hub's Debian images carry
# docker-clean, which would delete the downloaded packages from that cache after each install.
# /usr/share/man/man1: slim bases exclude man pages, and Java's update-alternatives needs the folder.
RUN --mount=type=cache,id=deltaflow-apt-cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=deltaflow-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/tmp \
    rm -f /etc/apt/apt.conf.d/docker-clean \
 && mkdir -p /usr/share/man/man1 \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 openjdk-17-jre-headless tini \
 && groupadd --gid 185 spark \
 && useradd --uid 185 --gid 185 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin spark

# --- uv, the version stack/install/versions.env pins (only its binary is used, by bind mount) -----
FROM os AS uv
RUN --mount=type=cache,id=deltaflow-apt-cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=deltaflow-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
RUN --mount=type=bind,source=stack/install/versions.env,target=/mnt/versions.env \
    --mount=type=secret,id=ca-bundle,required=false \
    . /mnt/versions.env \
 && if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python3 -m venv /opt/uv \
 && /opt/uv/bin/pip install -q --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}" \
 && /opt/uv/bin/uv --version

# --- The project as a wheel (the runtime stage installs it without its dependencies) ------------
FROM uv AS wheel
COPY pyproject.toml uv.lock README.md /src/
COPY api /src/api
COPY operator /src/operator
COPY spark_runtime /src/spark_runtime
COPY cli /src/cli
RUN --mount=type=cache,id=deltaflow-uv,target=/root/.cache/uv \
    --mount=type=secret,id=ca-bundle,required=false \
    --mount=type=tmpfs,target=/tmp \
    if [ -f /run/secrets/ca-bundle ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle; fi \
 && cd /src \
 && UV_CACHE_DIR=/root/.cache/uv UV_PYTHON_DOWNLOADS=never /opt/uv/bin/uv build --quiet --wheel --python /usr/bin/python3.11 \
      --out-dir /dist

# --- Delta, Kafka-connector, Avro and s3a jars from Maven Central, and the project's s3a:// LogStore,
# as stack/install/spark-jars.sh. The JDK is for the LogStore's few lines of Java; none of this stage
# reaches the runtime image but the jars.
FROM os AS jars
RUN --mount=type=cache,id=deltaflow-apt-cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=deltaflow-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven openjdk-17-jdk-headless
COPY stack/install/versions.env stack/install/maven/spark-jars.pom.xml /build/
COPY spark_runtime/jvm /build/jvm
# Java's truststore for this step only, on a tmpfs over /etc/ssl/certs/java: every certificate of
# the CA-bundle secret (or of the image's own bundle without one), imported by Debian's
# ca-certificates-java in one JVM. Nothing of it reaches a layer.
RUN --mount=type=cache,id=deltaflow-maven,target=/root/.m2 \
    --mount=type=secret,id=ca-bundle,required=false \
    --mount=type=tmpfs,target=/etc/ssl/certs/java \
    --mount=type=tmpfs,target=/tmp \
    bundle=/run/secrets/ca-bundle \
 && if [ ! -f "$bundle" ]; then bundle=/etc/ssl/certs/ca-certificates.crt; fi \
 && mkdir /tmp/ca \
 && awk '/BEGIN CERTIFICATE/ { n++; f = "/tmp/ca/" n ".pem" } f { print > f } /END CERTIFICATE/ { close(f); f = "" }' "$bundle" \
 && ls /tmp/ca/*.pem | sed 's/^/+/' \
    | java -Xmx64m -jar /usr/share/ca-certificates-java/ca-certificates-java.jar >/dev/null \
 && . /build/versions.env \
 && mvn -B -q -Dstyle.color=never -f /build/spark-jars.pom.xml \
      -Dspark.version="$SPARK_VERSION" -Dspark.minor="${SPARK_VERSION%.*}" \
      -Dscala.binary="$SCALA_BINARY" -Ddelta.version="$DELTA_VERSION" \
      -Dspark.avro.version="$SPARK_AVRO_VERSION" -Dhadoop.version="$HADOOP_VERSION" \
      -Daws.sdk.version="$AWS_SDK_VERSION" -Djose4j.version="$JOSE4J_VERSION" \
      -Dmsk.iam.version="$MSK_IAM_VERSION" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory=/jars -DincludeScope=runtime -DexcludeTransitive=false \
 && mvn -B -q -Dstyle.color=never -f /build/jvm/pom.xml -Dbuild.dir=/tmp/jvm \
      -Ddelta.version="$DELTA_VERSION" -Dhadoop.version="$HADOOP_VERSION" \
      -Djackson.version="$JACKSON_VERSION" -Davro.version="$AVRO_VERSION" \
      -Dspark.version="$SPARK_VERSION" -Dspark.minor="${SPARK_VERSION%.*}" \
      -Dscala.binary="$SCALA_BINARY" -Dscala.version="$SCALA_VERSION" \
      -Dkafka.clients.version="$KAFKA_CLIENTS_VERSION" package \
 && cp /tmp/jvm/deltaflow-jvm-*.jar /jars/

# --- Runtime ------------------------------------------------------------------------------------
FROM os
ENV PATH=/opt/deltaflow/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_HOME=/opt/deltaflow/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/deltaflow/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    HOME=/tmp
# The locked dependencies (not the project): the big layer, rebuilt only when uv.lock changes.
# Bytecode is compiled now: the root filesystem is read-only at run time. uv's cache is a cache
# mount (HOME is /tmp from here on, so it is named explicitly); its temp files go to a tmpfs.
RUN --mount=type=bind,from=uv,source=/opt/uv/bin/uv,target=/usr/local/bin/uv \
    --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    --mount=type=cache,id=deltaflow-uv,target=/root/.cache/uv \
    --mount=type=secret,id=ca-bundle,required=false \
    --mount=type=tmpfs,target=/tmp \
    if [ -f /run/secrets/ca-bundle ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle; fi \
 && cd /src \
 && UV_CACHE_DIR=/root/.cache/uv UV_PROJECT_ENVIRONMENT=/opt/deltaflow UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy uv sync --quiet --frozen --no-dev --no-editable --no-install-project \
      --python /usr/bin/python3.11
# Add the connector jars to Spark's own jars folder, leaving out libraries pyspark already ships
# (one copy of each on the classpath), as stack/install/spark-jars.sh does for local runs.
RUN --mount=type=bind,from=jars,source=/jars,target=/mnt/connector-jars \
    for jar in /mnt/connector-jars/*.jar; do \
      base=$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)?\.jar$//'); \
      ls "$SPARK_HOME/jars/$base"-[0-9]*.jar >/dev/null 2>&1 || cp "$jar" "$SPARK_HOME/jars/"; \
    done \
 && for j in delta-spark_ spark-sql-kafka-0-10_ spark-avro_ hadoop-aws- jose4j- aws-msk-iam-auth- deltaflow-jvm-; do \
      ls "$SPARK_HOME/jars/$j"*.jar >/dev/null || exit 1; \
    done
COPY image/entrypoint.sh /usr/local/bin/deltaflow-entrypoint
# The project itself, without dependencies: the only layer a code change rebuilds.
RUN --mount=type=bind,from=uv,source=/opt/uv/bin/uv,target=/usr/local/bin/uv \
    --mount=type=bind,from=wheel,source=/dist,target=/mnt/dist \
    --mount=type=tmpfs,target=/tmp \
    UV_CACHE_DIR=/tmp/uv uv pip install --quiet --no-deps --no-index --compile-bytecode \
      --python /opt/deltaflow/bin/python /mnt/dist/*.whl \
 && deltaflow --help >/dev/null
# A class-data archive of the classes a driver loads (deltaflow_runtime/jvm_archive.py): a
# training run of Spark and Delta on the image's own class path, about a fifth off every driver
# start (a JVM whose class path differs says so once and loads its classes the usual way).
RUN --mount=type=tmpfs,target=/tmp \
    mkdir -p /opt/deltaflow/share \
 && deltaflow jvm-archive --output /opt/deltaflow/share/deltaflow.jsa --work-dir /tmp/training \
 && chmod 0644 /opt/deltaflow/share/deltaflow.jsa
ENV DELTAFLOW_JVM_ARCHIVE=/opt/deltaflow/share/deltaflow.jsa
USER 185:185
# The root filesystem is mounted read-only in every pod Deltaflow creates; /tmp is an emptyDir.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/deltaflow-entrypoint"]
CMD ["--help"]
