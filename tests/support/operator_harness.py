"""The operator loop for real: chart installed by helm, operator process under its own identity."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from devstack.install import REPO_ROOT
from devstack.kube import KubeControlPlane, write_kubeconfig
from devstack.node import NODE_NAME
from devstack.process import Service, free_port, tail
from devstack.pytest_plugin import track

OPERATOR_NAMESPACE = "deltaflow-system"
T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 30, interval: float = 0.25
) -> T:
    """Poll until ``probe`` returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@dataclass
class Replica:
    """One operator process and its ports."""

    service: Service
    health_port: int
    metrics_port: int

    def ready_status(self) -> int:
        """HTTP status of /readyz: 200 while healthy, leading or standing by."""
        return _http_status(f"http://127.0.0.1:{self.health_port}/readyz")

    def metrics(self) -> str:
        """The Prometheus exposition text."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())


@dataclass
class OperatorUnderTest:
    """The control plane, the operator process and helpers to drive both."""

    kube: KubeControlPlane
    kubeconfig: Path
    work_dir: Path
    services: list[Service]
    replicas: list[Replica] = field(default_factory=list)

    def start(self, name: str = "operator", env: dict[str, str] | None = None) -> Replica:
        """Start one operator replica (it campaigns for the Lease); ``env`` overrides the
        defaults below (another release's identity, say)."""
        health, metrics = free_port(), free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "DELTAFLOW_NAMESPACE": OPERATOR_NAMESPACE,
            "DELTAFLOW_IMAGE": "deltaflow:test",
            "DELTAFLOW_HEALTH_PORT": str(health),
            "DELTAFLOW_METRICS_PORT": str(metrics),
            # The chart's interval: the tests pass only if the operator reacts to changes (its
            # pods' events, its own requeue) rather than to a fast poll.
            "DELTAFLOW_RECONCILE_INTERVAL_SECONDS": "10",
            "DELTAFLOW_BACKOFF_BASE_SECONDS": "1",
            "DELTAFLOW_BACKOFF_MAX_SECONDS": "4",
            "DELTAFLOW_DEGRADED_AFTER_FAILURES": "3",
            # Claims renewed at every reconcile, so a second release's short expiry in
            # tests/e2e/test_operator_releases.py measures a stopped owner, not a slow one.
            "DELTAFLOW_OWNERSHIP_RENEW_SECONDS": "5",
            **(env or {}),
        }
        service = Service(
            name,
            [str(REPO_ROOT / ".venv/bin/deltaflow"), "operator"],
            self.work_dir / f"{name}.log",
            env=env,
        )
        service.start()
        self.services.append(service)
        track(service)
        replica = Replica(service, health, metrics)
        self.replicas.append(replica)
        return replica

    def wait_leading(self, replica: Replica, timeout: float = 40) -> None:
        """Until the replica answers /leader with 200: it holds the Lease (/readyz is 200 on a
        standby too, so that rollouts finish)."""
        replica.service.wait_ready(
            lambda: _http_status(f"http://127.0.0.1:{replica.health_port}/leader") == 200,
            timeout,
            "leading (/leader)",
        )

    def apply(self, manifest: dict[str, Any]) -> None:
        """kubectl apply a manifest (as admin)."""
        self.kube.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """An object as the API server holds it, or None."""
        proc = self.kube.kubectl("-n", namespace, "get", kind, name, "-o", "json", check=False)
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return None
        obj: dict[str, Any] = json.loads(proc.stdout)
        return obj

    def condition(self, name: str, namespace: str, type_: str) -> dict[str, Any] | None:
        """One status condition of a DeltaIngestion."""
        obj = self.get("deltaingestion", name, namespace) or {}
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == type_:
                return dict(cond)
        return None

    def events(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """Events recorded on the DeltaIngestion."""
        out = self.kube.kubectl_json(
            "-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}"
        )
        return list(out["items"])

    def set_pod_phase(self, name: str, namespace: str, phase: str, **extra: Any) -> None:
        """Report a pod phase through the status subresource, as a kubelet would."""
        status = {"phase": phase, **extra}
        self.kube.kubectl(
            "-n",
            namespace,
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )

    def logs(self) -> str:
        """Log tails of every operator replica started."""
        return "\n".join(f"--- {s.name} ---\n{tail(s.log_path, 80)}" for s in self.services)


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def restricted_namespace(kube: KubeControlPlane, name: str) -> None:
    """A namespace that enforces the restricted Pod Security Standard."""
    kube.kubectl("create", "namespace", name)
    kube.kubectl(
        "label",
        "namespace",
        name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )


def install_chart(kube: KubeControlPlane, release: str, namespace: str) -> None:
    """`helm install` of the chart as release ``release``, with the node's image and no operator
    replicas (the tests run the operator process themselves)."""
    repository, tag = kube.image.rsplit(":", 1)
    kube.helm(
        "install",
        release,
        str(REPO_ROOT / "charts" / "deltaflow"),
        "--namespace",
        namespace,
        "--create-namespace",
        "--set=replicaCount=0",
        f"--set=image.repository={repository}",
        f"--set=image.tag={tag}",
    )


def service_account_kubeconfig(
    kube: KubeControlPlane, namespace: str, account: str, path: Path, user: str
) -> Path:
    """A kubeconfig at ``path`` acting as the ServiceAccount ``namespace/account`` (4 h token)."""
    token = kube.kubectl(
        "-n", namespace, "create", "token", account, "--duration=4h"
    ).stdout.strip()
    write_kubeconfig(path, kube.server, kube.ca_file, token, user=user)
    return path


@pytest.fixture(scope="session")
def chart_installed(kube: KubeControlPlane) -> KubeControlPlane:
    """`helm install` of the chart: CRD, operator RBAC, a Deployment at 0 replicas.

    The operator-logic tests run the operator process themselves, under the chart's
    ServiceAccount (see `operator`); the chart's own pods run in tests/e2e/test_running_pods.py.
    """
    install_chart(kube, "deltaflow", OPERATOR_NAMESPACE)
    wait_for(
        "the CRD to be established",
        lambda: (
            "True"
            in kube.kubectl(
                "get",
                "crd",
                "deltaingestions.deltaflow.io",
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                check=False,
            ).stdout
        ),
    )
    return kube


@pytest.fixture(scope="session")
def operator_identity(chart_installed: KubeControlPlane, stack_dir: Path) -> Path:
    """A kubeconfig for the chart's ServiceAccount: the operator runs with exactly its RBAC."""
    path = stack_dir / "operator.kubeconfig"
    return service_account_kubeconfig(
        chart_installed, OPERATOR_NAMESPACE, "deltaflow-operator", path, user="operator"
    )


@pytest.fixture(scope="module")
def operator(
    chart_installed: KubeControlPlane,
    operator_identity: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorUnderTest]:
    """One operator process, leading, for one test module, with the node cordoned.

    These tests judge the operator's decisions against the real API server and play the kubelet
    themselves (they report pod phases through the status subresource), so no pod may be
    scheduled while they run; tests/e2e/test_running_pods.py runs the same loop with real pods.
    """
    kube = chart_installed
    kube.kubectl("cordon", NODE_NAME)
    under_test = OperatorUnderTest(kube, operator_identity, tmp_path_factory.mktemp("operator"), [])
    under_test.wait_leading(under_test.start())
    yield under_test
    # Remove what the module made while its operator still releases finalizers, so no pod of
    # it is scheduled (and holds CPU) once the node takes pods again.
    kube.kubectl("delete", "deltaingestions", "--all", "-A", "--timeout=90s")
    for s in under_test.services:
        s.stop()
    wait_for(
        "the module's pods to be gone",
        lambda: (
            not kube.kubectl_json(
                "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=deltaflow-operator"
            )["items"]
        ),
        timeout=90,
    )
    kube.kubectl("uncordon", NODE_NAME)


def load_example(namespace: str, name: str, table_root: Path) -> dict[str, Any]:
    """The README's example manifest, pointed at a local table root and namespace."""
    manifest: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "orders.yaml").read_text())
    manifest["metadata"].update(name=name, namespace=namespace)
    manifest["spec"]["sink"]["tablePath"] = f"file://{table_root}/{name}"
    manifest["spec"]["deadLetter"]["tablePath"] = f"file://{table_root}/{name}_dead_letter"
    manifest["spec"]["sink"].pop("storage", None)
    return manifest
