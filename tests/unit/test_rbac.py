"""The roles grant exactly what the code calls, no more, no fewer.

What the operator needs is read from the code: every Kubernetes client call in
deltaflow_operator.kube (and the leader-election lock it uses), the children it server-side applies,
and what kopf does for the handlers the operator registers and the settings it starts with. What
the driver needs: the runtime's pod channel calls, and Spark's Kubernetes backend in client mode as
the driver's Spark conf sets it up. Both are compared with the chart's roles and with the e2e
allow-lists (which tests/e2e/test_operator_loop.py compares with the API server's own answer).
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes.leaderelection.resourcelock import leaselock

from deltaflow_api import GROUP, PLURAL, DeltaIngestion
from deltaflow_operator import handlers, kube, reconcile
from deltaflow_operator.builders import driver as builders
from deltaflow_operator.builders import pool as pools
from deltaflow_operator.settings import Settings
from deltaflow_runtime import pod_channel
from devstack.install import installed_path
from support.manifests import valid_manifest

REPO = Path(__file__).resolve().parents[2]
RELEASE_NAMESPACE = "deltaflow-system"
OPERATOR = "deltaflow-operator"  # the chart's names for release "deltaflow"
RBAC = "rbac.authorization.k8s.io"

# API group, resource (with /subresource), verb, resource name (None: any).
Need = tuple[str, str, str, str | None]

# A typed client method is <verb>_namespaced_<kind>[_status]: its kind's group and resource.
KINDS = {
    "pod": ("", "pods"),
    "config_map": ("", "configmaps"),
    "secret": ("", "secrets"),
    "event": ("", "events"),
    "lease": ("coordination.k8s.io", "leases"),
    "role_binding": (RBAC, "rolebindings"),
    "custom_object": (GROUP, PLURAL),  # the operator's calls all name GROUP and PLURAL
}
VERBS = {
    "read": "get",
    "get": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
}
# ``list_cluster_custom_object`` and ``list_<kind>_for_all_namespaces`` list across namespaces
# (the operator's role is cluster-wide then; with watchNamespaces it lists namespace by namespace).
TYPED_CALL = re.compile(
    r"^(read|get|list|create|patch|replace|delete)_(?:namespaced_|cluster_)?([a-z_]+?)"
    r"(?:_for_all_namespaces)?(_status)?$"
)


def _client_handles(tree: ast.AST) -> set[str]:
    """Expressions that hold a typed API client: ``X = client.<Group>Api(...)``."""
    handles = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            made = ast.unparse(node.value.func)
            if re.fullmatch(r"client\.\w+Api", made) and made != "client.ApiClient":
                handles.update(ast.unparse(target) for target in node.targets)
    return handles


def typed_calls(module: object) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every call ``module`` makes on a typed Kubernetes client; a
    method this test cannot map fails it (a new kind of call must be added, not missed)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    handles = _client_handles(tree)
    assert handles, f"no API client in {module}"
    calls = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if ast.unparse(node.func.value) not in handles:
            continue
        match = TYPED_CALL.match(node.func.attr)
        assert match is not None, f"{module}: unmapped {node.func.attr}"
        assert match[2] in KINDS, f"{module}: unmapped {node.func.attr}"
        group, resource = KINDS[match[2]]
        calls.add((group, resource + ("/status" if match[3] else ""), VERBS[match[1]]))
    return calls


def ingestion() -> DeltaIngestion:
    manifest = valid_manifest()
    manifest["metadata"]["uid"] = "u1"
    return DeltaIngestion.model_validate(manifest)


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def _plural(kind: str) -> str:
    """A kind's resource name, as the API server forms it for the built-in kinds."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"  # NetworkPolicy: networkpolicies
    return lower + ("es" if lower.endswith("s") else "s")


def applied_children() -> list[dict[str, Any]]:
    """What the operator server-side applies: the children, from the one place it applies."""
    callers = []
    for path in (REPO / "operator/deltaflow_operator").rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef):
                callers += [
                    (path.name, fn.name)
                    for node in ast.walk(fn)
                    if isinstance(node, ast.Call)
                    and ast.unparse(node.func) in ("self.kube.apply", "kube.apply")
                ]
    assert sorted(callers) == [("pool_keeper.py", "_sync_pool")] * 2 + [
        ("reconcile.py", "_apply_children")
    ], callers
    pool = pools.Pool("data", "deltaflow-pool-1234abcd-0", (ingestion(),), 1)
    return [
        *reconcile.children(ingestion(), Settings()),
        pools.config_map(pool, Settings()),
        *pools.companions(pool, Settings(), "cm-uid"),
    ]


def operator_needs(settings: Settings) -> dict[str, set[Need]]:
    """What the operator's calls need, by where: the watched namespaces, the release namespace
    (the leader Lease) and the cluster (cluster-scoped objects)."""
    # The kube module uses the dynamic client for server-side apply and discovery only.
    tree = ast.parse(inspect.getsource(kube))
    dynamic = {
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "self.dynamic"
    }
    assert dynamic == {"self.dynamic.resources", "self.dynamic.server_side_apply"}, dynamic
    discovered = {
        target.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and ast.unparse(n.value).startswith("self.dynamic.resources")
        for target in n.targets
        if isinstance(target, ast.Name)
    }
    through = {
        ast.unparse(n.func)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and ast.unparse(n.func.value) in discovered
    }
    assert not through, f"calls on a discovered resource, which this test cannot map: {through}"

    calls = typed_calls(kube) | typed_calls(leaselock)  # kube's election runs on LeaseLock
    watched: set[Need] = {(g, r, v, None) for g, r, v in calls if r != "leases"}
    # main.py hands settings.lease_name to every Lease call; a create cannot name its object.
    release: set[Need] = {
        (g, r, v, None if v == "create" else settings.lease_name)
        for g, r, v in calls
        if r == "leases"
    }

    # Server-side apply: patch, and create when the child is new (the API server checks both).
    for child in applied_children():
        resource = (_group(child["apiVersion"]), _plural(child["kind"]))
        watched |= {(*resource, "patch", None), (*resource, "create", None)}
        ref = child.get("roleRef")
        if ref is not None:  # binding a role the operator does not hold takes `bind` on it
            watched.add((RBAC, _plural(ref["kind"]), "bind", ref["name"]))
    owned = [*applied_children(), builders.driver_pod(ingestion(), Settings())]
    if any(o.get("blockOwnerDeletion") for c in owned for o in c["metadata"]["ownerReferences"]):
        # OwnerReferencesPermissionEnforcement: blocking the owner's deletion takes this.
        watched.add((GROUP, f"{PLURAL}/finalizers", "update", None))
    kopf = kopf_needs()
    return {"watched": watched | kopf["watched"], "release": release, "cluster": kopf["cluster"]}


def installed() -> tuple[kopf.OperatorRegistry, kopf.OperatorSettings]:
    """The operator's handlers in a registry of their own, and kopf's settings as its startup
    configures them."""
    registry = kopf.OperatorRegistry()
    default = kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        handlers.install()
    finally:
        kopf.set_default_registry(default)
    settings = kopf.OperatorSettings()
    for activity in registry._activities.get_all_handlers():
        if not inspect.iscoroutinefunction(activity.fn):
            activity.fn(settings=settings)  # the startup configuration (kopf's own settings)
    return registry, settings


def kopf_needs() -> dict[str, set[Need]]:
    """What kopf calls for the handlers the operator registers, with the settings it sets, in the
    watched namespaces and cluster-wide."""
    registry, settings = installed()

    needs: set[Need] = set()
    watched = [*registry._watching.get_all_handlers(), *registry._indexing.get_all_handlers()]
    stateful = [*registry._changing.get_all_handlers(), *registry._spawning.get_all_handlers()]
    for handler in watched + stateful:
        group, resource = _watched(handler)
        needs |= {(group, resource, verb, None) for verb in ("list", "watch")}
    for handler in stateful:  # the finalizer and handler state, merge-patched into the object
        needs.add((*_watched(handler), "patch", None))
    if settings.posting.enabled:  # kopf posts its own warnings as Events
        needs.add(("", "events", "create", None))
    cluster: set[Need] = set()
    if not settings.scanning.disabled:  # kopf watches every CRD for new resources to serve
        crds = ("apiextensions.k8s.io", "customresourcedefinitions")
        cluster |= {(*crds, verb, None) for verb in ("list", "watch")}
    assert settings.peering.standalone  # else: kopf's peering resources too
    return {"watched": needs, "cluster": cluster}


def _watched(handler: Any) -> tuple[str, str]:
    selector = handler.selector
    assert selector is not None
    assert selector.any_name is not None
    return selector.group or "", selector.any_name


# Spark's Kubernetes backend (spark-kubernetes 4.2.0) in client mode, read from its classes:
# ExecutorPodsAllocator creates executor pods, reads the driver pod (the executors' owner) and
# deletes pods by label (a collection delete: fabric8 sends one DELETE with a label selector);
# ExecutorPodsWatchSnapshotSource watches and ExecutorPodsPollingSnapshotSource lists them by
# label; ExecutorPodsLifecycleManager deletes and labels one; KubernetesClusterSchedulerBackend
# lists pods to label or annotate them (decommissioning, deletion cost) and deletes by label.
SPARK_POD_VERBS = {"get", "list", "watch", "create", "patch", "delete", "deletecollection"}


def driver_needs() -> set[Need]:
    """What the driver's calls need in its namespace."""
    conf = builders.spark_conf(ingestion(), Settings())
    needs: set[Need] = {(g, r, v, None) for g, r, v in typed_calls(pod_channel)}
    needs |= {("", "pods", v, None) for v in SPARK_POD_VERBS}
    if conf.get("spark.kubernetes.executor.disableConfigMap") != "true":
        # The executors' ConfigMap, created at start and deleted by label at the end.
        needs |= {("", "configmaps", v, None) for v in ("create", "deletecollection")}
    if conf.get("spark.kubernetes.driver.ownPersistentVolumeClaim") != "false":
        needs |= {("", "persistentvolumeclaims", v, None) for v in ("list", "deletecollection")}
    return needs


def render(*values: str) -> list[dict[str, Any]]:
    helm = str(installed_path("helm") / "helm")
    out = subprocess.run(
        [
            helm,
            "template",
            "deltaflow",
            str(REPO / "charts/deltaflow"),
            "-n",
            RELEASE_NAMESPACE,
            *values,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def expand(rules: list[dict[str, Any]]) -> Iterator[Need]:
    for rule in rules:
        names = rule.get("resourceNames") or [None]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        yield group, resource, verb, name


def granted(docs: list[dict[str, Any]], account: str, namespace: str) -> dict[str, set[Need]]:
    """What the chart grants ``account``, by where: "cluster" (a ClusterRoleBinding), "release"
    (the release namespace) or "watched" (other namespaces, one RoleBinding each)."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    grants: dict[str, set[Need]] = {}
    for binding in (d for d in docs if d["kind"].endswith("RoleBinding")):
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        if subject not in binding["subjects"]:
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        where = binding["metadata"].get("namespace")
        scope = "cluster" if where is None else "release" if where == namespace else "watched"
        grants.setdefault(scope, set()).update(expand(role["rules"]))
    return grants


def chart_settings(docs: list[dict[str, Any]]) -> Settings:
    """The operator's settings as the chart's Deployment sets them."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return Settings.from_env({e["name"]: e["value"] for e in env if "value" in e})


@pytest.mark.parametrize(
    ("mode", "values", "scope"),
    [
        ("cluster-wide", [], "cluster"),
        ("watchNamespaces", ["--set=watchNamespaces={data,payments}"], "watched"),
    ],
)
def test_the_operator_is_granted_exactly_what_its_calls_need(
    mode: str, values: list[str], scope: str
) -> None:
    docs = render(*values)
    needs = operator_needs(chart_settings(docs))
    grants = granted(docs, OPERATOR, RELEASE_NAMESPACE)
    expected = {scope: needs["watched"], "release": needs["release"]}
    if needs["cluster"]:
        expected["cluster"] = expected.get("cluster", set()) | needs["cluster"]
    assert set(grants) == set(expected), mode
    for where, need in expected.items():
        assert grants[where] - need == set(), f"{mode}, {where}: granted, never called"
        assert need - grants[where] == set(), f"{mode}, {where}: called, not granted"


def test_the_driver_is_granted_exactly_what_its_calls_need() -> None:
    docs = render()
    needs = driver_needs()
    chart_role = next(d for d in docs if d["metadata"]["name"] == f"{OPERATOR}-driver")
    assert set(expand(builders.DRIVER_RULES)) == needs
    assert set(expand(chart_role["rules"])) == needs


# Every authenticated identity may review itself (system:basic-user): in every can-i list.
SELF_REVIEWS = {
    "selfsubjectreviews.authentication.k8s.io": {"create"},
    "selfsubjectaccessreviews.authorization.k8s.io": {"create"},
    "selfsubjectrulesreviews.authorization.k8s.io": {"create"},
}


def allow_list(needs: set[Need]) -> dict[str, set[str]]:
    """``needs`` as `kubectl auth can-i --list` names them (the e2e allow-lists' lines)."""
    entries: dict[str, set[str]] = {}
    for group, resource, verb, name in needs:
        base, _, sub = resource.partition("/")
        key = f"{base}.{group}" if group else base
        key += f"/{sub}" if sub else ""
        key += f"[{name}]" if name else ""
        entries.setdefault(key, set()).add(verb)
    return {**entries, **SELF_REVIEWS}


def checked_in(name: str) -> dict[str, set[str]]:
    """An e2e allow-list file: ``resource[resourceNames]: verbs`` lines."""
    entries: dict[str, set[str]] = {}
    for line in (REPO / "tests/e2e/permissions" / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            what, verbs = line.split(":", 1)
            entries[what.strip()] = set(verbs.split())
    return entries


def test_the_e2e_allow_lists_are_what_the_code_needs() -> None:
    # The e2e tests compare these files with what the API server says each account may do in a
    # stream's namespace (the operator's Lease lives in its own namespace, not listed there).
    needs = operator_needs(Settings())
    assert checked_in("operator.txt") == allow_list(needs["watched"] | needs["cluster"])
    assert checked_in("driver.txt") == allow_list(driver_needs())


def test_every_kind_the_operator_applies_is_watched_for_edits_by_its_own_label() -> None:
    """Drift repair is by the children's own events: a kind applied but not watched would be
    put back only at the hours-long resync; every watch asks the API server for the operator's
    objects only (an unfiltered ConfigMap or pod watch carries the whole cluster's)."""
    applied = {(_group(c["apiVersion"]), _plural(c["kind"])) for c in applied_children()}
    watched = {(group, plural) for group, _, plural in handlers.CHILD_RESOURCES}
    assert watched == applied
    _, settings = installed()
    managed = "app.kubernetes.io/managed-by=deltaflow-operator"
    for group, version, plural in (*handlers.CHILD_RESOURCES, ("", "v1", "pods")):
        kind = plural.removesuffix("s").capitalize()
        resource = kopf.Resource(group, version, plural, kind=kind, namespaced=True)
        assert settings.watching.label_selectors.collect(resource) == [managed], plural
    custom = kopf.Resource(GROUP, "v1alpha1", PLURAL, namespaced=True)
    assert settings.watching.label_selectors.collect(custom) == []  # users' objects: all of them
