"""The chart as helm renders it: restricted pods, small requests, a readiness a rollout can pass."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.install import installed_path

REPO = Path(__file__).resolve().parents[2]
UID = 185  # the image's user (Dockerfile)


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    # The pinned helm the stack builds (a missing one fails the run with the step to rerun).
    helm = str(installed_path("helm") / "helm")
    out = subprocess.run(
        [helm, "template", "deltaflow", str(REPO / "charts/deltaflow"), "-n", "deltaflow-system"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    return next(d for d in docs if d["kind"] == "Deployment")


def test_operator_pod_passes_the_restricted_standard(deployment: dict[str, Any]) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "fsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["runAsNonRoot"] is True
        assert (ctx["runAsUser"], ctx["runAsGroup"]) == (UID, UID)
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert all(set(v) - {"name"} <= {"emptyDir", "configMap", "secret"} for v in pod["volumes"])


def test_operator_requests_little(deployment: dict[str, Any]) -> None:
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "100m"
    assert "cpu" not in resources.get("limits", {})


def test_readiness_is_readyz_which_the_standby_passes(deployment: dict[str, Any]) -> None:
    from deltaflow_operator.main import health_response

    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probe = container["readinessProbe"]["httpGet"]
    assert probe["port"] in ports or probe["port"] in ports.values()
    # Both replicas of a two-replica Deployment become ready, so rollouts and --wait finish.
    assert deployment["spec"]["replicas"] == 2
    for leading in (True, False):
        assert health_response(probe["path"], leading=leading, stopping=False)[0] == 200
    liveness = container["livenessProbe"]["httpGet"]["path"]
    assert health_response(liveness, leading=False, stopping=False)[0] == 200
