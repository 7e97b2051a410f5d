"""The API server and pydantic judge manifests the same way, and every error names its field."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion
from deltaflow_api.names import MAX_NAME_LENGTH, executor_pod_name
from deltaflow_operator.builders import driver as driver_builders
from deltaflow_operator.reconcile import children
from deltaflow_operator.settings import Settings
from devstack.kube import KubeControlPlane
from support.manifests import (
    IMMUTABLE_UPDATES,
    INVALID_CASES,
    MSK_AUTH,
    MTLS_AUTH,
    OAUTH_AUTH,
    SCRAM_AUTH,
    VALID_LOOK_ALIKES,
    InvalidCase,
    set_field,
    valid_manifest,
)

NS = "validation"


@pytest.fixture(scope="module")
def api(chart_installed: KubeControlPlane) -> Iterator[client.CustomObjectsApi]:
    """A Python client as admin, and the namespace the manifests go to."""
    chart_installed.kubectl("create", "namespace", NS)
    api_client = config.new_client_from_config(config_file=str(chart_installed.kubeconfig))
    yield client.CustomObjectsApi(api_client)
    api_client.close()


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_api_server_rejects_each_mistake_naming_the_field(
    chart_installed: KubeControlPlane, api: client.CustomObjectsApi, case: InvalidCase
) -> None:
    manifest = case.manifest(namespace=NS)
    result = chart_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest), check=False
    )
    assert result.returncode != 0, f"{case.id} was accepted"
    assert case.field in result.stderr, result.stderr


@pytest.mark.parametrize("case", VALID_LOOK_ALIKES, ids=lambda c: c.id)
def test_api_server_accepts_each_look_alike(
    chart_installed: KubeControlPlane, api: client.CustomObjectsApi, case: InvalidCase
) -> None:
    manifest = case.manifest(namespace=NS)
    result = chart_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest), check=False
    )
    assert result.returncode == 0, f"{case.id} was refused: {result.stderr}"


@pytest.mark.parametrize("case", IMMUTABLE_UPDATES, ids=lambda c: c.id)
def test_checkpoint_breaking_updates_are_rejected(
    chart_installed: KubeControlPlane, api: client.CustomObjectsApi, case: InvalidCase
) -> None:
    name = f"immutable-{case.id}"
    original = valid_manifest(name=name, namespace=NS)
    original["spec"]["suspend"] = True  # nothing to run: this test is about admission only
    chart_installed.kubectl("apply", "-f", "-", stdin=json.dumps(original))
    changed = case.manifest(name=name, namespace=NS)
    changed["spec"]["suspend"] = True
    result = chart_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(changed), check=False
    )
    assert result.returncode != 0, f"{case.id} was accepted"
    assert case.field in result.stderr, result.stderr
    assert "create a new DeltaIngestion" in result.stderr  # says how to start a new stream
    # What may change in place is still accepted.
    fine = copy.deepcopy(original)
    fine["spec"]["scaling"]["maxExecutors"] = 6
    chart_installed.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(fine))


# --- names: a metadata.name the API server accepts, it accepts for every child --------------------

_DNS_LABEL_NAMES = st.from_regex(r"\A[a-z]([-a-z0-9]*[a-z0-9])?\Z", fullmatch=True).filter(
    lambda n: len(n) <= MAX_NAME_LENGTH
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.one_of(
        st.just("a" * MAX_NAME_LENGTH),
        st.just("z" + "-9" * ((MAX_NAME_LENGTH - 1) // 2)),
        _DNS_LABEL_NAMES,
    )
)
def test_every_child_of_an_accepted_name_is_accepted(
    chart_installed: KubeControlPlane, api: client.CustomObjectsApi, name: str
) -> None:
    manifest = valid_manifest(name=name, namespace=NS)
    chart_installed.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest))
    manifest["metadata"].update(uid="00000000-0000-0000-0000-000000000001", generation=1)
    ingestion = DeltaIngestion.model_validate(manifest)
    settings_ = Settings(image="deltaflow:e2e")
    executor = {
        "apiVersion": "v1",
        "kind": "Pod",
        # Spark's name for the executor with the largest id it can give.
        "metadata": {"name": executor_pod_name(name, 2**31 - 1), "namespace": NS},
        "spec": {"containers": [{"name": "executor", "image": "deltaflow:e2e"}]},
    }
    driver = driver_builders.driver_pod(ingestion, settings_)
    # A dry run does not create the ServiceAccount in the same list, and pod admission looks it
    # up: the pod's name is what is judged here (the ServiceAccount's own name is in the list).
    driver["spec"]["serviceAccountName"] = "default"
    items = [*children(ingestion, settings_), driver, executor]
    result = chart_installed.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        check=False,
    )
    assert result.returncode == 0, f"{name} ({len(name)} characters): {result.stderr}"
    assert result.stdout.count("(server dry run)") == len(items), result.stdout


def test_one_character_longer_is_refused_by_the_api_server(
    chart_installed: KubeControlPlane, api: client.CustomObjectsApi
) -> None:
    manifest = valid_manifest(name="a" * (MAX_NAME_LENGTH + 1), namespace=NS)
    result = chart_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest), check=False
    )
    assert result.returncode != 0
    assert "metadata.name" in result.stderr, result.stderr
    assert "CronJob" in result.stderr, result.stderr


# --- both judges on generated manifests ----------------------------------------------------------


def _volume(name: str, mount: str, read_only: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "claimName": f"{name.lower()}-pvc",
        "mountPath": mount,
        "readOnly": read_only,
    }


_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "metadata.name": st.sampled_from(
        ["orders", "a" * MAX_NAME_LENGTH, "a" * (MAX_NAME_LENGTH + 1), "1abc", "a-b", "x9"]
    ),
    "spec.suspend": st.sampled_from([True, False]),
    "spec.placement": st.sampled_from(["dedicated", "pooled", "auto", "shared", None]),
    "spec.source.bootstrapServers": st.sampled_from(
        ["k:9092", "k", "k:123456", "a:1,b:2", "a:1,", "a.b-c:80"]
    ),
    "spec.source.topic": st.sampled_from(
        [None, "orders", "bad topic", "a" * 249, "a" * 250, "x.y_z-1"]
    ),
    "spec.source.topicPattern": st.sampled_from(
        [
            None,
            None,
            "orders-.*",
            "",
            "^(orders|payments)-[a-z]{2}$",
            r"\w+\.v\d{1,3}",
            "[^_].*|x{2,}",
            "(?i)orders",
            "[a-z&&[^x]]",
            "orders{,3}",
            "((a|b)c)",
            "orders-(",
            r"\Qa\E",
        ]
    ),
    "spec.source.maxOffsetsPerTrigger": st.sampled_from([None, 0, 1, 100_000_000, 100_000_001]),
    "spec.source.startingOffsets": st.sampled_from(["earliest", "latest", "beginning"]),
    "spec.source.isolationLevel": st.sampled_from(["read_committed", "read_uncommitted", "x"]),
    # Each mechanism's valid form, and each with one thing changed.
    "spec.source.auth": st.sampled_from(
        [
            SCRAM_AUTH,
            MTLS_AUTH,
            OAUTH_AUTH,
            MSK_AUTH,
            {**SCRAM_AUTH, "clientCertificate": MTLS_AUTH["clientCertificate"]},
            {**SCRAM_AUTH, "saslMechanism": "OAUTHBEARER"},
            {**SCRAM_AUTH, "securityProtocol": "SSL"},
            {**SCRAM_AUTH, "securityProtocol": "SASL_PLAINTEXT"},
            {**MTLS_AUTH, "securityProtocol": "SASL_SSL"},
            {**MTLS_AUTH, "securityProtocol": "PLAINTEXT"},
            {**MTLS_AUTH, "username": SCRAM_AUTH["username"]},
            {**OAUTH_AUTH, "saslMechanism": "PLAIN"},
            {**OAUTH_AUTH, "awsMskIam": {}},
            {**MSK_AUTH, "securityProtocol": "SASL_PLAINTEXT"},
            {**MSK_AUTH, "awsMskIam": {"region": "eu-west-1"}},
            {"securityProtocol": "SASL_SSL"},
            {"securityProtocol": "PLAINTEXT"},
            {},
            {
                **OAUTH_AUTH,
                "oauthBearer": {**OAUTH_AUTH["oauthBearer"], "extensions": {"auth": "x"}},
            },
        ]
    ),
    "spec.source.options": st.sampled_from(
        [
            {},
            {"kafka.fetch.max.bytes": "1"},
            {"kafka.group.id": "g"},
            {"kafka.GROUP.ID": "g"},
            {"group.id": "g"},
            {"kafka.sasl.login.refresh.buffer.seconds": "60"},
            {"kafka.sasl.mechanism": "PLAIN"},
            {"kafka.ssl.keystore.location": "/x"},
            {"kafka.ssl.endpoint.identification.algorithm": ""},
            {"kafka.basic.auth.user.info": "u:p", "kafka.client.rack": "a"},
            {"kafka.client.secret": "s"},
            {"kafka.client.id": "${dir:/etc/deltaflow/kafka-password:password}"},
            {"kafka.client.id": "a$b"},
        ]
    ),
    "spec.format.type": st.sampled_from(["json", "avro", "raw", "xml"]),
    "spec.format.schema": st.sampled_from([None, "id BIGINT", ""]),
    "spec.sink.tablePath": st.sampled_from(
        [
            "s3a://l/t",
            "/abs/t",
            "file:///l/t",
            "rel/t",
            "s3a://l/t x",
            "s3://l/t/",
            "s3a://l",
            "s3a://l/",
            "s3a://l//t",
            "s3a://l/a/../t",
            "s3a:///t",
            "gs://l/t",
            "file:///",
            "/l/.t",
        ]
    ),
    "spec.sink.checkpointPath": st.sampled_from(
        [
            None,
            "s3a://l/cp",
            "s3a://l/t",
            "s3a://l/t/cp",
            "s3a://l/tx",
            "s3://l/t/cp",
            "s3a://l/t_dead_letter/cp",
            "s3://l/t_dead_letter",
            "s3a://l",
            "file:///l/t/cp",
            "/l/t",
            "/l/cp/",
            "abfss://c@a.dfs.core.windows.net/cp",
            "s3a://l/cp/./x",
        ]
    ),
    "spec.deadLetter.tablePath": st.sampled_from(
        [
            None,
            "s3a://l/t_dead_letter",
            "s3a://l/t",
            "s3a://l/t/",
            "s3a://l/t/dl",
            "s3://l/t/dl",
            "s3a://l",
            "s3a://l/",
            "s3a://l/tx",
            "gs://l/t/dl",
        ]
    ),
    "spec.sink.partitionBy": st.sampled_from(
        [[], ["country"], ["country-code"], ["_x", "y"], ["9x"], ["day", "Day"], ["a", "a"]]
    ),
    "spec.maintenance.optimize.zOrderBy": st.sampled_from(
        [[], ["id"], ["country"], ["Country", "id"]]
    ),
    "spec.driver.pod": st.sampled_from(
        [
            {},
            {"annotations": {"deltaflow.io/driver-report": "{}"}},
            {"annotations": {"example.com/deltaflow.io": "x", "deltaflow.io": "x"}},
            {"labels": {"x.deltaflow.io/y": "z"}},
            {"labels": {"mydeltaflow.io/y": "z"}},
            {"annotations": {"DELTAFLOW.IO/x": "y"}},
        ]
    ),
    "spec.serviceAccount": st.sampled_from(
        [
            {},
            {"annotations": {"eks.amazonaws.com/role-arn": "a"}},
            {"annotations": {"deltaflow.io/a": "b"}},
        ]
    ),
    "spec.scaling.minExecutors": st.integers(-1, 1002),
    "spec.scaling.maxExecutors": st.integers(-1, 1002),
    "spec.scaling.targetLagSeconds": st.sampled_from([0, 1, 60, 86_400, 86_401]),
    "spec.driver.cores": st.integers(-1, 66),
    "spec.driver.coreRequest": st.sampled_from(
        [None, "250m", "0.5", "1", "2", "0", "0m", "0.0", "1.5m", "1e3", "99999m", "100000m"]
    ),
    "spec.executor.coreRequest": st.sampled_from([None, "500m", "0.001", "0.0001", "64", "2Gi"]),
    "spec.executor.coreLimit": st.sampled_from(
        [None, "1", "1000m", "999m", "0.5", "0.499", "2", "64", "1.5", "2Gi", "0"]
    ),
    "spec.volumes": st.sampled_from(
        [
            [],
            [_volume("lake", "/lake")],
            [_volume("lake", "/lake", read_only=True), _volume("ref", "/data/ref")],
            [_volume("lake", "/lake"), _volume("lake", "/lake2")],
            [_volume("lake", "/lake"), _volume("lake2", "/lake")],
            [_volume("lake", "/tmp")],
            [_volume("lake", "/tmp/lake")],
            [_volume("lake", "/tmpdata")],
            [_volume("lake", "/etc")],
            [_volume("lake", "/etc/deltaflow/x")],
            [_volume("lake", "/etc/lake")],
            [_volume("lake", "/")],
            [_volume("lake", "lake")],
            [_volume("lake", "/lake/")],
            [_volume("lake", "/lake/../tmp")],
            [_volume("config", "/lake")],
            [_volume("spark-local", "/lake")],
            [_volume("Lake", "/lake")],
            [_volume(f"v{i}", f"/v{i}") for i in range(8)],
            [_volume(f"v{i}", f"/v{i}") for i in range(9)],
        ]
    ),
    "spec.executor.memory": st.sampled_from(
        [
            "512m",
            "511m",
            "1g",
            "2gb",
            "0g",
            "256g",
            "257g",
            "262144m",
            "262145m",
            "1G",
            "01g",
            "9999999m",
            "2Gi",
            "511Mi",
            "512Mi",
            "256Gi",
            "257Gi",
            "2GI",
            "2Ki",
            "2048M",
        ]
    ),
    "spec.trigger.interval": st.sampled_from(
        ["10s", "0s", "1ms", "999999h", "1000000h", "5 m", "1m", "10"]
    ),
    "spec.maintenance.optimize.schedule": st.sampled_from(
        [
            "0 * * * *",
            "*/15 * * * *",
            "0 0 31 12 *",
            "60 * * * *",
            "0 24 * * *",
            "0 0 * * 7",
            "0 0 * * 8",
            "@hourly",
            "@every 5m",
            "1-5/2 * * * *",
            "1,2,3 * * * *",
            "* * * * * *",
            "0 0 0 * *",
        ]
    ),
    "spec.maintenance.vacuum.retentionHours": st.sampled_from([0, 1, 24, 167, 168, 200, 87_601]),
    "spec.maintenance.vacuum.allowUnsafeRetention": st.booleans(),
    "spec.sparkConf": st.sampled_from(
        [
            {},
            {"spark.sql.shuffle.partitions": "8"},
            {"spark.master": "local"},
            {"spark.kubernetes.x": "1"},
            {"fs.s3a.endpoint": "x"},
            {"spark.dynamicAllocation.enabled": "true"},
            {"spark.hadoop.fs.s3a.secret.key": "x"},
            {"spark.hadoop.fs.s3a.access.key": "x"},
            {"spark.ssl.keyPassword": "x"},
            {"spark.kafka.clusters.c.sasl.jaas.config": "x"},
            {"spark.hadoop.fs.s3a.aws.credentials.provider": "x"},
            {"spark.authenticate.secret.file": "/s"},
            {"spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true"},
            {"spark.databricks.delta.optimizeWrite.enabled": "true"},
            {"spark.sql.extensions": "x"},
            {"spark.sql.catalog.x": "y"},
            {"spark.executor.memory": "2g"},
        ]
    ),
}


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    """The valid base with a random handful of fields set to valid or invalid values."""
    manifest = valid_manifest(namespace=NS)
    fields = draw(
        st.lists(st.sampled_from(sorted(_FIELD_VALUES)), min_size=1, max_size=5, unique=True)
    )
    for path in fields:
        set_field(manifest, path, draw(_FIELD_VALUES[path]))
    return manifest


def _pydantic_verdict(manifest: dict[str, Any]) -> str | None:
    try:
        DeltaIngestion.model_validate(copy.deepcopy(manifest))
    except ValidationError as e:
        return str(e)
    return None


def _api_verdict(api: client.CustomObjectsApi, manifest: dict[str, Any]) -> str | None:
    try:
        api.create_namespaced_custom_object(
            "deltaflow.io",
            "v1alpha1",
            NS,
            "deltaingestions",
            manifest,
            dry_run="All",
            field_validation="Strict",
        )
    except ApiException as e:
        if e.status in (400, 422):
            return str(e.body)
        raise
    return None


@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(manifest=manifests())
def test_pydantic_and_the_api_server_agree(
    api: client.CustomObjectsApi, manifest: dict[str, Any]
) -> None:
    by_pydantic = _pydantic_verdict(manifest)
    by_api = _api_verdict(api, manifest)
    event(
        "accepted" if by_api is None else "rejected"
    )  # --hypothesis-show-statistics shows the mix
    assert (by_pydantic is None) == (by_api is None), (
        f"judges disagree on {json.dumps(manifest['spec'])} name={manifest['metadata']['name']}\n"
        f"pydantic: {by_pydantic}\nAPI server: {by_api}"
    )
