# syntax=docker/dockerfile:1.7
# One image for the operator, the streaming driver, its executors and the maintenance jobs.
# Versions come from the same pins as the local stack: uv.lock (Python), and
# stack/install/versions.env + stack/install/maven/spark-jars.pom.xml (Spark connector jars).

# --- Python environment, exactly as locked ------------------------------------------------------
FROM python:3.11-slim-bookworm AS python-env
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY operator ./operator
COPY spark_runtime ./spark_runtime
ENV UV_PROJECT_ENVIRONMENT=/opt/deltaflow UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1
RUN uv sync --frozen --no-dev --no-editable --python /usr/local/bin/python3.11

# --- Delta, Kafka-connector and Avro jars from Maven Central -----------------------------------
FROM maven:3.9-eclipse-temurin-17 AS jars
COPY stack/install/versions.env stack/install/maven/spark-jars.pom.xml /build/
RUN . /build/versions.env && mvn -B -q -f /build/spark-jars.pom.xml \
      -Dspark.version="$SPARK_VERSION" -Dspark.minor="${SPARK_VERSION%.*}" \
      -Dscala.binary="$SCALA_BINARY" -Ddelta.version="$DELTA_VERSION" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory=/jars -DincludeScope=runtime

# --- Runtime ------------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 185 spark \
 && useradd --uid 185 --gid 185 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin spark
COPY --from=python-env /opt/deltaflow /opt/deltaflow
ENV PATH=/opt/deltaflow/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_HOME=/opt/deltaflow/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/deltaflow/bin/python \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Add the connector jars to Spark's own jars folder, leaving out libraries pyspark already ships
# (one copy of each on the classpath), as stack/install/spark-jars.sh does for local runs.
COPY --from=jars /jars /tmp/connector-jars
RUN for jar in /tmp/connector-jars/*.jar; do \
      base=$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)?\.jar$//'); \
      ls "$SPARK_HOME/jars/$base"-[0-9]*.jar >/dev/null 2>&1 || cp "$jar" "$SPARK_HOME/jars/"; \
    done && rm -rf /tmp/connector-jars
COPY image/entrypoint.sh /usr/local/bin/deltaflow-entrypoint
USER 185:185
# The root filesystem is mounted read-only in every pod Deltaflow creates; /tmp is an emptyDir.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/deltaflow-entrypoint"]
CMD ["--help"]
