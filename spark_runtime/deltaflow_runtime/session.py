"""The SparkSession: Delta enabled, tables kept readable by every Delta reader, object-store access
from the spec, and (for local runs) the Delta/Kafka/Avro jars found without any download.

On Kubernetes the operator's ``spark-defaults.conf`` (``DELTAFLOW_SPARK_DEFAULTS``, read here)
sets the executors; this module adds what the data plane itself depends on, and what only the
driver pod knows (no cluster DNS needed): the master, made from
``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` when ``DELTAFLOW_SPARK_MASTER`` is
``k8s://in-cluster``, and ``spark.driver.host``, the pod's IP from
``DELTAFLOW_POD_IP``, which executors connect to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from deltaflow_api import DeltaIngestion
from deltaflow_api.driver_pod import (
    ENV_POD_IP,
    ENV_SPARK_DEFAULTS,
    ENV_SPARK_MASTER,
    IN_CLUSTER_MASTER,
    NETWORK_CONF,
)
from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import Storage
from deltaflow_runtime import object_store
from deltaflow_runtime.cost import COST_PLUGIN
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.table import SNAPSHOT_PARTITIONS, UNKNOWN_SIZE_SNAPSHOT_PARTITIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_SPARK_JARS = "DELTAFLOW_SPARK_JARS"
ENV_CACHE = "DELTAFLOW_CACHE"
# Set by the kubelet in every container: the API server's Service address, as an IP.
ENV_K8S_HOST = "KUBERNETES_SERVICE_HOST"
ENV_K8S_PORT = "KUBERNETES_SERVICE_PORT"
JAR_PREFIXES = (
    "delta-spark_",
    "spark-sql-kafka-0-10_",
    "spark-avro_",
    "hadoop-aws-",
    "deltaflow-jvm-",
)

# What the data plane's correctness rests on; spec.sparkConf cannot turn these off.
PLUGINS = "spark.plugins"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
PINNED_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # VACUUM refuses a retention under the table's (168 h by default) unless the spec overrides.
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
    # Delta 4.x ignores VACUUM's retention argument (other than 0) by default and applies the
    # table's deletedFileRetentionDuration instead: the spec's retentionHours must count.
    "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false",
    # The streaming checkpoint's files go through the cached FileSystem. Spark's default
    # (FileContext-based) builds an uncached S3A instance for each query start (offset and commit
    # logs: 10 AWS SDK threads a start, never closed), so every trigger re-plan, pool member
    # restart and move leaked threads until a pool was OOM-killed (FL4, bench/README.md). On S3
    # neither manager renames atomically; exactly once rests on the Delta txn, not on a rename.
    CHECKPOINT_FILE_MANAGER: "org.apache.spark.sql.execution.streaming.checkpointing."
    "FileSystemBasedCheckpointFileManager",
}
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# A driver pod in local mode (the operator placed it there: its measured work fits the driver
# alone) compiles with C1 only. A small batch is Spark's and Delta's fixed machinery, run once
# per batch, and the C2 compiler threads kept burning CPU batch after batch: measured with
# bench/run.sh trickle --profile (10 records/s, 10 s trigger, 12 warm-up and 12 measured
# batches, single runs), 4.88 CPU-s per batch of which the compiler threads 3.04 (2.58 after 4
# warm-up batches: not a warm-up); with C1 alone 2.09-2.77, of which 0.22-0.27. C1's slower peak
# code shows in a burst (not measured yet), and a burst moves the stream to executor pods, whose
# JVMs keep C2. The spec's own extraJavaOptions come after, so a user's choice wins.
LOCAL_MODE_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
# Defaults the spec may change.
DEFAULT_CONF = {
    # Protocol-simple tables (reader 1 / writer 2): readable by delta-rs and older readers.
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    # VACUUM records what it deleted in the table history (the maintenance report reads it).
    "spark.databricks.delta.vacuum.logging.enabled": "true",
    # Tasks of Delta's state reconstruction (its default is 50) for start-up reads and the
    # maintenance jobs; the stream's writer sizes it per table for each commit
    # (table.snapshot_partitions) unless spec.sparkConf sets it.
    SNAPSHOT_PARTITIONS: str(UNKNOWN_SIZE_SNAPSHOT_PARTITIONS),
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # A batch's refused records are cached for the dead-letter pass's count and write and
    # dropped after it: compressing them costs CPU on every record and saves memory for seconds.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


class JarsNotFoundError(DeltaflowError):
    """The Delta/Kafka jars for a local run could not be found."""


class InClusterConfigError(DeltaflowError):
    """The driver was told to use the in-cluster master but the pod lacks what makes it."""

    reason = FailureReason.NO_KUBERNETES_MASTER


def url_host(host: str) -> str:
    """``host`` as it goes into a URL or host:port: an IPv6 address gets brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def in_cluster_master(env: Mapping[str, str]) -> str:
    """``k8s://https://<host>:<port>`` of the API server, from the variables the kubelet sets:
    an IP, so it works without cluster DNS (unlike ``kubernetes.default.svc``)."""
    host, port = env.get(ENV_K8S_HOST, "").strip(), env.get(ENV_K8S_PORT, "").strip()
    if not host or not port.isdigit():
        raise InClusterConfigError(
            f"{ENV_SPARK_MASTER}={IN_CLUSTER_MASTER} but {ENV_K8S_HOST}/{ENV_K8S_PORT} are "
            f"{host or 'unset'}/{port or 'unset'}: the kubelet sets them in every pod; outside "
            "Kubernetes pass --master instead"
        )
    return f"k8s://https://{url_host(host)}:{port}"


def pod_conf(env: Mapping[str, str]) -> dict[str, str]:
    """The master and the driver's address, from the driver pod's environment; empty elsewhere
    (local runs, maintenance jobs)."""
    conf: dict[str, str] = {}
    master = env.get(ENV_SPARK_MASTER, "").strip()
    if master == IN_CLUSTER_MASTER:
        conf["spark.master"] = in_cluster_master(env)
    elif master:
        conf["spark.master"] = master
    pod_ip = env.get(ENV_POD_IP, "").strip()
    if pod_ip:
        # Spark's own default for this (Utils.localHostName) brackets IPv6 addresses too.
        conf["spark.driver.host"] = url_host(pod_ip)
    return conf


def local_mode_pod(env: Mapping[str, str]) -> bool:
    """Whether this is a driver pod the operator runs in local mode (its master variable names
    a local master: builders.driver.spark_master)."""
    return env.get(ENV_SPARK_MASTER, "").strip().startswith("local")


def spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The operator's Spark properties for this driver (``DELTAFLOW_SPARK_DEFAULTS``, the
    spark-defaults.conf it wrote: ``key value`` lines, ``#`` comments), lowest in precedence as
    spark-submit's own defaults file would be; empty outside a driver pod."""
    path = env.get(ENV_SPARK_DEFAULTS, "").strip()
    if not path:
        return {}
    conf: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, _, value = text.partition(" ")
        conf[key] = value.strip()
    return conf


def runtime_conf(
    ingestion: DeltaIngestion,
    *,
    master: str | None = None,
    extra: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark properties for the stream or a maintenance job (``master`` wins, then ``extra``,
    then the pod's master and address, then the spec)."""
    return _process_conf(
        f"deltaflow-{ingestion.namespace}-{ingestion.name}",
        {**object_store.storage_conf(ingestion.spec.sink.storage), **ingestion.spec.spark_conf},
        master=master,
        extra=extra,
        env=env,
    )


# The stream's Spark secret as files (builders.driver.spark_conf): for executors on Kubernetes.
AUTH_SECRET_FILE_KEYS = (
    "spark.authenticate.secret.file",
    "spark.authenticate.secret.driver.file",
    "spark.authenticate.secret.executor.file",
)

# A stream pool's driver runs for months with many queries: the UI and its retained history
# (every SQL execution of every member's batches) would fill its heap.
POOL_CONF = {
    "spark.scheduler.mode": "FAIR",  # each member's batches in a scheduler pool of its own
    "spark.ui.enabled": "false",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "10",
    # A member's query reports progress every batch; Spark keeps this many per query.
    "spark.sql.streaming.numRecentProgressUpdates": "10",
}


def pool_conf(
    namespace: str,
    storage: Storage | None,
    *,
    master: str | None = None,
    extra: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark properties of a stream pool's driver: no member's ``sparkConf`` (each member sets
    its session settings on a session of its own), the members' shared object store."""
    return _process_conf(
        f"deltaflow-pool-{namespace}",
        {**object_store.storage_conf(storage), **POOL_CONF},
        master=master,
        extra=extra,
        env=env,
    )


def _process_conf(
    app_name: str,
    own: Mapping[str, str],
    *,
    master: str | None,
    extra: Mapping[str, str] | None,
    env: Mapping[str, str] | None,
) -> dict[str, str]:
    e = os.environ if env is None else env
    conf = {
        **spark_defaults(e),
        "spark.app.name": app_name,
        **DEFAULT_CONF,
        **own,
        **pod_conf(e),
        **(extra or {}),
        **PINNED_CONF,
        **object_store.PINNED_COMMIT_CONF,
    }
    if master is not None:
        conf["spark.master"] = master
    if not conf.get("spark.master", "").startswith("k8s://"):
        # Spark refuses a secret file outside Kubernetes mode ("only allowed in Kubernetes
        # mode"), and a driver in local mode has no executors to share a secret with.
        for key in AUTH_SECRET_FILE_KEYS:
            conf.pop(key, None)
    if local_mode_pod(e) and conf.get("spark.master", "").startswith("local"):
        options = conf.get(DRIVER_JAVA_OPTIONS, "")
        conf[DRIVER_JAVA_OPTIONS] = f"{LOCAL_MODE_JAVA_OPTIONS} {options}".strip()
    # The executors' CPU and memory for the stream's cost (cost.py), beside any plugin the
    # spec names.
    plugins = [p.strip() for p in conf.get(PLUGINS, "").split(",") if p.strip()]
    conf[PLUGINS] = ",".join([*plugins, COST_PLUGIN] if COST_PLUGIN not in plugins else plugins)
    if conf.get("spark.master", "").startswith("k8s://"):
        # The operator's spark-defaults.conf holds these too; spec.sparkConf, set above on top of
        # that file, must not turn authentication off or move the ports its NetworkPolicies open.
        conf.update(NETWORK_CONF)
    return conf


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where the stack's installs live (``DELTAFLOW_CACHE``, else ~/.cache/deltaflow)."""
    return Path(env.get(ENV_CACHE) or Path.home() / ".cache" / "deltaflow")


def find_local_jars(env: Mapping[str, str] | None = None) -> list[str]:
    """Jars a local run must add to Spark, found without downloading: ``DELTAFLOW_SPARK_JARS``
    (a directory or comma-separated jars), else the stack's cache (``stack/install``). Empty when
    pyspark itself ships them (the container image)."""
    e = os.environ if env is None else env
    import pyspark

    shipped = Path(pyspark.__file__).parent / "jars"
    if all(any(shipped.glob(f"{p}*.jar")) for p in JAR_PREFIXES[:2]):
        return []
    listed = e.get(ENV_SPARK_JARS)
    if listed:
        path = Path(listed)
        if path.is_dir():
            return sorted(str(j) for j in path.glob("*.jar"))
        return [j for j in listed.split(",") if j]
    entries = sorted(
        (d for d in (cache_dir(e) / "spark-jars").glob("*") if (d / ".complete").exists()),
        key=lambda d: d.stat().st_mtime,
    )
    for entry in reversed(entries):
        jars = sorted(str(j) for j in (entry / "jars").glob("*.jar"))
        if all(any(Path(j).name.startswith(p) for j in jars) for p in JAR_PREFIXES[:2]):
            return jars
    raise JarsNotFoundError(
        "no Delta/Kafka jars for Spark: run `bash stack/install/spark-jars.sh` (cached, no "
        f"download at run time) or set {ENV_SPARK_JARS} to a directory of jars"
    )


def local_conf(work_dir: Path, cores: int | None = None) -> dict[str, str]:
    """Settings for Spark local mode (``deltaflow run``): jars, scratch space, no UI."""
    conf = {
        "spark.master": f"local[{cores}]" if cores else "local[*]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.local.dir": str(work_dir / "spark-local"),
        "spark.sql.warehouse.dir": str(work_dir / "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work_dir / 'derby'}",
    }
    jars = find_local_jars()
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf


def build_session(conf: Mapping[str, str]) -> SparkSession:
    """Create (or join) the SparkSession with ``conf``; Spark's own logging at WARN."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
