"""`deltaflow operator`: win the leader Lease (one active replica), then run kopf while leading."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NoReturn

import kopf
from prometheus_client import start_http_server

from deltaflow_operator import handlers, metrics
from deltaflow_operator.kube import Kube, load_config, release_lease, start_leader_election
from deltaflow_operator.settings import Settings

log = logging.getLogger("deltaflow.operator")


def health_response(
    path: str, *, leading: bool, stopping: bool, wedged: str | None = None
) -> tuple[int, str]:
    """Status code and body of the health endpoints.

    ``/healthz``  liveness: the process answers and, on the leader, kopf's event loop answers
                  and no reconcile hangs (``wedged`` says which not); 503 makes the kubelet
                  restart the replica, and the standby takes over.
    ``/readyz``   readiness: healthy and either leading or standing by (200 on the standby too,
                  so ``helm --wait``, ``helm upgrade`` and ``kubectl rollout status`` finish with
                  two replicas); 503 once the Lease is lost and the process is on its way out.
    ``/leader``   200 while this replica holds the Lease, 503 on standby (also the
                  ``deltaflow_operator_leader`` gauge).
    """
    role = "leader" if leading else "standby"
    if path == "/healthz":
        return (503, wedged) if wedged else (200, "ok")
    if path == "/readyz":
        return (503, "stopping: lost the leader Lease") if stopping else (200, role)
    if path == "/leader":
        return (200, role) if leading and not stopping else (503, role)
    return 404, "not found"


class _Health(BaseHTTPRequestHandler):
    """Serves :func:`health_response` from the process-wide leader state."""

    leading = threading.Event()
    stopping = threading.Event()
    # Set once kopf runs: what is wedged in the reconcile loop, if anything.
    wedged: Callable[[], str | None] = staticmethod(lambda: None)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        code, text = health_response(
            path,
            leading=self.leading.is_set(),
            stopping=self.stopping.is_set(),
            wedged=_Health.wedged() if path == "/healthz" else None,
        )
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
    # The client's leader election logs every renewal (every 3 s) at INFO; ours logs the changes.
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
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
        _Health.stopping.set()
        lost.set()
        stop.set()
        leading.set()  # wake the main thread if it is still waiting

    lease = settings.lease_name
    identity = start_leader_election(settings.namespace, lease, on_started, on_stopped)
    log.info("standby: waiting for the leader Lease %s/%s", settings.namespace, settings.lease_name)
    leading.wait()
    if lost.is_set():
        return 1
    handlers.install(stop_flag=stop)
    loop = handlers.new_loop(settings, Kube())
    _Health.wedged = staticmethod(loop.wedged)
    scope = settings.watch_namespaces
    if scope:
        log.info("serving DeltaIngestions in %s only", ", ".join(scope))
    kopf.run(
        clusterwide=not scope,
        namespaces=list(scope),
        standalone=True,
        stop_flag=stop,
        memo=kopf.Memo(loop=loop),
    )
    if lost.is_set():
        return 1
    # Stopped on purpose (SIGTERM: pod deleted, rollout): nothing acts any more, so hand the
    # Lease over now rather than make the standby wait for it to expire.
    if release_lease(settings.namespace, settings.lease_name, identity):
        log.info("released the leader Lease %s/%s", settings.namespace, settings.lease_name)
    return 0


def serve() -> NoReturn:
    """Run the operator and end the process with its exit code, skipping interpreter shutdown.

    The leader-election and health threads are daemons with no way to stop them. Python's
    shutdown aborts the process (SIGABRT, seen in CI after a SIGTERM) when one of them holds
    stderr's lock at that moment. Nothing is left to clean up once ``run`` returns (the Lease is
    released), so flush what was written and leave.
    """
    code = run()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    serve()
