"""Two releases of the chart watching the same namespace: exactly one serves each
DeltaIngestion, the other says so and stands back, and takes over once the first is gone.

The second release is a real `helm install` of the chart under another name (its own
ServiceAccount, Lease, driver ClusterRole); its operator runs with exactly that RBAC.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deltaflow_operator.builders.common import service_account_name
from support.operator_harness import (
    OPERATOR_NAMESPACE,
    OperatorUnderTest,
    Replica,
    install_chart,
    load_example,
    restricted_namespace,
    service_account_kubeconfig,
    wait_for,
)

NS = "two-releases"
FIRST = f"{OPERATOR_NAMESPACE}/deltaflow-operator"
SECOND_NS = "team-b-system"
SECOND_NAME = "team-b-deltaflow-operator"  # the chart's names for release "team-b"
SECOND = f"{SECOND_NS}/{SECOND_NAME}"
EXPIRE = 30  # the second release takes over a claim unchanged this long


@pytest.fixture(scope="module")
def second_release(operator: OperatorUnderTest, stack_dir: Path) -> Iterator[dict[str, str]]:
    """`helm install team-b`: the chart again (the CRD is already there); the environment of
    its operator, under its own ServiceAccount."""
    kube = operator.kube
    install_chart(kube, "team-b", SECOND_NS)
    kubeconfig = service_account_kubeconfig(
        kube, SECOND_NS, SECOND_NAME, stack_dir / "team-b.kubeconfig", user="team-b"
    )
    yield {
        "KUBECONFIG": str(kubeconfig),
        "DELTAFLOW_NAMESPACE": SECOND_NS,
        "DELTAFLOW_LEASE_NAME": SECOND_NAME,
        "DELTAFLOW_DRIVER_CLUSTER_ROLE": f"{SECOND_NAME}-driver",
        "DELTAFLOW_OWNERSHIP_EXPIRE_SECONDS": str(EXPIRE),
    }
    # The module's own teardown deletes its DeltaIngestions while an operator still runs.
    kube.kubectl("delete", "deltaingestions", "--all", "-n", NS, "--timeout=90s", check=False)
    kube.helm("uninstall", "team-b", "--namespace", SECOND_NS, check=False)
    kube.kubectl("delete", "namespace", SECOND_NS, "--wait=false", check=False)


def _served_by(operator: OperatorUnderTest, name: str) -> str | None:
    obj = operator.get("deltaingestion", name, NS) or {}
    return ((obj.get("status") or {}).get("operator") or {}).get("name")


def _events(operator: OperatorUnderTest, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in operator.events(name, NS) if e["reason"] == reason]


def _reconciles_of(replica: Replica, name: str) -> float:
    pattern = rf'^deltaflow_operator_reconciles_total\{{name="{name}",namespace="{NS}"\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, replica.metrics(), re.M))


def _bound_role(operator: OperatorUnderTest, name: str) -> str:
    binding = operator.get("rolebinding", service_account_name(name), NS) or {}
    return str((binding.get("roleRef") or {}).get("name"))


def test_one_release_serves_the_other_stands_back_then_takes_over(
    operator: OperatorUnderTest,
    second_release: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    first = next(r for r in operator.replicas if r.service.alive())
    restricted_namespace(operator.kube, NS)
    operator.apply(load_example(NS, "shared", tmp_path_factory.mktemp("lake")))
    wait_for("the first release's claim", lambda: _served_by(operator, "shared") == FIRST)
    wait_for("its driver pod", lambda: operator.get("pod", "shared-driver", NS))
    assert _bound_role(operator, "shared") == "deltaflow-operator-driver"

    second = operator.start("operator-team-b", env=second_release)
    operator.wait_leading(second)  # leads its own release: it would act if nothing stopped it
    told = wait_for(
        "the second release to say it stands back",
        lambda: _events(operator, "shared", "OperatorStandingBack"),
    )
    assert FIRST in told[0]["message"]
    assert SECOND in told[0]["message"]
    # Two of its reconcile intervals (10 s): it has looked and left everything alone.
    wait_for(
        "the second release's gauge",
        lambda: "deltaflow_operator_standing_back_resources 1.0" in second.metrics(),
    )
    before = _reconciles_of(first, "shared")
    wait_for(
        "two more rounds of the serving operator",
        lambda: _reconciles_of(first, "shared") >= before + 2,
        timeout=40,
    )
    assert _reconciles_of(second, "shared") == 0
    assert _bound_role(operator, "shared") == "deltaflow-operator-driver"
    assert _served_by(operator, "shared") == FIRST
    assert len(_events(operator, "shared", "OperatorStandingBack")) == 1  # said once

    # A resource created while both run is claimed by exactly one, and its deletion is not
    # held up by the one standing back (it waits for the owner to stop the driver).
    operator.apply(load_example(NS, "raced", tmp_path_factory.mktemp("lake")))
    owner = wait_for("a claim on the raced resource", lambda: _served_by(operator, "raced"))
    assert owner in (FIRST, SECOND)
    wait_for(
        "the other release to stand back from it",
        lambda: _events(operator, "raced", "OperatorStandingBack"),
    )
    assert _served_by(operator, "raced") == owner
    wait_for("the raced driver pod", lambda: operator.get("pod", "raced-driver", NS))
    operator.kube.kubectl("-n", NS, "delete", "deltaingestion", "raced", "--timeout=60s")
    assert operator.get("pod", "raced-driver", NS) is None

    # The first release goes away (its operator stops; its claim is no longer renewed).
    assert first.service.proc is not None
    first.service.proc.send_signal(signal.SIGTERM)
    assert first.service.proc.wait(timeout=20) == 0
    wait_for(
        "the second release to take over",
        lambda: _served_by(operator, "shared") == SECOND,
        timeout=EXPIRE + 60,
    )
    took = wait_for("the takeover Event", lambda: _events(operator, "shared", "OperatorTookOver"))
    assert FIRST in took[0]["message"]
    wait_for(
        "the driver's RoleBinding re-applied by the new owner",
        lambda: _bound_role(operator, "shared") == f"{SECOND_NAME}-driver",
        timeout=30,
    )
    assert "deltaflow_operator_standing_back_resources 0.0" in second.metrics()
