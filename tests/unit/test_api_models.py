"""The API models judge manifests: valid ones parse with defaults, each mistake names its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion
from deltaflow_api.errors import describe
from deltaflow_api.identity import identity
from deltaflow_api.rules import canonical_path, dead_letter_place, places_apart
from support.manifests import INVALID_CASES, VALID_LOOK_ALIKES, InvalidCase, valid_manifest

REPO = Path(__file__).resolve().parents[2]


def test_example_manifest_is_valid_and_defaults_fill_in() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "orders.yaml").read_text())
    ingestion = DeltaIngestion.model_validate(manifest)
    assert ingestion.spec.scaling.max_executors == 8
    assert ingestion.spec.scaling.scale_down_stabilization_seconds == 300  # default
    assert ingestion.spec.source.fail_on_data_loss is True  # safe by default


def test_minimal_manifest_gets_safe_defaults() -> None:
    ingestion = DeltaIngestion.model_validate(
        {
            "metadata": {"name": "clicks", "namespace": "web"},
            "spec": {
                "source": {"bootstrapServers": "k:9092", "topic": "clicks"},
                "format": {"type": "raw"},
                "sink": {"tablePath": "file:///lake/clicks"},
            },
        }
    )
    spec = ingestion.spec
    assert spec.maintenance.vacuum.retention_hours == 168
    assert spec.executor.memory == "2g"
    assert spec.driver.memory == "1g"
    ids = identity(ingestion)
    assert ids.checkpoint_path == "file:///lake/_checkpoints/web/clicks"
    assert not ids.checkpoint_path.startswith(ids.table_path + "/")
    assert ids.dead_letter_table_path == "file:///lake/clicks_dead_letter"
    assert ids.consumer_group == "deltaflow.web.clicks"


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_each_mistake_is_rejected_naming_its_field(case: InvalidCase) -> None:
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(case.manifest())
    lines = describe(err.value)
    assert any(line.startswith(f"{case.field}:") for line in lines), lines


def test_the_corpus_is_large_and_every_case_is_a_different_mistake() -> None:
    assert len(INVALID_CASES) >= 30
    assert len({c.id for c in INVALID_CASES}) == len(INVALID_CASES)


def test_unsafe_vacuum_retention_needs_the_explicit_override() -> None:
    m = valid_manifest()
    m["spec"]["maintenance"]["vacuum"].update(retentionHours=24, allowUnsafeRetention=True)
    assert DeltaIngestion.model_validate(m).spec.maintenance.vacuum.retention_hours == 24


def test_topic_pattern_alone_is_valid() -> None:
    m = valid_manifest()
    del m["spec"]["source"]["topic"]
    m["spec"]["source"]["topicPattern"] = "orders-.*"
    assert DeltaIngestion.model_validate(m).spec.source.topic_pattern == "orders-.*"


def _with(**spec: object) -> dict[str, Any]:
    m = valid_manifest()
    m["spec"].update(spec)
    return m


def test_core_request_is_optional_and_kept_as_written() -> None:
    spec = DeltaIngestion.model_validate(
        _with(driver={"cores": 1, "coreRequest": "250m"}, executor={"cores": 2})
    ).spec
    assert spec.driver.core_request == "250m"
    assert spec.executor.core_request is None  # the request then follows cores


@pytest.mark.parametrize("quantity", ["250m", "1m", "99999m", "0.5", "0.05", "0.001", "1", "2.25"])
def test_core_request_takes_kubernetes_cpu_quantities(quantity: str) -> None:
    spec = DeltaIngestion.model_validate(_with(executor={"coreRequest": quantity})).spec
    assert spec.executor.core_request == quantity


@pytest.mark.parametrize(
    "quantity", ["0", "0m", "0.0", "0.000", "1.5m", "-1", "1e3", "500M", "1.2345", "100000m", ""]
)
def test_core_request_refuses_what_is_not_a_positive_cpu_quantity(quantity: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(_with(executor={"coreRequest": quantity}))
    assert any(line.startswith("spec.executor.coreRequest:") for line in describe(err.value))


@pytest.mark.parametrize(
    ("resources", "limit"),
    [
        ({"cores": 1}, "1"),
        ({"cores": 1}, "1000m"),
        ({"cores": 2}, "2.5"),
        ({"cores": 4, "coreRequest": "500m"}, "0.5"),
        ({"cores": 1, "coreRequest": "250m"}, "300m"),
    ],
)
def test_core_limit_is_taken_from_the_request_up(resources: dict[str, Any], limit: str) -> None:
    spec = DeltaIngestion.model_validate(_with(executor={**resources, "coreLimit": limit})).spec
    assert spec.executor.core_limit == limit
    assert DeltaIngestion.model_validate(valid_manifest()).spec.executor.core_limit is None


@pytest.mark.parametrize(
    ("resources", "limit"),
    [
        ({"cores": 1}, "999m"),
        ({"cores": 2}, "1.999"),
        ({"cores": 1, "coreRequest": "500m"}, "0.499"),
        ({"cores": 1, "coreRequest": "1.5"}, "1"),
    ],
)
def test_a_core_limit_below_the_request_is_refused_naming_the_field(
    resources: dict[str, Any], limit: str
) -> None:
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(_with(driver={**resources, "coreLimit": limit}))
    lines = describe(err.value)
    assert any(
        line.startswith("spec.driver.coreLimit:") and "at least coreRequest" in line
        for line in lines
    ), lines


def test_volumes_default_to_none_and_read_write() -> None:
    assert DeltaIngestion.model_validate(valid_manifest()).spec.volumes == []
    volumes = DeltaIngestion.model_validate(
        _with(
            volumes=[
                {"name": "lake", "claimName": "lake-pvc", "mountPath": "/lake"},
                {"name": "ref", "claimName": "ref", "mountPath": "/data/ref", "readOnly": True},
            ]
        )
    ).spec.volumes
    assert [(v.name, v.claim_name, v.mount_path, v.read_only) for v in volumes] == [
        ("lake", "lake-pvc", "/lake", False),
        ("ref", "ref", "/data/ref", True),
    ]


@pytest.mark.parametrize(
    "path", ["/lake", "/data/lake", "/etc/lake", "/tmpdata", "/mnt/tmp", "/etc/deltaflow2", "/a.b"]
)
def test_mount_paths_outside_the_reserved_ones_are_fine(path: str) -> None:
    m = _with(volumes=[{"name": "lake", "claimName": "lake", "mountPath": path}])
    assert DeltaIngestion.model_validate(m).spec.volumes[0].mount_path == path


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/tmp",
        "/tmp/lake",
        "/etc",  # above /etc/deltaflow: would hide the config
        "/etc/deltaflow",
        "/etc/deltaflow/kafka-ca",
        "lake",
        "./lake",
        "/lake/",  # one spelling per directory: "/tmp/" must not slip through
        "//tmp",
        "/lake/../tmp",
        "/tmp/./x",
        "/la ke",
    ],
)
def test_reserved_relative_or_unnormalized_mount_paths_are_refused(path: str) -> None:
    m = _with(volumes=[{"name": "lake", "claimName": "lake", "mountPath": path}])
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(m)
    assert any(line.startswith("spec.volumes[0].mountPath:") for line in describe(err.value))


def test_volume_list_is_bounded() -> None:
    volumes = [{"name": f"v{i}", "claimName": "c", "mountPath": f"/v{i}"} for i in range(9)]
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(_with(volumes=volumes))
    assert any(line.startswith("spec.volumes:") for line in describe(err.value))
    assert len(DeltaIngestion.model_validate(_with(volumes=volumes[:8])).spec.volumes) == 8


def test_pvc_example_is_valid_and_its_tables_are_on_the_claim() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "orders-on-pvc.yaml").read_text())
    spec = DeltaIngestion.model_validate(manifest).spec
    (volume,) = spec.volumes
    assert volume.read_only is False
    for table in (spec.sink.table_path, str(spec.dead_letter.table_path)):
        assert table.startswith(f"file://{volume.mount_path}/")
    assert spec.driver.core_request == spec.executor.core_request == "500m"


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"tolerations": [{"operator": "Maybe"}]}, "operator"),
        ({"tolerations": [{"effect": "NoScheduling"}]}, "effect"),
        ({"nodeSelector": {"pool": "has space"}}, "nodeSelector"),
        ({"priorityClassName": "Not_A_Name"}, "priorityClassName"),
        ({"nodeSelectr": {"a": "b"}}, "nodeSelectr"),
    ],
)
def test_pod_options_mistakes_name_the_field(pod: dict[str, Any], field: str) -> None:
    manifest = valid_manifest()
    manifest["spec"]["executor"]["pod"] = pod
    with pytest.raises(ValidationError) as error:
        DeltaIngestion.model_validate(manifest)
    assert field in str(error.value)


@pytest.mark.parametrize("case", VALID_LOOK_ALIKES, ids=lambda c: c.id)
def test_each_look_alike_of_a_mistake_is_accepted(case: InvalidCase) -> None:
    DeltaIngestion.model_validate(case.manifest())


SECRET_CONF_KEYS = [
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.bucket.lake.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.encryption.key",
    "spark.ssl.keyPassword",
    "spark.ssl.keyStorePassword",
    "spark.ssl.trustStorePassword",
    "spark.ssl.ui.keyStorePassword",
    "spark.authenticate.secret",
    "spark.kafka.clusters.main.sasl.jaas.config",
    "spark.kafka.clusters.main.ssl.truststore.password",
    "spark.hadoop.javax.jdo.option.ConnectionPassword",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.hadoop.fs.adl.oauth2.credential",
    "spark.sql.catalog.unity.token",
    "spark.HADOOP.FS.S3A.SECRET.KEY",
]
ORDINARY_CONF_KEYS = [
    "spark.sql.shuffle.partitions",
    "spark.sql.files.maxRecordsPerFile",
    "spark.databricks.delta.optimizeWrite.enabled",
    "spark.databricks.delta.properties.defaults.checkpointInterval",
    "spark.databricks.delta.retentionDurationCheck.enabled",
    "spark.hadoop.fs.s3a.connection.maximum",
    "spark.hadoop.fs.s3a.aws.credentials.provider",
    "spark.hadoop.fs.s3a.assumed.role.credentials.provider",
    "spark.hadoop.fs.s3a.delegation.token.binding",
    "spark.hadoop.fs.s3a.encryption.algorithm",
    "spark.hadoop.hadoop.security.credential.provider.path",
    "spark.security.credentials.hive.enabled",
    "spark.kafka.clusters.main.sasl.token.mechanism",
    "spark.ssl.keyStore",
    "spark.ssl.keyStoreType",
    "spark.io.encryption.keySizeBits",
    "spark.io.encryption.keygen.algorithm",
    "spark.hadoop.fs.gs.auth.service.account.json.keyfile",
    "spark.executor.extraJavaOptions",
]


@pytest.mark.parametrize("key", SECRET_CONF_KEYS)
def test_secret_looking_spark_conf_keys_are_refused_pointing_at_secret_refs(key: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(_with(sparkConf={key: "x"}))
    lines = describe(err.value)
    assert any(
        line.startswith("spec.sparkConf:")
        and "spec.sink.storage" in line
        and "spec.source.auth" in line
        for line in lines
    ), lines


@pytest.mark.parametrize("key", ORDINARY_CONF_KEYS)
def test_ordinary_spark_conf_keys_are_accepted(key: str) -> None:
    assert key in DeltaIngestion.model_validate(_with(sparkConf={key: "1"})).spec.spark_conf


@pytest.mark.parametrize(
    ("key", "reserved"),
    [
        ("deltaflow.io/driver-report", True),
        ("deltaflow.io/executors-desired", True),
        ("deltaflow.io/anything", True),
        ("scaling.deltaflow.io/x", True),
        ("DeltaFlow.IO/x", True),
        ("deltaflow.io", False),  # a name without a prefix
        ("example.com/deltaflow.io", False),
        ("mydeltaflow.io/x", False),
        ("deltaflow.io.example.com/x", False),
        ("app.kubernetes.io/name", False),
    ],
)
def test_the_operator_s_own_label_and_annotation_keys_are_refused(key: str, reserved: bool) -> None:
    for field, manifest in (
        ("spec.driver.pod.annotations", _with(driver={"pod": {"annotations": {key: "x"}}})),
        ("spec.executor.pod.labels", _with(executor={"pod": {"labels": {key: "x"}}})),
        ("spec.serviceAccount.annotations", _with(serviceAccount={"annotations": {key: "x"}})),
    ):
        if not reserved:
            DeltaIngestion.model_validate(manifest)
            continue
        with pytest.raises(ValidationError) as err:
            DeltaIngestion.model_validate(manifest)
        assert any(line.startswith(f"{field}: ") for line in describe(err.value)), field


@pytest.mark.parametrize(
    ("a", "b", "apart"),
    [
        ("s3a://lake/t", "s3://lake/t/", False),
        ("s3a://lake/t/cp", "s3://lake/t", False),
        ("file:///lake/t", "/lake/t", False),
        ("/lake/t/x", "file:///lake/t/", False),
        ("s3a://lake/t", "s3a://lake/t_cp", True),
        ("s3a://lake/t", "s3a://lake/tx/y", True),
        ("s3a://lake/t", "s3a://other/t", True),
        ("s3a://lake/t", "/lake/t", True),  # a bucket is not a folder of the pod's file system
    ],
)
def test_paths_are_compared_as_hadoop_reads_them(a: str, b: str, apart: bool) -> None:
    assert places_apart(canonical_path(a), canonical_path(b)) is apart
    assert places_apart(canonical_path(b), canonical_path(a)) is apart


def test_the_default_dead_letter_place_follows_the_identity() -> None:
    for table in ("s3a://lake/orders", "s3a://lake/orders/", "file:///lake/orders"):
        ingestion = DeltaIngestion.model_validate(_with(sink={"tablePath": table}, deadLetter={}))
        derived = identity(ingestion).dead_letter_table_path
        assert dead_letter_place(table, None) == canonical_path(derived)


def _with_source(**fields: Any) -> dict[str, Any]:
    manifest = valid_manifest()
    manifest["spec"]["source"].update(fields)
    return manifest


# (options, the keys the error must name; none: accepted)
KAFKA_OPTION_CASES: list[tuple[dict[str, str], list[str]]] = [
    ({"kafka.fetch.max.bytes": "1", "kafka.client.rack": "az1"}, []),
    ({"kafka.sasl.login.refresh.window.factor": "0.8"}, []),
    ({"kafka.sasl.oauthbearer.scope.claim.name": "scp"}, []),
    ({"kafka.ssl.endpoint.identification.algorithm": ""}, []),
    ({"kafka.ssl.enabled.protocols": "TLSv1.3", "kafka.ssl.cipher.suites": "x"}, []),
    ({"kafka.group.id": "g", "kafka.fetch.min.bytes": "1"}, ["kafka.group.id"]),
    ({"kafka.group.instance.id": "g"}, ["kafka.group.instance.id"]),
    ({"kafka.enable.auto.commit": "true"}, ["kafka.enable.auto.commit"]),
    ({"kafka.auto.offset.reset": "latest"}, ["kafka.auto.offset.reset"]),
    ({"kafka.isolation.level": "read_uncommitted"}, ["kafka.isolation.level"]),
    ({"kafka.bootstrap.servers": "other:9092"}, ["kafka.bootstrap.servers"]),
    ({"kafka.security.protocol": "PLAINTEXT"}, ["kafka.security.protocol"]),
    ({"kafka.sasl.mechanism": "PLAIN"}, ["kafka.sasl.mechanism"]),
    (
        {"kafka.sasl.jaas.config": "x", "kafka.ssl.keystore.type": "PEM"},
        ["kafka.sasl.jaas.config", "kafka.ssl.keystore.type"],
    ),
    ({"kafka.sasl.login.callback.handler.class": "x"}, ["kafka.sasl.login.callback.handler.class"]),
    ({"kafka.sasl.kerberos.service.name": "kafka"}, ["kafka.sasl.kerberos.service.name"]),
    ({"kafka.ssl.truststore.certificates": "x"}, ["kafka.ssl.truststore.certificates"]),
    ({"kafka.config.providers": "file"}, ["kafka.config.providers"]),
    (
        {"kafka.key.deserializer": "x", "kafka.value.deserializer": "y"},
        ["kafka.key.deserializer", "kafka.value.deserializer"],
    ),
    ({"kafka.Fetch.Max.Bytes": "1"}, ["kafka.Fetch.Max.Bytes"]),
    ({"KAFKA.GROUP.ID": "g"}, ["KAFKA.GROUP.ID"]),
    ({"fetch.max.bytes": "1"}, ["fetch.max.bytes"]),
    ({"kafka.basic.auth.credentials.source": "x"}, ["kafka.basic.auth.credentials.source"]),
]


@pytest.mark.parametrize(("options", "refused"), KAFKA_OPTION_CASES)
def test_kafka_options_deltaflow_owns_are_refused_naming_each_key(
    options: dict[str, str], refused: list[str]
) -> None:
    manifest = _with_source(options=options)
    if not refused:
        assert DeltaIngestion.model_validate(manifest).spec.source.options == options
        return
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(manifest)
    lines = [line for line in describe(err.value) if line.startswith("spec.source.options:")]
    named = {key for line in lines for key in options if f" {key} " in line or f" {key}," in line}
    assert named == set(refused), lines


def test_isolation_level_defaults_to_read_committed() -> None:
    spec = DeltaIngestion.model_validate(valid_manifest()).spec
    assert spec.source.isolation_level == "read_committed"
    assert spec.source.options == {}
