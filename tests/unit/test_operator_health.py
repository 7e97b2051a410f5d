"""Ready means healthy, leader or standby (so rollouts finish); /leader tells who leads."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from deltaflow_operator.main import _Health, health_response


@pytest.mark.parametrize(
    ("path", "leading", "stopping", "code"),
    [
        ("/healthz", False, False, 200),
        ("/healthz", True, False, 200),
        ("/readyz", True, False, 200),
        ("/readyz", False, False, 200),  # the standby is ready: rollouts and --wait finish
        ("/readyz", False, True, 503),  # lost the Lease, exiting
        ("/leader", True, False, 200),
        ("/leader", False, False, 503),
        ("/leader", False, True, 503),
        ("/metrics", True, False, 404),
    ],
)
def test_health_endpoints(path: str, leading: bool, stopping: bool, code: int) -> None:
    assert health_response(path, leading=leading, stopping=stopping)[0] == code


def test_bodies_say_the_role() -> None:
    assert health_response("/readyz", leading=False, stopping=False) == (200, "standby")
    assert health_response("/readyz", leading=True, stopping=False) == (200, "leader")
    assert health_response("/leader", leading=False, stopping=False) == (503, "standby")


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    _Health.leading.clear()
    _Health.stopping.clear()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_server_follows_the_lease(server: str) -> None:
    assert (_status(f"{server}/readyz"), _status(f"{server}/leader")) == (200, 503)
    _Health.leading.set()
    assert (_status(f"{server}/readyz"), _status(f"{server}/leader")) == (200, 200)
    assert _status(f"{server}/leader?verbose=1") == 200
    _Health.leading.clear()
    _Health.stopping.set()
    assert (_status(f"{server}/readyz"), _status(f"{server}/leader")) == (503, 503)
    assert _status(f"{server}/healthz") == 200


def test_liveness_fails_when_kopfs_event_loop_stops_running() -> None:
    import asyncio
    import time

    from deltaflow_operator.handlers import Loop

    loop = Loop(reconciler=None, interval=10)  # type: ignore[arg-type]  # never reconciles here
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(_start(loop), event_loop).result(5)
        time.sleep(0.3)
        assert loop.wedged(silent_after=1.0) is None
        event_loop.call_soon_threadsafe(time.sleep, 2.5)  # a handler that blocks the loop
        time.sleep(1.8)
        reason = loop.wedged(silent_after=1.0)
        assert reason is not None
        assert "event loop" in reason
        time.sleep(1.5)
        assert loop.wedged(silent_after=1.0) is None  # beats again once unblocked
    finally:
        event_loop.call_soon_threadsafe(event_loop.stop)
        thread.join(5)


async def _start(loop: Any) -> None:
    import asyncio

    loop.heartbeat = asyncio.get_running_loop().create_task(loop.beat(period=0.1))


def test_liveness_fails_when_a_reconcile_hangs() -> None:
    import time

    from deltaflow_operator.handlers import HUNG_RECONCILE, Loop

    loop = Loop(reconciler=None, interval=10)  # type: ignore[arg-type]
    loop.running["data/orders"] = time.monotonic() - HUNG_RECONCILE - 1
    reason = loop.wedged()
    assert reason is not None
    assert "data/orders" in reason
    code, body = health_response("/healthz", leading=True, stopping=False, wedged=reason)
    assert (code, body) == (503, reason)


def test_a_deleted_resource_leaves_no_metric_series() -> None:
    from prometheus_client import generate_latest

    from deltaflow_operator import metrics

    metrics.RECONCILES.labels("gone-ns", "gone").inc()
    metrics.LAG_RECORDS.labels("gone-ns", "gone").set(42)
    metrics.SCALING_DECISIONS.labels("gone-ns", "gone", "hold").inc()
    metrics.LAG_RECORDS.labels("gone-ns", "kept").set(7)
    assert 'name="gone"' in generate_latest().decode()
    metrics.forget_resource("gone-ns", "gone")
    text = generate_latest().decode()
    assert 'name="gone"' not in text
    assert 'deltaflow_operator_kafka_lag_records{name="kept",namespace="gone-ns"} 7.0' in text
