"""The driver's side of the autoscaling channel: annotations on its own pod, via the API server.

The operator writes the executor count it wants (``deltaflow.io/executors-desired``); the driver
writes what it measured and runs (``deltaflow.io/driver-report``). Both go through the API server
with each side's own ServiceAccount (the driver's Role already manages pods for Spark), so there
is no extra port, no unauthenticated endpoint, and a restarted driver starts from a clean pod.
This module is the only one in the data plane that talks to Kubernetes.
"""

from __future__ import annotations

import json
from typing import Any

from deltaflow_api.channel import DESIRED_ANNOTATION, POOL_REPORT_ANNOTATION, REPORT_ANNOTATION

# (connect, read) seconds: a hung API server must not hold the driver's report loop for ever.
API_TIMEOUT = (5.0, 30.0)


class PodChannel:
    """Reads the desired executor count from, and publishes reports to, the driver's own pod."""

    def __init__(self, namespace: str, pod_name: str) -> None:
        from kubernetes import client, config

        config.load_incluster_config()  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api()
        self.namespace, self.pod_name = namespace, pod_name

    def desired_executors(self) -> int | None:
        """The count the operator asks for, or None when it has not asked (or wrote nonsense)."""
        pod = self._core.read_namespaced_pod(
            self.pod_name, self.namespace, _request_timeout=API_TIMEOUT
        )
        annotations = (pod.metadata.annotations if pod.metadata is not None else None) or {}
        value = annotations.get(DESIRED_ANNOTATION)
        try:
            count = int(value) if value is not None else None
        except ValueError:
            return None
        return count if count is not None and count >= 0 else None

    def publish(self, report: dict[str, Any]) -> None:
        """Write the driver's report annotation (one merge patch)."""
        self._annotate(REPORT_ANNOTATION, report)

    def publish_pool(self, report: dict[str, Any]) -> None:
        """Write a stream pool's report of its members (one merge patch for all of them)."""
        self._annotate(POOL_REPORT_ANNOTATION, report)

    def _annotate(self, key: str, report: dict[str, Any]) -> None:
        body = {"metadata": {"annotations": {key: json.dumps(report, separators=(",", ":"))}}}
        self._core.patch_namespaced_pod(
            self.pod_name, self.namespace, body, _request_timeout=API_TIMEOUT
        )
