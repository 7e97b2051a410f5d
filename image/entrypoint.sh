#!/bin/sh
# Entry point of the Deltaflow image.
#   executor ...  Spark's Kubernetes backend starts executor pods with the argument `executor`
#                 and passes everything through SPARK_* environment variables: start the
#                 executor JVM from them.
#   anything else `deltaflow <command>` (operator, stream, optimize, vacuum, run, crd).
set -eu
if [ "${1:-}" = "executor" ]; then
  shift
  # Extra JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
  java_opts=$(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//' | tr '\n' ' ')
  # The executor's first call (fetching the driver's properties) authenticates with the secret
  # file (spark.authenticate.secret.file), which Spark reads only when spark.master says
  # Kubernetes; the driver's properties, fetched next, carry the master it runs with.
  master="k8s://https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}"
  # shellcheck disable=SC2086 # options are split on purpose
  exec "$JAVA_HOME/bin/java" $java_opts -Dspark.master="$master" \
    -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
    -cp "$SPARK_HOME/jars/*:${SPARK_CLASSPATH:-}" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "$SPARK_EXECUTOR_POD_NAME" "$@"
fi
exec deltaflow "$@"
