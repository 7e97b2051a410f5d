"""What the operator gives a driver pod and the runtime reads there: environment variables and
Spark's network settings (the operator writes these into the driver's configuration and its
NetworkPolicies; the runtime applies them again at start, so a config stored before a change
cannot turn them off). One owner, both sides read it."""

from __future__ import annotations

# Where the operator mounts the pod's configuration (the pipeline config, Spark's, the Kafka CA).
CONFIG_MOUNT = "/etc/deltaflow"
# spec.source.auth.caCertificate, mounted as this file.
KAFKA_CA_DIR = f"{CONFIG_MOUNT}/kafka-ca"
KAFKA_CA_FILE_NAME = "ca.crt"
KAFKA_CA_FILE = f"{KAFKA_CA_DIR}/{KAFKA_CA_FILE_NAME}"

# The driver's own address and master: the operator sets these variables on the driver pod, the
# runtime resolves them at start (neither is known before the pod runs).
ENV_POD_IP = "DELTAFLOW_POD_IP"
# The pod's own name (downward API): a stream pool reports on its own pod.
ENV_POD_NAME = "DELTAFLOW_POD_NAME"
ENV_SPARK_MASTER = "DELTAFLOW_SPARK_MASTER"
IN_CLUSTER_MASTER = "k8s://in-cluster"
# The driver pod's mode (deltaflow_api.v1alpha1.PlacementStatus.mode), for the operator's eye.
SPARK_MODE_ANNOTATION = "deltaflow.io/spark-mode"


def local_master(task_slots: int) -> str:
    """The master of a driver that runs Spark in local mode with ``task_slots`` task threads."""
    return f"local[{max(1, task_slots)}]"


# Kafka's SASL credentials, filled by the kubelet from the spec's secretKeyRefs.
ENV_KAFKA_USERNAME = "DELTAFLOW_KAFKA_USERNAME"
ENV_KAFKA_PASSWORD = "DELTAFLOW_KAFKA_PASSWORD"
# The operator's Spark properties for the driver (spark-defaults.conf, from the ConfigMap): the
# runtime reads the file itself. Handed to spark-submit as SPARK_CONF_DIR, the folder would go on
# the JVM's class path, and Java refuses a class-data archive (jvm_archive) for a class path
# holding a non-empty directory: every driver would start without it.
ENV_SPARK_DEFAULTS = "DELTAFLOW_SPARK_DEFAULTS"
SPARK_DEFAULTS_FILE = f"{CONFIG_MOUNT}/spark/spark-defaults.conf"
# The port the driver serves its Prometheus metrics on.
ENV_METRICS_PORT = "DELTAFLOW_METRICS_PORT"

# The ports the stream's NetworkPolicies open (builders.network_policy): the driver's RPC, and the
# block manager of the driver and of every executor (pinned: Spark picks a random one otherwise).
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079


# Who may talk to the driver and the executors, and on which ports; spec.sparkConf cannot change
# these (the operator's spark_conf applies them last, and so does the runtime's session).
# Only holders of the application's secret: Spark makes one at start (spark.authenticate on
# Kubernetes) and gives it to the executors it creates in their pod's environment
# (_SPARK_AUTH_SECRET), so a pod that reaches the ports still cannot register as an
# executor, fetch blocks or receive tasks (which carry the Kafka credentials). Traffic is
# encrypted and authenticated: AES-GCM (CTR, Spark's default, lets a man in the middle flip
# bits), the key derivation Spark's docs recommend (engine 2), no fallback to SASL DIGEST-MD5
# (only old external shuffle services need it, and none is used). The UI goes: Spark's
# authentication does not cover it, and nothing here reads it.
NETWORK_CONF = {
    "spark.authenticate": "true",
    "spark.network.crypto.enabled": "true",
    "spark.network.crypto.cipher": "AES/GCM/NoPadding",
    "spark.network.crypto.authEngineVersion": "2",
    "spark.network.crypto.saslFallback": "false",
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "0.0.0.0",
    "spark.driver.port": str(DRIVER_PORT),
    "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
    "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
}
