"""The driver's master and address come from its pod, not from cluster DNS."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_runtime.jvm_archive import (
    ARCHIVE_NAME,
    ENV_JVM_ARCHIVE,
    find_archive,
    with_archive,
)
from deltaflow_runtime.session import (
    DRIVER_JAVA_OPTIONS,
    IN_CLUSTER_MASTER,
    LOCAL_MODE_JAVA_OPTIONS,
    InClusterConfigError,
    in_cluster_master,
    pod_conf,
    runtime_conf,
    url_host,
)

POD = {
    "DELTAFLOW_SPARK_MASTER": IN_CLUSTER_MASTER,
    "DELTAFLOW_POD_IP": "10.88.0.17",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
}


def _ingestion(**spec: Any) -> DeltaIngestion:
    return DeltaIngestion.model_validate(
        {
            "metadata": {"name": "orders", "namespace": "data"},
            "spec": {
                "source": {"bootstrapServers": "k:9092", "topic": "orders"},
                "format": {"type": "raw"},
                "sink": {"tablePath": "file:///lake/orders"},
                **spec,
            },
        }
    )


def test_in_cluster_master_is_the_api_servers_ip_from_the_kubelets_variables() -> None:
    assert in_cluster_master(POD) == "k8s://https://10.96.0.1:443"
    assert in_cluster_master({**POD, "KUBERNETES_SERVICE_PORT": "6443"}).endswith(":6443")


def test_ipv6_hosts_get_brackets() -> None:
    env = {**POD, "KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "DELTAFLOW_POD_IP": "fd00:10:88::5"}
    conf = pod_conf(env)
    assert conf["spark.master"] == "k8s://https://[fd00:10:96::1]:443"
    assert conf["spark.driver.host"] == "[fd00:10:88::5]"
    assert url_host("[fd00::1]") == "[fd00::1]"  # already bracketed: left alone
    assert url_host("10.0.0.1") == "10.0.0.1"


@pytest.mark.parametrize(
    "missing",
    [
        {"KUBERNETES_SERVICE_HOST": ""},
        {"KUBERNETES_SERVICE_PORT": ""},
        {"KUBERNETES_SERVICE_PORT": "https"},
    ],
)
def test_the_marker_without_the_kubelets_variables_fails_saying_what_is_missing(
    missing: dict[str, str],
) -> None:
    env = {k: v for k, v in {**POD, **missing}.items() if v}
    with pytest.raises(InClusterConfigError, match="KUBERNETES_SERVICE_HOST"):
        pod_conf(env)


def test_without_the_marker_the_runtime_sets_no_master() -> None:
    # Local runs and the maintenance jobs (Spark local mode) even inside a pod, where the
    # kubelet sets KUBERNETES_SERVICE_HOST too.
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert pod_conf(env) == {}
    assert "spark.master" not in runtime_conf(_ingestion(), env=env)
    # Any other master given through the variable is used as it is.
    assert pod_conf({"DELTAFLOW_SPARK_MASTER": "local[2]"}) == {"spark.master": "local[2]"}


def test_the_driver_pod_gets_master_and_host_and_they_win_over_the_spec() -> None:
    ingestion = _ingestion(sparkConf={"spark.driver.host": "orders-driver.data.svc"})
    conf = runtime_conf(ingestion, env=POD)
    assert conf["spark.master"] == "k8s://https://10.96.0.1:443"
    assert conf["spark.driver.host"] == "10.88.0.17"


@pytest.mark.parametrize(
    ("master", "spec_options", "expected"),
    [
        # A local-mode driver pod compiles with C1 only; the spec's options come after (and win).
        ("local[1]", None, LOCAL_MODE_JAVA_OPTIONS),
        (
            " local[2] ",
            "-XX:TieredStopAtLevel=4",
            f"{LOCAL_MODE_JAVA_OPTIONS} -XX:TieredStopAtLevel=4",
        ),
        # A driver on executor pods, and any run outside a pod, keep the JVM's defaults.
        (IN_CLUSTER_MASTER, None, None),
        (IN_CLUSTER_MASTER, "-Dx=1", "-Dx=1"),
        ("", None, None),
    ],
)
def test_only_a_local_mode_driver_pod_gives_up_the_c2_compiler(
    master: str, spec_options: str | None, expected: str | None
) -> None:
    spec_conf = {} if spec_options is None else {DRIVER_JAVA_OPTIONS: spec_options}
    env = {**POD, "DELTAFLOW_SPARK_MASTER": master}
    conf = runtime_conf(_ingestion(sparkConf=spec_conf), env=env)
    assert conf.get(DRIVER_JAVA_OPTIONS) == expected
    # A master given on the command line decides: not local, no C1-only JVM.
    pinned = runtime_conf(_ingestion(), env=env, master="k8s://https://10.96.0.1:443")
    assert DRIVER_JAVA_OPTIONS not in pinned


def test_command_line_master_and_conf_still_win() -> None:
    conf = runtime_conf(
        _ingestion(),
        master="local[2]",
        extra={"spark.driver.host": "127.0.0.1"},
        env=POD,
    )
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.driver.host"] == "127.0.0.1"


# --- the class-data archive a local driver maps (jvm_archive) ----------------------------------


def _built(cache: Path, key: str, mtime: float, complete: bool = True) -> Path:
    entry = cache / "jvm-archive" / key
    entry.mkdir(parents=True)
    archive = entry / ARCHIVE_NAME
    archive.write_bytes(b"jsa")
    os.utime(archive, (mtime, mtime))
    if complete:
        (entry / ".complete").write_text("done")
    return archive


def test_a_driver_finds_the_archive_named_or_the_newest_complete_one_the_stack_built(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    assert find_archive({}, cache) is None  # nothing built: the JVM starts as usual
    old = _built(cache, "old", 1_000)
    new = _built(cache, "new", 2_000)
    _built(cache, ".staging-newest-1", 3_000, complete=False)  # still being written
    assert find_archive({}, cache) == new
    assert find_archive({ENV_JVM_ARCHIVE: str(old)}, cache) == old
    assert find_archive({ENV_JVM_ARCHIVE: ""}, cache) is None  # turned off
    assert find_archive({ENV_JVM_ARCHIVE: str(tmp_path / "gone.jsa")}, cache) is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, "-XX:SharedArchiveFile=/a.jsa"),
        ("-Dderby.system.home=/w", "-Dderby.system.home=/w -XX:SharedArchiveFile=/a.jsa"),
        ("-XX:SharedArchiveFile=/mine.jsa", "-XX:SharedArchiveFile=/mine.jsa"),  # the user's
        ("-XX:ArchiveClassesAtExit=/t.jsa", "-XX:ArchiveClassesAtExit=/t.jsa"),  # a training run
    ],
)
def test_the_archive_joins_the_drivers_own_java_options(options: str | None, expected: str) -> None:
    conf = {"spark.master": "local[2]"}
    if options is not None:
        conf[DRIVER_JAVA_OPTIONS] = options
    out = with_archive(conf, Path("/a.jsa"))
    assert out[DRIVER_JAVA_OPTIONS] == expected
    assert out["spark.master"] == "local[2]"
    assert with_archive(conf, None) == conf
