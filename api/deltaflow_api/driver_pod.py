"""What the operator gives a driver pod and the runtime reads there: environment variables and
Spark's network settings (the operator writes these into the driver's configuration and its
NetworkPolicies; the runtime applies them again at start, so a config stored before a change
cannot turn them off). One owner, both sides read it."""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_api.v1alpha1 import KafkaAuth, SecretKeyRef

# Where the operator mounts the pod's configuration (the pipeline config, Spark's, the Kafka CA).
CONFIG_MOUNT = "/etc/deltaflow"


@dataclass(frozen=True)
class KafkaSecretFile:
    """Where a Secret key that spec.source.auth references is mounted, in every pod of the
    stream: one secret volume per field (fields may name different Secrets), read-only. No
    Kafka secret travels as an environment variable or a Spark option: Java clients read the
    file through Kafka's DirectoryConfigProvider, the Python clients read it themselves."""

    field: str  # under spec.source.auth, e.g. "oauthBearer.clientSecret"
    volume: str  # the pod volume, also the folder's name
    file: str

    @property
    def directory(self) -> str:
        return f"{CONFIG_MOUNT}/{self.volume}"

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.file}"


KAFKA_SECRET_FILES = (
    KafkaSecretFile("caCertificate", "kafka-ca", "ca.crt"),
    KafkaSecretFile("clientCertificate.certificate", "kafka-client-cert", "tls.crt"),
    KafkaSecretFile("clientCertificate.key", "kafka-client-key", "tls.key"),
    KafkaSecretFile("clientCertificate.keyPassword", "kafka-key-password", "password"),
    KafkaSecretFile("username", "kafka-username", "username"),
    KafkaSecretFile("password", "kafka-password", "password"),
    KafkaSecretFile("oauthBearer.clientSecret", "kafka-client-secret", "client-secret"),
    KafkaSecretFile("oauthBearer.tokenEndpointCaCertificate", "kafka-token-ca", "ca.crt"),
)
KAFKA_SECRET_VOLUMES = tuple(f.volume for f in KAFKA_SECRET_FILES)


def kafka_secret_refs(auth: KafkaAuth | None) -> list[tuple[KafkaSecretFile, SecretKeyRef]]:
    """The Secret keys ``auth`` references, each with where it is mounted."""
    if auth is None:
        return []
    found: list[tuple[KafkaSecretFile, SecretKeyRef]] = []
    for secret_file in KAFKA_SECRET_FILES:
        node: object = auth
        for part in secret_file.field.split("."):
            node = getattr(node, _snake(part), None) if node is not None else None
        if isinstance(node, SecretKeyRef):
            found.append((secret_file, node))
    return found


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


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
# That secret is the stream's own Secret (<name>-spark-auth, made by the operator, which never
# reads it), mounted as a file in the driver and its executors: Spark then puts no
# _SPARK_AUTH_SECRET value in the executor pods, which every driver of the namespace may read
# (Spark's own role lists pods namespace-wide).
SPARK_AUTH_VOLUME = "spark-auth"
SPARK_AUTH_KEY = "secret"
SPARK_AUTH_DIRECTORY = f"{CONFIG_MOUNT}/{SPARK_AUTH_VOLUME}"
SPARK_AUTH_FILE = f"{SPARK_AUTH_DIRECTORY}/{SPARK_AUTH_KEY}"
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
