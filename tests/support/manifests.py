"""Manifests for tests: a valid base and a corpus of invalid ones, each a different mistake.

The same corpus is judged by pydantic (unit tests) and by the real API server (integration tests):
each case names the field path the error message must point at.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]


def valid_manifest(name: str = "orders", namespace: str = "data") -> Manifest:
    """A complete, valid DeltaIngestion (every section present)."""
    return {
        "apiVersion": "deltaflow.io/v1alpha1",
        "kind": "DeltaIngestion",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {
                "bootstrapServers": "kafka.data.svc:9092",
                "topic": "orders",
                "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": 500000,
            },
            "format": {"type": "json", "schema": "id BIGINT, amount DOUBLE, country STRING"},
            "sink": {"tablePath": "s3a://lake/orders", "partitionBy": ["country"]},
            "deadLetter": {"tablePath": "s3a://lake/orders_dead_letter"},
            "trigger": {"interval": "10s"},
            "scaling": {"minExecutors": 1, "maxExecutors": 8, "targetLagSeconds": 60},
            "driver": {"cores": 1, "memory": "1g"},
            "executor": {"cores": 1, "memory": "2g"},
            "maintenance": {
                "optimize": {"schedule": "0 * * * *"},
                "vacuum": {"schedule": "30 3 * * *", "retentionHours": 168},
            },
        },
    }


def set_field(manifest: Manifest, path: str, value: Any) -> None:
    """Set the dotted ``path`` (``spec.source.topic``) in ``manifest``, creating what is
    missing on the way; a value of None removes the field."""
    *parents, leaf = path.split(".")
    node = manifest
    for p in parents:
        node = node.setdefault(p, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    def apply(m: Manifest) -> None:
        set_field(m, path, copy.deepcopy(value))  # later edits must not change shared values

    return apply


def _delete(path: str) -> Callable[[Manifest], None]:
    def apply(m: Manifest) -> None:
        *parents, leaf = path.split(".")
        node = m
        for p in parents:
            node = node[p]
        del node[leaf]

    return apply


def _volume(name: str = "lake", mount: str = "/lake") -> dict[str, Any]:
    return {"name": name, "claimName": f"{name}-pvc", "mountPath": mount}


def _ref(key: str, name: str = "kafka-creds") -> dict[str, str]:
    return {"name": name, "key": key}


# A valid spec.source.auth per mechanism, for cases that change one thing in it.
SCRAM_AUTH: dict[str, Any] = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "username": _ref("username"),
    "password": _ref("password"),
    "caCertificate": _ref("ca.crt", "kafka-ca"),
}
MTLS_AUTH: dict[str, Any] = {
    "securityProtocol": "SSL",
    "caCertificate": _ref("ca.crt", "kafka-ca"),
    "clientCertificate": {
        "certificate": _ref("tls.crt", "stream-tls"),
        "key": _ref("tls.key", "stream-tls"),
    },
}
OAUTH_AUTH: dict[str, Any] = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "OAUTHBEARER",
    "oauthBearer": {
        "tokenEndpointUrl": "https://login.example.com/oauth2/token",
        "clientId": "orders-stream",
        "clientSecret": _ref("client-secret", "kafka-oauth"),
        "scope": "kafka:read kafka:describe",
        "extensions": {"logicalCluster": "lkc-a1b2c3", "identityPoolId": "pool-XyZ"},
    },
}
MSK_AUTH: dict[str, Any] = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "AWS_MSK_IAM",
    "awsMskIam": {},
}


def _auth(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``base`` with top-level fields changed (a value of None removes the field)."""
    auth = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            auth.pop(key, None)
        else:
            auth[key] = value
    return auth


@dataclass(frozen=True)
class InvalidCase:
    """One mistake: how to make it, and the field path the error must name."""

    id: str
    edits: tuple[Callable[[Manifest], None], ...]
    field: str

    def manifest(self, name: str = "orders", namespace: str = "data") -> Manifest:
        """The valid base with this case's mistake applied."""
        m = copy.deepcopy(valid_manifest(name, namespace))
        for edit in self.edits:
            edit(m)
        return m


def _case(case_id: str, field: str, *edits: Callable[[Manifest], None]) -> InvalidCase:
    return InvalidCase(case_id, edits, field)


INVALID_CASES: list[InvalidCase] = [
    # One owner of the executor count at a time: kubectl scale / an HPA only in manual mode.
    _case("executors-in-lag-mode", "spec.scaling.executors", _set("spec.scaling.executors", 2)),
    _case(
        "manual-executors-above-max",
        "spec.scaling.executors",
        _set("spec.scaling.mode", "manual"),
        _set("spec.scaling.executors", 9),
    ),
    _case("unknown-scaling-mode", "spec.scaling.mode", _set("spec.scaling.mode", "cpu")),
    _case("missing-topic", "spec.source.topic", _delete("spec.source.topic")),
    _case("topic-and-pattern", "spec.source.topic", _set("spec.source.topicPattern", "orders-.*")),
    _case("bad-topic-name", "spec.source.topic", _set("spec.source.topic", "orders topic")),
    _case(
        "missing-bootstrap", "spec.source.bootstrapServers", _delete("spec.source.bootstrapServers")
    ),
    _case(
        "bootstrap-no-port",
        "spec.source.bootstrapServers",
        _set("spec.source.bootstrapServers", "kafka"),
    ),
    _case(
        "bad-starting-offsets",
        "spec.source.startingOffsets",
        _set("spec.source.startingOffsets", "beginning"),
    ),
    _case(
        "zero-max-offsets",
        "spec.source.maxOffsetsPerTrigger",
        _set("spec.source.maxOffsetsPerTrigger", 0),
    ),
    _case(
        "sasl-without-credentials",
        "spec.source.auth.securityProtocol",
        _set("spec.source.auth", {"securityProtocol": "SASL_SSL"}),
    ),
    _case(
        "secret-name-invalid",
        "spec.source.auth.username.name",
        _set(
            "spec.source.auth",
            {
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "PLAIN",
                "username": {"name": "Kafka_Creds", "key": "user"},
                "password": {"name": "kafka-creds", "key": "password"},
            },
        ),
    ),
    _case(
        "scram-without-password",
        "spec.source.auth.username",
        _set("spec.source.auth", _auth(SCRAM_AUTH, password=None)),
    ),
    _case(
        "password-without-sasl",
        "spec.source.auth.username",
        _set("spec.source.auth", _auth(MTLS_AUTH, password=_ref("password"))),
    ),
    _case(
        "mechanism-without-sasl-protocol",
        "spec.source.auth.saslMechanism",
        _set("spec.source.auth", _auth(SCRAM_AUTH, securityProtocol="SSL")),
    ),
    _case(
        "unknown-sasl-mechanism",
        "spec.source.auth.saslMechanism",
        _set("spec.source.auth", _auth(SCRAM_AUTH, saslMechanism="GSSAPI")),
    ),
    _case(
        "client-certificate-without-tls",
        "spec.source.auth.clientCertificate",
        _set("spec.source.auth", _auth(MTLS_AUTH, securityProtocol="PLAINTEXT")),
    ),
    _case(
        "client-certificate-without-key",
        "spec.source.auth.clientCertificate.key",
        _set(
            "spec.source.auth",
            _auth(MTLS_AUTH, clientCertificate={"certificate": _ref("tls.crt", "stream-tls")}),
        ),
    ),
    _case(
        "oauthbearer-without-its-settings",
        "spec.source.auth.oauthBearer",
        _set("spec.source.auth", _auth(OAUTH_AUTH, oauthBearer=None)),
    ),
    _case(
        "oauth-settings-with-scram",
        "spec.source.auth.oauthBearer",
        _set("spec.source.auth", _auth(SCRAM_AUTH, oauthBearer=OAUTH_AUTH["oauthBearer"])),
    ),
    _case(
        "oauth-token-endpoint-over-http",
        "spec.source.auth.oauthBearer.tokenEndpointUrl",
        _set(
            "spec.source.auth.oauthBearer",
            {**OAUTH_AUTH["oauthBearer"], "tokenEndpointUrl": "http://idp/token"},
        ),
        _set("spec.source.auth.securityProtocol", "SASL_SSL"),
        _set("spec.source.auth.saslMechanism", "OAUTHBEARER"),
    ),
    _case(
        "oauth-client-id-with-a-quote",
        "spec.source.auth.oauthBearer.clientId",
        _set("spec.source.auth", OAUTH_AUTH),
        _set("spec.source.auth.oauthBearer.clientId", 'orders"stream'),
    ),
    _case(
        "oauth-extension-named-auth",
        "spec.source.auth.oauthBearer.extensions",
        _set("spec.source.auth", OAUTH_AUTH),
        _set("spec.source.auth.oauthBearer.extensions", {"auth": "x"}),
    ),
    _case(
        "oauth-extension-value-with-a-comma",
        "spec.source.auth.oauthBearer.extensions.pool",
        _set("spec.source.auth", OAUTH_AUTH),
        _set("spec.source.auth.oauthBearer.extensions", {"pool": "a,b"}),
    ),
    _case(
        "msk-iam-over-sasl-plaintext",
        "spec.source.auth.securityProtocol",
        _set("spec.source.auth", _auth(MSK_AUTH, securityProtocol="SASL_PLAINTEXT")),
    ),
    _case(
        "msk-iam-without-its-settings",
        "spec.source.auth.awsMskIam",
        _set("spec.source.auth", _auth(MSK_AUTH, awsMskIam=None)),
    ),
    _case(
        "msk-iam-role-not-an-arn",
        "spec.source.auth.awsMskIam.roleArn",
        _set("spec.source.auth", _auth(MSK_AUTH, awsMskIam={"roleArn": "orders-reader"})),
    ),
    _case(
        "option-owned-group-id",
        "spec.source.options",
        _set("spec.source.options", {"kafka.fetch.max.bytes": "1048576", "kafka.group.id": "g"}),
    ),
    _case(
        "option-owned-jaas",
        "spec.source.options",
        _set("spec.source.options", {"kafka.sasl.jaas.config": "x"}),
    ),
    _case(
        "option-owned-truststore",
        "spec.source.options",
        _set("spec.source.options", {"kafka.ssl.truststore.location": "/x"}),
    ),
    _case(
        "option-in-upper-case",
        "spec.source.options",
        _set("spec.source.options", {"kafka.Group.Id": "g"}),
    ),
    _case(
        "option-without-kafka-prefix",
        "spec.source.options",
        _set("spec.source.options", {"fetch.max.bytes": "1"}),
    ),
    _case(
        "option-holding-a-secret",
        "spec.source.options",
        _set("spec.source.options", {"kafka.basic.auth.user.info.password": "x"}),
    ),
    _case(
        "option-value-referencing-a-secret-file",
        "spec.source.options",
        _set(
            "spec.source.options",
            {"kafka.client.id": "${dir:/etc/deltaflow/kafka-password:password}"},
        ),
    ),
    _case(
        "oauth-client-id-with-a-reference",
        "spec.source.auth.oauthBearer.clientId",
        _set("spec.source.auth", OAUTH_AUTH),
        _set("spec.source.auth.oauthBearer.clientId", "${dir:/etc/deltaflow/kafka-ca:ca.crt}"),
    ),
    _case(
        "msk-iam-with-static-object-store-keys",
        "spec.source.auth.saslMechanism",
        _set("spec.source.auth", MSK_AUTH),
        _set(
            "spec.sink.storage",
            {
                "accessKeyId": {"name": "lake", "key": "id"},
                "secretAccessKey": {"name": "lake", "key": "secret"},
            },
        ),
    ),
    _case(
        "unknown-isolation-level",
        "spec.source.isolationLevel",
        _set("spec.source.isolationLevel", "committed"),
    ),
    _case("unknown-placement", "spec.placement", _set("spec.placement", "shared")),
    _case(
        "pooled-with-jvm-conf",
        "spec.sparkConf",
        _set("spec.placement", "pooled"),
        _set("spec.sparkConf", {"spark.executor.memory": "2g"}),
    ),
    _case("unknown-format", "spec.format.type", _set("spec.format.type", "protobuf")),
    _case("json-without-schema", "spec.format.schema", _delete("spec.format.schema")),
    _case(
        "negative-max-record-bytes",
        "spec.format.maxRecordBytes",
        _set("spec.format.maxRecordBytes", -1),
    ),
    _case("missing-sink", "spec.sink", _delete("spec.sink")),
    _case("relative-table-path", "spec.sink.tablePath", _set("spec.sink.tablePath", "lake/orders")),
    _case(
        "checkpoint-inside-table",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://lake/orders/_checkpoint"),
    ),
    _case(
        "bad-partition-column",
        "spec.sink.partitionBy[0]",
        _set("spec.sink.partitionBy", ["country-code"]),
    ),
    _case("misspelled-field", "spec.sink.tabelPath", _set("spec.sink.tabelPath", "s3a://lake/x")),
    _case(
        "half-storage-credentials",
        "spec.sink.storage.accessKeyId",
        _set("spec.sink.storage", {"accessKeyId": {"name": "lake", "key": "id"}}),
    ),
    _case(
        "min-over-max-executors", "spec.scaling.maxExecutors", _set("spec.scaling.minExecutors", 9)
    ),
    _case(
        "absurd-max-executors", "spec.scaling.maxExecutors", _set("spec.scaling.maxExecutors", 5000)
    ),
    _case(
        "zero-target-lag", "spec.scaling.targetLagSeconds", _set("spec.scaling.targetLagSeconds", 0)
    ),
    _case("negative-driver-cores", "spec.driver.cores", _set("spec.driver.cores", -1)),
    _case("absurd-executor-cores", "spec.executor.cores", _set("spec.executor.cores", 1000)),
    _case("memory-unit-typo", "spec.executor.memory", _set("spec.executor.memory", "2gb")),
    _case(
        "core-request-not-a-quantity",
        "spec.executor.coreRequest",
        _set("spec.executor.coreRequest", "half"),
    ),
    _case("core-request-zero", "spec.driver.coreRequest", _set("spec.driver.coreRequest", "0m")),
    _case("min-partitions-zero", "spec.source.minPartitions", _set("spec.source.minPartitions", 0)),
    _case("core-limit-typo", "spec.executor.coreLimit", _set("spec.executor.coreLimit", "1 cpu")),
    _case(
        "core-limit-below-cores", "spec.executor.coreLimit", _set("spec.executor.coreLimit", "500m")
    ),
    _case("absurd-executor-memory", "spec.executor.memory", _set("spec.executor.memory", "9000g")),
    _case("tiny-driver-memory", "spec.driver.memory", _set("spec.driver.memory", "100m")),
    _case("tiny-memory-kubernetes-form", "spec.driver.memory", _set("spec.driver.memory", "511Mi")),
    _case(
        "toleration-operator-typo",
        "spec.executor.pod.tolerations[0].operator",
        _set("spec.executor.pod.tolerations", [{"key": "spot", "operator": "Maybe"}]),
    ),
    _case(
        "node-selector-value-with-space",
        "spec.driver.pod.nodeSelector.pool",
        _set("spec.driver.pod.nodeSelector", {"pool": "has space"}),
    ),
    _case(
        "image-pull-secret-without-name",
        "spec.imagePullSecrets[0].name",
        _set("spec.imagePullSecrets", [{}]),
    ),
    _case(
        "bad-trigger-duration", "spec.trigger.interval", _set("spec.trigger.interval", "10 seconds")
    ),
    _case("zero-trigger-duration", "spec.trigger.interval", _set("spec.trigger.interval", "0s")),
    _case(
        "cron-words",
        "spec.maintenance.optimize.schedule",
        _set("spec.maintenance.optimize.schedule", "every hour"),
    ),
    _case(
        "cron-minute-out-of-range",
        "spec.maintenance.optimize.schedule",
        _set("spec.maintenance.optimize.schedule", "61 * * * *"),
    ),
    _case(
        "cron-four-fields",
        "spec.maintenance.vacuum.schedule",
        _set("spec.maintenance.vacuum.schedule", "30 3 * *"),
    ),
    _case(
        "vacuum-retention-unsafe",
        "spec.maintenance.vacuum.retentionHours",
        _set("spec.maintenance.vacuum.retentionHours", 24),
    ),
    _case(
        "too-many-zorder-columns",
        "spec.maintenance.optimize.zOrderBy",
        _set("spec.maintenance.optimize.zOrderBy", ["a", "b", "c", "d", "e"]),
    ),
    _case(
        "spark-conf-sets-master",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.master": "local"}),
    ),
    _case(
        "spark-conf-not-spark", "spec.sparkConf", _set("spec.sparkConf", {"fs.s3a.endpoint": "x"})
    ),
    _case(
        "dead-letter-table-is-the-table",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "s3a://lake/orders/"),
    ),
    _case(
        "dead-letter-table-inside-the-table",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "s3://lake/orders/_dead_letter"),
    ),
    _case(
        "dead-letter-table-holds-the-table",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "s3a://lake"),
    ),
    _case(
        "duplicate-volume-names",
        "spec.volumes",
        _set("spec.volumes", [_volume("lake", "/lake"), _volume("lake", "/lake2")]),
    ),
    _case(
        "duplicate-volume-mount-paths",
        "spec.volumes",
        _set("spec.volumes", [_volume("lake", "/lake"), _volume("lake2", "/lake")]),
    ),
    _case(
        "volume-mounted-on-tmp",
        "spec.volumes[0].mountPath",
        _set("spec.volumes", [_volume(mount="/tmp")]),
    ),
    _case(
        "volume-mounted-over-config",
        "spec.volumes[0].mountPath",
        _set("spec.volumes", [_volume(mount="/etc")]),
    ),
    _case(
        "volume-relative-mount-path",
        "spec.volumes[0].mountPath",
        _set("spec.volumes", [_volume(mount="lake")]),
    ),
    _case(
        "volume-name-taken", "spec.volumes[0].name", _set("spec.volumes", [_volume(name="config")])
    ),
    _case(
        "volume-without-claim",
        "spec.volumes[0].claimName",
        _set("spec.volumes", [{"name": "lake", "mountPath": "/lake"}]),
    ),
    _case("image-with-space", "spec.image", _set("spec.image", "deltaflow: latest")),
    _case("suspend-not-bool", "spec.suspend", _set("spec.suspend", "yes")),
    _case("name-too-long", "metadata.name", _set("metadata.name", "a" * 48)),
    _case("name-starts-with-digit", "metadata.name", _set("metadata.name", "1orders")),
    # Paths are compared as Hadoop reads them: s3:// = s3a://, file:///x = /x, a trailing '/'.
    _case(
        "checkpoint-inside-table-other-scheme",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3://lake/orders/_checkpoint"),
    ),
    _case(
        "checkpoint-inside-table-with-trailing-slash",
        "spec.sink.checkpointPath",
        _set("spec.sink.tablePath", "s3a://lake/orders/"),
        _set("spec.sink.checkpointPath", "s3a://lake/orders/_checkpoint"),
    ),
    _case(
        "checkpoint-is-the-table-file-scheme",
        "spec.sink.checkpointPath",
        _set("spec.sink.tablePath", "file:///lake/orders"),
        _delete("spec.deadLetter.tablePath"),
        _set("spec.sink.checkpointPath", "/lake/orders/"),
    ),
    _case(
        "checkpoint-holds-the-table",
        "spec.sink.checkpointPath",
        _set("spec.sink.tablePath", "s3a://lake/data/orders"),
        _delete("spec.deadLetter.tablePath"),
        _set("spec.sink.checkpointPath", "s3a://lake/data"),
    ),
    _case(
        "checkpoint-inside-dead-letter-table",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://lake/orders_dead_letter/_checkpoint"),
    ),
    _case(
        "checkpoint-inside-default-dead-letter-table",
        "spec.sink.checkpointPath",
        _delete("spec.deadLetter.tablePath"),
        _set("spec.sink.checkpointPath", "s3://lake/orders_dead_letter/cp"),
    ),
    _case(
        "dead-letter-table-inside-the-table-on-a-volume",
        "spec.deadLetter.tablePath",
        _set("spec.sink.tablePath", "/lake/orders"),
        _set("spec.deadLetter.tablePath", "file:///lake/orders/dead_letter"),
    ),
    # One spelling per folder.
    _case(
        "table-path-repeated-slash",
        "spec.sink.tablePath",
        _set("spec.sink.tablePath", "s3a://lake//orders"),
    ),
    _case(
        "checkpoint-path-dot-dot",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://lake/cp/../orders"),
    ),
    _case(
        "dead-letter-path-dot",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "/lake/./orders_dead_letter"),
    ),
    _case("empty-bucket", "spec.sink.tablePath", _set("spec.sink.tablePath", "s3a:///orders")),
    # A table at a bucket root puts its checkpoint and dead-letter table outside the bucket.
    _case("table-at-bucket-root", "spec.sink.tablePath", _set("spec.sink.tablePath", "s3a://lake")),
    _case(
        "table-at-bucket-root-slash",
        "spec.sink.tablePath",
        _set("spec.sink.tablePath", "s3://lake/"),
    ),
    _case(
        "table-at-file-system-root", "spec.sink.tablePath", _set("spec.sink.tablePath", "file:///")
    ),
    _case(
        "dead-letter-table-at-bucket-root",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "s3a://dead-letters"),
    ),
    _case(
        "checkpoint-at-bucket-root",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://checkpoints/"),
    ),
    # Schemes the image has no file system for.
    _case("table-on-gcs", "spec.sink.tablePath", _set("spec.sink.tablePath", "gs://lake/orders")),
    _case(
        "dead-letter-table-on-azure",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "abfss://c@acct.dfs.core.windows.net/dead_letter"),
    ),
    _case(
        "checkpoint-on-hdfs",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "hdfs://namenode/checkpoints/orders"),
    ),
    _case(
        "table-on-a-file-host",
        "spec.sink.tablePath",
        _set("spec.sink.tablePath", "file://server/lake/orders"),
    ),
    # sparkConf lands in a ConfigMap: no secrets.
    _case(
        "spark-conf-s3a-secret-key",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.hadoop.fs.s3a.secret.key": "wJalrXUtnFEMI"}),
    ),
    _case(
        "spark-conf-s3a-access-key",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.hadoop.fs.s3a.access.key": "AKIA0000"}),
    ),
    _case(
        "spark-conf-s3a-session-token",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.hadoop.fs.s3a.session.token": "t"}),
    ),
    _case(
        "spark-conf-ssl-key-password",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.ssl.keyPassword": "p"}),
    ),
    _case(
        "spark-conf-keystore-password-upper-case",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.SSL.KeyStorePassword": "p"}),
    ),
    _case(
        "spark-conf-authentication-off",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.authenticate": "false"}),
    ),
    _case(
        "spark-conf-encryption-off",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.network.crypto.enabled": "false"}),
    ),
    _case(
        "spark-conf-ui-on",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.ui.enabled": "true"}),
    ),
    _case(
        "spark-conf-driver-port",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.driver.port": "9999"}),
    ),
    _case(
        "avro-confluent-without-schema-ids",
        "spec.format.schemaIds",
        _set(
            "spec.format",
            {
                "type": "avro",
                "schema": '{"type": "record", "name": "R", "fields": [{"name": "id", '
                '"type": "long"}]}',
                "avroWireFormat": "confluent",
            },
        ),
    ),
    _case(
        "spark-conf-authenticate-secret",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.authenticate.secret": "s"}),
    ),
    _case(
        "spark-conf-kafka-jaas",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.kafka.clusters.main.sasl.jaas.config": "x"}),
    ),
    _case(
        "spark-conf-azure-account-key",
        "spec.sparkConf",
        _set(
            "spec.sparkConf", {"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "k"}
        ),
    ),
    _case(
        "spark-conf-deprecated-offset-fetching",
        "spec.sparkConf",
        _set("spec.sparkConf", {"spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true"}),
    ),
    # The operator's own label and annotation keys.
    _case(
        "driver-annotation-forges-the-report",
        "spec.driver.pod.annotations",
        _set("spec.driver.pod", {"annotations": {"deltaflow.io/driver-report": "{}"}}),
    ),
    _case(
        "executor-label-on-a-deltaflow-subdomain",
        "spec.executor.pod.labels",
        _set("spec.executor.pod", {"labels": {"team.deltaflow.io/owner": "x"}}),
    ),
    _case(
        "driver-annotation-deltaflow-upper-case",
        "spec.driver.pod.annotations",
        _set("spec.driver.pod", {"annotations": {"DeltaFlow.IO/executors-desired": "9"}}),
    ),
    _case(
        "service-account-annotation-deltaflow",
        "spec.serviceAccount.annotations",
        _set("spec.serviceAccount", {"annotations": {"deltaflow.io/driver-spec-hash": "x"}}),
    ),
    # topicPattern: only what Java's regex and Python's re read alike.
    *(
        _case(
            f"topic-pattern-{case_id}",
            "spec.source.topicPattern",
            _delete("spec.source.topic"),
            _set("spec.source.topicPattern", pattern),
        )
        for case_id, pattern in (
            ("java-quoting", r"\Qorders.v1\E"),
            ("class-intersection", "[a-z&&[^x]]+"),
            ("nested-class", "[a-z[0-9]]+"),
            ("inline-flag", "(?i)orders"),
            ("possessive", "orders.*+"),
            ("python-only-quantifier", "orders{,3}"),
            ("literal-brace", "orders{x}"),
            ("nested-group", "((eu|us)-orders)+"),
            ("unbalanced", "orders-("),
            ("back-reference", r"(a)\1"),
            ("lookahead", "(?=orders).*"),
        )
    ),
    # What Delta refuses and the spec alone shows.
    _case(
        "partition-by-one-column-twice-by-case",
        "spec.sink.partitionBy",
        _set("spec.sink.partitionBy", ["country", "Country"]),
    ),
    _case(
        "z-order-by-a-partition-column",
        "spec.maintenance.optimize.zOrderBy",
        _set("spec.maintenance.optimize.zOrderBy", ["Country"]),
    ),
]

# Manifests close to a mistake above that are fine and must stay accepted.
VALID_LOOK_ALIKES: list[InvalidCase] = [
    *(
        _case(f"auth-{name}", "spec.source.auth", _set("spec.source.auth", auth))
        for name, auth in (
            ("scram", SCRAM_AUTH),
            ("mtls", MTLS_AUTH),
            (
                "mtls-with-key-password",
                _auth(
                    MTLS_AUTH,
                    clientCertificate={**MTLS_AUTH["clientCertificate"], "keyPassword": _ref("pw")},
                ),
            ),
            (
                "mtls-under-scram",
                {**SCRAM_AUTH, "clientCertificate": MTLS_AUTH["clientCertificate"]},
            ),
            ("oauthbearer", OAUTH_AUTH),
            ("msk-iam", MSK_AUTH),
            (
                "msk-iam-with-role",
                _auth(
                    MSK_AUTH,
                    awsMskIam={
                        "region": "eu-west-1",
                        "roleArn": "arn:aws:iam::123456789012:role/streams/orders-reader",
                    },
                ),
            ),
            ("tls-only", {"securityProtocol": "SSL"}),
        )
    ),
    _case(
        "ordinary-kafka-options",
        "spec.source.options",
        _set(
            "spec.source.options",
            {
                "kafka.fetch.max.bytes": "52428800",
                "kafka.client.rack": "use1-az1",
                "kafka.request.timeout.ms": "60000",
                "kafka.ssl.endpoint.identification.algorithm": "",
                "kafka.sasl.login.refresh.buffer.seconds": "120",
                "kafka.max.partition.fetch.bytes": "1048576",
                "kafka.client.dns.lookup": "use_all_dns_ips",
            },
        ),
        _set("spec.source.isolationLevel", "read_uncommitted"),
    ),
    _case(
        "checkpoint-beside-the-table-sharing-its-name",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://lake/orders_cp"),
    ),
    _case(
        "checkpoint-where-the-default-would-be",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3://lake/_checkpoints/data/orders/"),
    ),
    _case(
        "dead-letter-table-with-trailing-slash",
        "spec.deadLetter.tablePath",
        _set("spec.deadLetter.tablePath", "s3a://lake/orders_dead_letter/"),
    ),
    _case(
        "table-and-checkpoint-on-a-volume-two-spellings",
        "spec.sink.checkpointPath",
        _set("spec.sink.tablePath", "/lake/orders"),
        _delete("spec.deadLetter.tablePath"),
        _set("spec.sink.checkpointPath", "file:///lake/orders_checkpoint"),
    ),
    _case(
        "table-one-folder-below-the-bucket",
        "spec.sink.tablePath",
        _set("spec.sink.tablePath", "s3://lake/orders/"),
        _delete("spec.deadLetter.tablePath"),
    ),
    _case(
        "folders-starting-with-dots",
        "spec.sink.tablePath",
        _set("spec.sink.tablePath", "s3a://lake/.staging/orders..v2"),
        _delete("spec.deadLetter.tablePath"),
    ),
    _case(
        "ordinary-spark-conf",
        "spec.sparkConf",
        _set(
            "spec.sparkConf",
            {
                "spark.sql.shuffle.partitions": "8",
                "spark.databricks.delta.optimizeWrite.enabled": "true",
                "spark.databricks.delta.properties.defaults.checkpointInterval": "20",
                "spark.hadoop.fs.s3a.connection.maximum": "64",
                "spark.hadoop.fs.s3a.aws.credentials.provider": "software.amazon.awssdk.auth."
                "credentials.WebIdentityTokenFileCredentialsProvider",
                "spark.hadoop.fs.s3a.delegation.token.binding": "x",
                "spark.security.credentials.hive.enabled": "false",
                "spark.ssl.keyStore": "/etc/ssl/keystore.jks",
                "spark.io.encryption.keySizeBits": "256",
            },
        ),
    ),
    _case(
        "annotations-near-the-operator-s-keys",
        "spec.driver.pod.annotations",
        _set(
            "spec.driver.pod",
            {
                "annotations": {
                    "deltaflow.io": "a name without a prefix",
                    "example.com/deltaflow.io": "x",
                    "mydeltaflow.io/x": "x",
                    "deltaflow.io.example.com/x": "x",
                },
                "labels": {"app.example.com/deltaflow": "x"},
            },
        ),
        _set("spec.serviceAccount", {"annotations": {"eks.amazonaws.com/role-arn": "arn:x"}}),
    ),
    *(
        _case(
            f"topic-pattern-{case_id}",
            "spec.source.topicPattern",
            _delete("spec.source.topic"),
            _set("spec.source.topicPattern", pattern),
        )
        for case_id, pattern in (
            ("prefix", "orders-.*"),
            ("anchored-with-count", "^orders-[a-z]{2}$"),
            ("alternatives-in-a-group", r"(orders|payments)\.v[0-9]+"),
            ("non-capturing-group", "(?:eu|us)-orders"),
            ("negated-class", "[^_].*"),
            ("top-level-alternatives", "^orders$|^payments$"),
            ("escapes", r"\w+-\d{1,3}\.v\-1"),
            ("class-of-topic-characters", "[-a-zA-Z0-9._]+"),
            ("open-count", "x{2,}"),
        )
    ),
    _case(
        "z-order-by-a-data-column",
        "spec.maintenance.optimize.zOrderBy",
        _set("spec.sink.partitionBy", ["country", "day"]),
        _set("spec.maintenance.optimize.zOrderBy", ["id"]),
    ),
]

# Changes to a stored resource that would break its checkpoint: the API server refuses them.
IMMUTABLE_UPDATES: list[InvalidCase] = [
    _case("change-topic", "spec.source.topic", _set("spec.source.topic", "payments")),
    _case(
        "topic-to-pattern",
        "spec.source.topic",
        _delete("spec.source.topic"),
        _set("spec.source.topicPattern", "orders.*"),
    ),
    _case(
        "change-table-path", "spec.sink.tablePath", _set("spec.sink.tablePath", "s3a://lake/other")
    ),
    _case("change-format-type", "spec.format.type", _set("spec.format.type", "raw")),
    _case(
        "set-checkpoint-after-the-default",
        "spec.sink.checkpointPath",
        _set("spec.sink.checkpointPath", "s3a://lake/_checkpoints/other"),
    ),
    _case("change-partition-by", "spec.sink.partitionBy", _set("spec.sink.partitionBy", ["day"])),
    _case(
        "drop-kafka-metadata-columns",
        "spec.sink.kafkaMetadataColumns",
        _set("spec.sink.kafkaMetadataColumns", False),
    ),
]
