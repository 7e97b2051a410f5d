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


CHART = str(REPO / "charts/deltaflow")


def _helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # The pinned helm the stack builds (a missing one fails the run with the step to rerun).
    helm = str(installed_path("helm") / "helm")
    return subprocess.run([helm, *args], capture_output=True, text=True, check=check)


def render(release: str = "deltaflow", *values: str) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them."""
    out = _helm("template", release, CHART, "-n", "deltaflow-system", *values).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"]))


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    return _one(render(), "Deployment")


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


def test_helm_lint_passes_strict() -> None:
    result = _helm("lint", "--strict", CHART, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["--set=operatr.logLevel=DEBUG"], "operatr"),
        (["--set=operator.loglevel=DEBUG"], "loglevel"),
        (["--set=operator.logLevel=VERBOSE"], "logLevel"),
        (["--set=replicaCount=-1"], "replicaCount"),
        (["--set=metrics.port=70000"], "port"),
        (["--set=image.pullPolicy=Sometimes"], "pullPolicy"),
    ],
)
def test_a_values_mistake_is_refused_naming_the_key(values: list[str], named: str) -> None:
    result = _helm("template", "deltaflow", CHART, *values, check=False)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def test_cluster_scoped_names_carry_the_release_so_two_releases_never_collide() -> None:
    def cluster_scoped(release: str) -> set[tuple[str, str]]:
        return {
            (d["kind"], d["metadata"]["name"])
            for d in render(release)
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
        }

    default, other = cluster_scoped("deltaflow"), cluster_scoped("team-a")
    assert ("ClusterRole", "deltaflow-operator") in default
    assert not default & other
    env = {
        e["name"]: e.get("value")
        for e in _one(render("team-a"), "Deployment")["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    assert env["DELTAFLOW_LEASE_NAME"] == "team-a-deltaflow-operator"
    assert env["DELTAFLOW_DRIVER_CLUSTER_ROLE"] == "team-a-deltaflow-operator-driver"


def test_the_driver_cluster_role_is_the_builders_rules() -> None:
    from deltaflow_operator.builders.driver import DRIVER_RULES
    from deltaflow_operator.settings import Settings

    role = _one(render(), "ClusterRole", Settings().driver_cluster_role)
    assert role["rules"] == DRIVER_RULES


def test_the_pool_cluster_role_is_the_builders_rules() -> None:
    from deltaflow_operator.builders.pool import POOL_RULES
    from deltaflow_operator.settings import Settings

    role = _one(render(), "ClusterRole", Settings().pool_cluster_role)
    assert role["rules"] == POOL_RULES


def test_the_driver_admission_policy_knows_drivers_as_the_operator_makes_them() -> None:
    """The policy's handles on a driver are the operator's: its ServiceAccount's name suffix
    and labels, and the annotations it writes there. A rename on one side fails here."""
    from deltaflow_api import DeltaIngestion, names
    from deltaflow_operator.builders import driver
    from deltaflow_operator.builders.common import labels
    from deltaflow_operator.settings import Settings
    from support.manifests import valid_manifest

    docs = render()
    policy = _one(docs, "ValidatingAdmissionPolicy", "deltaflow-operator-driver-pods")
    text = yaml.safe_dump(policy["spec"], width=1000)
    assert f"endsWith('{names.DRIVER_IDENTITY.suffix}')" in text
    assert f"size('{names.DRIVER_IDENTITY.suffix}')" in text
    assert f"variables.stream + '{names.DRIVER_POD.suffix}'" in text
    manifest = valid_manifest()
    manifest["metadata"]["uid"] = "u1"
    account = driver.service_account(DeltaIngestion.model_validate(manifest), Settings())
    for key in account["metadata"]["annotations"]:
        assert f"'{key}'" in text, key
    binding = _one(docs, "ValidatingAdmissionPolicyBinding", "deltaflow-operator-driver-pods")
    selector = binding["spec"]["paramRef"]["selector"]["matchLabels"]
    assert selector.items() <= account["metadata"]["labels"].items()
    assert (
        not selector.items() <= labels(DeltaIngestion.model_validate(manifest), "executor").items()
    )
    # Deny would refuse every pod of a namespace without a stream (no parameter there).
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
    assert "matchResources" not in binding["spec"]  # cluster-wide, like the operator
    scoped = _one(
        render("deltaflow", "--set=watchNamespaces={a,b}"), "ValidatingAdmissionPolicyBinding"
    )
    assert scoped["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
        "values"
    ] == [
        "a",
        "b",
    ]
    off = render("deltaflow", "--set=driverAdmissionPolicy.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_operator_binds_the_driver_and_pool_roles_and_creates_no_roles() -> None:
    rules = _one(render(), "ClusterRole", "deltaflow-operator")["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    rbac = "rbac.authorization.k8s.io"
    assert not {g for g in granted if g[1] in ("roles", "clusterroles") and g[2] != "bind"}
    bind = next(r for r in rules if "bind" in r["verbs"])
    # Those two roles only: the drivers' and the stream pools'.
    assert bind["resourceNames"] == ["deltaflow-operator-driver", "deltaflow-operator-pool"]
    assert (rbac, "rolebindings", "create") in granted
    assert not {g for g in granted if "*" in g}
    # Secrets: create only, its streams' Spark authentication secrets (README: the operator
    # reads no Secret; the kubelet and Spark resolve them by reference).
    assert {g for g in granted if g[1] == "secrets"} == {("", "secrets", "create")}


def test_two_replicas_get_a_disruption_budget_and_spread() -> None:
    docs = render()
    assert _one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    spread = _one(docs, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert not [
        d for d in render("deltaflow", "--set=replicaCount=1") if d["kind"] == "PodDisruptionBudget"
    ]


def test_optional_service_monitor_and_network_policy() -> None:
    assert not [d for d in render() if d["kind"] in ("ServiceMonitor", "NetworkPolicy")]
    docs = render(
        "deltaflow", "--set=metrics.serviceMonitor.enabled=true", "--set=networkPolicy.enabled=true"
    )
    assert _one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    assert _one(docs, "NetworkPolicy")["spec"]["ingress"][0]["ports"][0]["port"] == "metrics"


def test_helm_test_reads_the_lease_with_its_own_minimal_account() -> None:
    docs = render()
    pod = _one(docs, "Pod", "deltaflow-operator-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # Not an operator pod: `helm uninstall` checks find no operator pod left behind it.
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "test"
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert "read_namespaced_lease" in pod["spec"]["containers"][0]["command"][2]
    role = _one(docs, "Role", "deltaflow-operator-test")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["deltaflow-operator"],
            "verbs": ["get"],
        }
    ]
