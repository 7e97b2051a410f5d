"""Run a command in a pod of the project's image on the real node, as restricted as every pod the
operator makes, and read what it printed."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from deltaflow_operator.builders.common import RUNTIME_UID
from devstack.kube import KubeControlPlane
from support.operator_harness import wait_for


@dataclass(frozen=True)
class PodRun:
    """How the pod ended and what it printed."""

    phase: str  # Succeeded or Failed
    log: str

    def json_lines(self) -> list[dict[str, Any]]:
        """The JSON objects it printed, one per line (other lines are ignored)."""
        return [json.loads(line) for line in self.log.splitlines() if line.startswith("{")]


def run_in_image(
    kube: KubeControlPlane,
    namespace: str,
    name: str,
    args: list[str],
    *,
    pod_labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> PodRun:
    """Run ``args`` in a one-off pod of the node's image until it ends; the pod is deleted (a
    suffix makes each run's pod its own: a rerun never reads an earlier run's log)."""
    name = f"{name}-{secrets.token_hex(3)}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": pod_labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUNTIME_UID,
                "runAsGroup": RUNTIME_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": kube.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": args[:1],
                    "args": args[1:],
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "512Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    kube.kubectl("create", "-f", "-", stdin=json.dumps(pod))

    def ended() -> str | None:
        phase = kube.kubectl_json("-n", namespace, "get", "pod", name)["status"].get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None

    try:
        phase = wait_for(f"pod {namespace}/{name} to finish", ended, timeout=timeout)
        log = kube.kubectl("-n", namespace, "logs", name).stdout
    finally:
        kube.kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)
    return PodRun(phase, log)
