"""Act: the desired executor count goes on the driver pod, as an annotation its scaling agent
applies within seconds (Spark's own executor requests); the operator never creates, deletes or
counts executor pods itself."""

from __future__ import annotations

from deltaflow_api.channel import DESIRED_ANNOTATION
from deltaflow_operator.builders.common import driver_pod_name
from deltaflow_operator.kube import Kube


class DriverPodRealizer:
    """Asks a stream's driver for an executor count."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def realize(self, namespace: str, name: str, asked: int | None, desired: int) -> None:
        """Annotate the driver pod with ``desired`` unless it already asks for that count."""
        if asked != desired:
            self.kube.annotate_pod(
                namespace, driver_pod_name(name), {DESIRED_ANNOTATION: str(desired)}
            )
