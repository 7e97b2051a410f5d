"""Two operator replicas never both act: one leads, the other takes over when the leader dies.

Both are ready (/readyz 200) so a Deployment's rollout finishes; /leader and the
deltaflow_operator_leader gauge tell which one leads.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from support.operator_harness import OperatorUnderTest, Replica, load_example, wait_for
from support.tcp_proxy import FreezableProxy

NS = "ha"


def _leader_status(replica: Replica) -> int:
    """HTTP status of /leader: 200 while the replica holds the Lease, 503 on standby."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{replica.health_port}/leader", timeout=2
        ) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except urllib.error.URLError:
        return 0  # no process answers (it has exited)


def _leader(operator: OperatorUnderTest) -> Replica:
    return next(r for r in operator.replicas if r.service.alive() and _leader_status(r) == 200)


def test_standby_takes_over_when_the_leader_dies(
    operator: OperatorUnderTest, tmp_path_factory
) -> None:  # type: ignore[no-untyped-def]
    leader = _leader(operator)
    standby = operator.start("operator-standby")
    standby.service.wait_ready(
        lambda: standby.ready_status() == 200 and _leader_status(standby) == 503,
        30,
        "ready on standby (/readyz 200, /leader 503)",
    )
    time.sleep(3)
    assert _leader_status(standby) == 503  # still waiting: the leader renews its Lease
    assert standby.ready_status() == 200  # ready all the same: a rollout would finish
    assert leader.ready_status() == 200
    assert "deltaflow_operator_leader 0.0" in standby.metrics()
    assert "deltaflow_operator_leader 1.0" in leader.metrics()

    operator.kube.kubectl("create", "namespace", NS)
    operator.apply(load_example(NS, "before", tmp_path_factory.mktemp("lake")))
    wait_for("leader creates the driver", lambda: operator.get("pod", "before-driver", NS))

    # SIGTERM, as the kubelet sends when the leader's pod is deleted or rolled: the leader stops
    # at once and hands the Lease over, so the standby leads within its retry period (3 s),
    # well before the 15 s lease would have expired.
    assert leader.service.proc is not None
    leader.service.proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert leader.service.proc.wait(timeout=10) == 0
    operator.wait_leading(standby, timeout=60)
    takeover = time.monotonic() - stopped
    assert takeover < 10, f"the standby led {takeover:.1f}s after the leader's SIGTERM"
    operator.apply(load_example(NS, "after", tmp_path_factory.mktemp("lake")))
    wait_for(
        "the new leader creates the driver",
        lambda: operator.get("pod", "after-driver", NS),
        timeout=30,
    )
    assert "deltaflow_operator_leader 1.0" in standby.metrics()
    assert standby.ready_status() == 200


def test_operator_metrics(operator: OperatorUnderTest) -> None:
    leader = _leader(operator)
    text = leader.metrics()
    reconciles = [
        float(v)
        for v in re.findall(r"^deltaflow_operator_reconciles_total\{[^}]*\} (\S+)$", text, re.M)
    ]
    assert reconciles
    assert sum(reconciles) > 0
    assert re.search(r"^deltaflow_operator_reconcile_duration_seconds_count \d+", text, re.M)
    assert (
        "deltaflow_operator_reconcile_errors_total" in text
        or "deltaflow_operator_reconciles_total" in text
    )
    assert re.search(
        r'^deltaflow_operator_driver_actions_total\{action="create",reason="start"\} [1-9]',
        text,
        re.M,
    )


def test_a_leader_whose_api_server_stops_answering_stops_before_another_can_lead(
    operator: OperatorUnderTest, tmp_path: Path
) -> None:
    """The leader's connection to the API server hangs (a proxy that stops passing bytes and
    closes nothing): its Lease renewals time out, it stops acting within the renew deadline
    (10 s of its 15 s Lease) and exits 1, and only after that does a standby lead."""
    proxy = FreezableProxy(_api_address(operator.kubeconfig))
    config = yaml.safe_load(operator.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    through_proxy = tmp_path / "proxied.kubeconfig"
    through_proxy.write_text(yaml.safe_dump(config))
    try:
        frozen = operator.start("operator-behind-proxy", env={"KUBECONFIG": str(through_proxy)})
        # It leads once the current leader hands over (SIGTERM releases the Lease).
        leader = _leader(operator)
        assert leader.service.proc is not None
        leader.service.proc.send_signal(signal.SIGTERM)
        assert leader.service.proc.wait(timeout=30) == 0
        operator.wait_leading(frozen, timeout=60)
        standby = operator.start("operator-direct")
        standby.service.wait_ready(
            lambda: _leader_status(standby) == 503, 30, "ready on standby (/leader 503)"
        )
        proxy.freeze()
        froze = time.monotonic()
        wait_for("the cut-off leader to stop leading", lambda: _leader_status(frozen) != 200,
                 timeout=30, interval=0.2)  # fmt: skip
        stopped = time.monotonic() - froze
        operator.wait_leading(standby, timeout=60)
        led = time.monotonic() - froze
        assert frozen.service.proc is not None
        assert frozen.service.proc.wait(timeout=90) == 1  # it ends, and says it lost the Lease
    finally:
        proxy.close()
    log = frozen.service.log_path.read_text(errors="replace")
    assert "stopping before it can pass to another replica" in log, log[-3000:]
    # Its last renewal was up to a retry period (3 s) before the freeze: it stops within the
    # 10 s renew deadline of it, the standby leads only once the 15 s Lease has passed.
    assert stopped < 12, f"the leader stopped {stopped:.1f}s after its API server hung"
    assert led > stopped, (stopped, led)
    assert led > 11, f"the standby led {led:.1f}s after the freeze, before the Lease could pass"


def _api_address(kubeconfig: Path) -> tuple[str, int]:
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return host, int(port)
