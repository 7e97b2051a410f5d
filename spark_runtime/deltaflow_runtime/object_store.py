"""s3a:// tables: the Hadoop settings made from ``spec.sink.storage``, and a start-up probe that
turns the object store's failures into errors naming the bucket and the endpoint.

Credentials never enter Spark's or Hadoop's configuration (where the UI, event logs and error
messages could show them): with keys in the spec, the operator puts them in the pod's environment
from their Secret, and S3A reads them with the SDK's environment provider, on the driver and on
every executor. Without keys, the SDK's default chain runs (web identity for workload identity,
then the instance/container roles).

Every s3a:// commit goes through ``io.deltaflow.storage.S3ConditionalLogStore`` (see
``spark_runtime/jvm``): a conditional PUT, so the stream and a maintenance job writing the
same table in two processes can never both create the same ``_delta_log`` version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import Storage
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.jvm import hadoop_conf, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltaflow_runtime.config import Pipeline

LOGSTORE_CLASS = "io.deltaflow.storage.S3ConditionalLogStore"
# file:// tables (local disks, PersistentVolumes, NFS): commits published by link(2).
LOCAL_LOGSTORE_CLASS = "io.deltaflow.storage.LocalLinkLogStore"
ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
DEFAULT_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
DEFAULT_REGION = "us-east-1"
OBJECT_STORE_SCHEMES = ("s3a", "s3")

# For every writer, whatever the spec says: what keeps two writers (the stream and its OPTIMIZE
# job) from losing a commit, on the object store and on a file system.
PINNED_COMMIT_CONF = {
    "spark.delta.logStore.s3a.impl": LOGSTORE_CLASS,
    "spark.delta.logStore.s3.impl": LOGSTORE_CLASS,
    "spark.delta.logStore.file.impl": LOCAL_LOGSTORE_CLASS,
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
}
# Defaults the spec's sparkConf may change.
DEFAULT_S3_CONF = {
    # The classic input stream: Hadoop 3.5's default "analytics" stream is new and needs more of
    # the SDK than S3A's core.
    "spark.hadoop.fs.s3a.input.stream.type": "classic",
}

_PATH = re.compile(r"^(?P<scheme>[a-z0-9]+)://(?P<bucket>[^/]+)(?P<key>/.*)?$")


def bucket_of(path: str) -> str | None:
    """The bucket of an s3a:// or s3:// path; None for any other path."""
    match = _PATH.match(path)
    if match is None or match["scheme"] not in OBJECT_STORE_SCHEMES:
        return None
    return match["bucket"]


def storage_conf(storage: Storage | None) -> dict[str, str]:
    """Spark properties for s3a:// from ``spec.sink.storage`` (empty without it). With keys in
    the spec, S3A reads them from the environment; their values never enter the conf."""
    if storage is None:
        return {}
    conf = {
        **DEFAULT_S3_CONF,
        "spark.hadoop.fs.s3a.path.style.access": str(storage.path_style_access).lower(),
    }
    if storage.endpoint is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = storage.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            storage.endpoint.startswith("https://")
        ).lower()
    # S3A needs a region with a custom endpoint (third_party_stores.md); S3 itself finds it.
    region = storage.region or (DEFAULT_REGION if storage.endpoint is not None else None)
    if region is not None:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if storage.access_key_id is not None:
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = ENV_PROVIDER
    else:
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = DEFAULT_CHAIN
    return conf


class ObjectStoreError(DeltaflowError):
    """The object store refused or could not be reached; ``reason`` is the status reason."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message, reason)


_NO_BUCKET = "the bucket does not exist: create it, or fix the bucket in the path"
# Java exception class (simple name) or message fragment -> (reason, what to check).
_CAUSES: tuple[tuple[str, FailureReason, str], ...] = (
    # The store's own error codes first: they say more than the exception class around them.
    (
        "InvalidAccessKeyId",
        FailureReason.OBJECT_STORE_ACCESS_DENIED,
        "the access key is not known to the store: check the Secret that "
        "spec.sink.storage.accessKeyId names",
    ),
    (
        "SignatureDoesNotMatch",
        FailureReason.OBJECT_STORE_ACCESS_DENIED,
        "the secret key is wrong: check the Secret that spec.sink.storage.secretAccessKey names",
    ),
    ("NoSuchBucket", FailureReason.BUCKET_NOT_FOUND, _NO_BUCKET),
    ("UnknownStoreException", FailureReason.BUCKET_NOT_FOUND, _NO_BUCKET),
    (
        "NoAuthWithAWSException",
        FailureReason.OBJECT_STORE_NO_CREDENTIALS,
        "no credentials: set spec.sink.storage.accessKeyId/secretAccessKey (Secret references) "
        "or give the pod a workload identity",
    ),
    (
        "AccessDeniedException",
        FailureReason.OBJECT_STORE_ACCESS_DENIED,
        "access denied: check the keys in the Secret that spec.sink.storage.accessKeyId/"
        "secretAccessKey name, and the bucket's policy",
    ),
)
_UNREACHABLE = (
    "ConnectException",
    "Connection refused",
    "UnknownHostException",
    "SdkClientException",
    "ConnectTimeout",
    "timed out",
)


def classify(error_text: str) -> tuple[FailureReason, str]:
    """(reason, advice) for the text of a failed probe (its Java exception chain)."""
    for marker, reason, advice in _CAUSES:
        if marker in error_text:
            return reason, advice
    if any(marker in error_text for marker in _UNREACHABLE):
        return (
            FailureReason.OBJECT_STORE_UNREACHABLE,
            "the endpoint does not answer: check spec.sink.storage.endpoint and the network "
            "between the pod and the store",
        )
    return FailureReason.OBJECT_STORE_ERROR, "the store refused the request"


def probe_paths(paths: Iterable[str]) -> list[str]:
    """The object-store paths among ``paths`` (one per bucket), in a stable order."""
    seen: dict[str, str] = {}
    for path in paths:
        bucket = bucket_of(path)
        if bucket is not None and bucket not in seen:
            seen[bucket] = path
    return list(seen.values())


def check_pipeline_access(spark: SparkSession, pipeline: Pipeline) -> None:
    """``check_access`` for a pipeline: its checkpoint, its table and dead-letter table, on
    its spec's endpoint (every command that runs a pipeline starts with it)."""
    ident, storage = pipeline.identity, pipeline.ingestion.spec.sink.storage
    check_access(
        spark,
        (ident.checkpoint_path,),
        storage.endpoint if storage is not None else None,
        tables=(ident.table_path, ident.dead_letter_table_path),
    )


def check_access(
    spark: SparkSession,
    paths: Iterable[str],
    endpoint: str | None,
    *,
    tables: Iterable[str] = (),
) -> None:
    """Probe each bucket behind ``paths`` once, with few retries, before the stream starts; and
    for each bucket holding one of ``tables``, that the store honours conditional PUTs (the
    commits' safety with several writers rests on it).

    Raises:
        ObjectStoreError: naming the bucket, the endpoint and what to check.
    """
    tables = probe_paths(tables)
    targets = probe_paths([*tables, *paths])
    if not targets:
        return
    java: Any = jvm(spark)
    conf = java.org.apache.hadoop.conf.Configuration(hadoop_conf(spark))
    # Fail in seconds, not after S3A's minutes of retries.
    for key, value in (
        ("fs.s3a.attempts.maximum", "1"),
        ("fs.s3a.retry.limit", "1"),
        ("fs.s3a.connection.establish.timeout", "15s"),  # S3A's floor
        ("fs.s3a.connection.timeout", "10s"),
    ):
        conf.set(key, value)
    for path in targets:
        jpath = java.org.apache.hadoop.fs.Path(path)
        try:
            fs = java.org.apache.hadoop.fs.FileSystem.newInstance(jpath.toUri(), conf)
            try:
                fs.exists(jpath)
                unsafe = (
                    java.io.deltaflow.storage.S3ConditionalLogStore.probeConditionalCreate(
                        fs, jpath
                    )
                    if path in tables
                    else None
                )
            finally:
                fs.close()
        except Exception as error:  # py4j wraps the Java exception; its text names the class
            text = str(error)
            reason, advice = classify(text)
            where = f"endpoint {endpoint}" if endpoint else "the default AWS endpoint"
            detail = _java_message(text)
            raise ObjectStoreError(
                reason, f"bucket {bucket_of(path)!r} at {where}: {advice} ({detail})"
            ) from None
        if unsafe:
            raise ObjectStoreError(
                FailureReason.CONDITIONAL_PUT_IGNORED,
                f"bucket {bucket_of(path)!r}: {unsafe}. Nothing was written. Use a store that "
                "honours If-None-Match on PUT (AWS S3, MinIO and most current S3-compatible "
                "servers do), or upgrade this one.",
            )


def _java_message(text: str) -> str:
    """The first line of a Java exception text that says what happened, shortened."""
    for raw in text.splitlines():
        line = raw.strip().lstrip(": ")
        if line and not line.startswith(("at ", "An error occurred while calling")):
            return line[:300]
    return text[:300]
