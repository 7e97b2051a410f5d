"""`deltaflow operator`: win the leader Lease (one active replica), then run kopf while leading."""

from __future__ import annotations

import logging
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kopf
from prometheus_client import start_http_server

from deltaflow_operator import handlers, metrics
from deltaflow_operator.kube import Kube, load_config, start_leader_election
from deltaflow_operator.settings import Settings

log = logging.getLogger("deltaflow.operator")
LEASE_NAME = "deltaflow-operator"


class _Health(BaseHTTPRequestHandler):
    """/healthz: alive (leader or standby); /readyz: 200 only while leading."""

    leading = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/healthz":
            code, text = 200, "ok"
        elif self.path == "/readyz":
            code, text = (200, "leader") if self.leading.is_set() else (503, "standby")
        else:
            code, text = 404, "not found"
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, format: str, *args: object) -> None:
        return  # probes every few seconds would drown the operator's own log


def run(settings: Settings | None = None) -> int:
    """Run the operator; returns the process exit code (1 when leadership is lost)."""
    settings = settings or Settings.from_env()
    logging.basicConfig(
        level=os.environ.get("DELTAFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    load_config()
    start_http_server(settings.metrics_port)
    health = ThreadingHTTPServer(("0.0.0.0", settings.health_port), _Health)
    threading.Thread(target=health.serve_forever, name="health", daemon=True).start()

    leading, stop, lost = threading.Event(), threading.Event(), threading.Event()

    def on_started() -> None:
        log.info("leading: starting to reconcile")
        metrics.IS_LEADER.set(1)
        _Health.leading.set()
        leading.set()

    def on_stopped() -> None:
        log.error("lost the leader Lease: stopping so another replica can take over")
        metrics.IS_LEADER.set(0)
        _Health.leading.clear()
        lost.set()
        stop.set()
        leading.set()  # wake the main thread if it is still waiting

    start_leader_election(settings.namespace, LEASE_NAME, on_started, on_stopped)
    log.info("standby: waiting for the leader Lease %s/%s", settings.namespace, LEASE_NAME)
    leading.wait()
    if lost.is_set():
        return 1
    handlers.install(settings, Kube())
    kopf.run(clusterwide=True, standalone=True, stop_flag=stop)
    return 1 if lost.is_set() else 0


if __name__ == "__main__":
    sys.exit(run())
