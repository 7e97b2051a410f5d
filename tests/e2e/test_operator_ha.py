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

from support.operator_harness import OperatorUnderTest, Replica, load_example, wait_for

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
