"""The whole local cluster in one call: control plane, then a node running the project's image."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path
from typing import cast

from devstack.install import REPO_ROOT, installed_path
from devstack.kube import KubeControlPlane, start_control_plane
from devstack.leftovers import NODE_DIR_NAME
from devstack.minio import ObjectStore
from devstack.network import PodNetwork
from devstack.node import record_container_pids, start_node


def image_env() -> dict[str, str]:
    """``image.env`` of the image build (stack/install/image.sh): image names to run."""
    folder = installed_path("image")
    pairs = (line.split("=", 1) for line in (folder / "image.env").read_text().splitlines())
    return {k.strip(): v.strip() for k, v in pairs if k.strip()}


def built_image_id() -> str:
    """``sha256:<config digest>`` of the image image.sh built (from its docker-save archive): the
    imageID the kubelet reports for a container that runs exactly that image."""
    with tarfile.open(installed_path("image") / "deltaflow.tar") as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        config = str(json.load(member)[0]["Config"])  # "<hex>.json" or "blobs/sha256/<hex>"
    return "sha256:" + config.rsplit("/", 1)[-1].removesuffix(".json")


def start_cluster(work_dir: Path, net: PodNetwork, progress: bool = True) -> KubeControlPlane:
    """Start the control plane and the node; the node's containerd holds the project's image."""
    t0 = time.monotonic()

    def say(what: str) -> None:
        if progress:
            print(f"[cluster {time.monotonic() - t0:5.0f}s] {what}", flush=True)

    images = installed_path("image")
    names = image_env()
    say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
    plane = start_control_plane(work_dir, net)
    try:
        say(
            "starting the node (containerd, kubelet, kube-proxy); importing "
            + names["DELTAFLOW_IMAGE"]
        )
        plane.node = start_node(
            plane,
            net,
            work_dir / NODE_DIR_NAME,
            images=[images / "pause.tar", images / "deltaflow.tar"],
            pause_image=names["PAUSE_IMAGE"],
        )
        plane.image = names["DELTAFLOW_IMAGE"]
    except BaseException:
        plane.stop()
        raise
    say("cluster ready: node Ready, Service rules programmed")
    return plane


def stop_cluster(plane: KubeControlPlane) -> None:
    """Record the pods' processes for the leftover check, then stop node and control plane."""
    if plane.node is not None:
        record_container_pids(plane.node)
    plane.stop()


def lake_volume(
    plane: KubeControlPlane, namespace: str, host_dir: Path, claim: str = "lake"
) -> None:
    """A PersistentVolume on ``host_dir`` bound to the claim ``claim`` in ``namespace``.

    The node is this machine, so a hostPath volume is shared storage: driver, executors and
    maintenance jobs see one table, and the tests read it back from ``host_dir``. Pods run as UID
    185 (the image's user), which owns the folder. The pods mount the claim, which the restricted
    Pod Security Standard allows (a hostPath in the pod spec it would not).
    """
    host_dir.mkdir(parents=True, exist_ok=True)
    os.chown(host_dir, 185, 185)
    host_dir.chmod(0o775)
    pv_name = f"{namespace}-{claim}"
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",  # never delete the tables
                "storageClassName": "",
                "hostPath": {"path": str(host_dir), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    ]
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}),
    )


def lake_credentials(plane: KubeControlPlane, namespace: str, store: ObjectStore) -> str:
    """The Secret ``store.storage_spec()`` references (``lake-creds``: AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY) in ``namespace``, holding the store's keys; returns its name.

    The keys reach kubectl on stdin, so they are on no command line and in no file, and ``create``
    (not ``apply``) leaves no last-applied copy of them in an annotation.
    """
    spec = store.storage_spec()
    key_id = cast(dict[str, str], spec["accessKeyId"])
    secret_key = cast(dict[str, str], spec["secretAccessKey"])
    if key_id["name"] != secret_key["name"]:
        raise ValueError("storage_spec() names two Secrets; lake_credentials makes one")
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": key_id["name"], "namespace": namespace},
        "type": "Opaque",
        "stringData": {key_id["key"]: store.access_key, secret_key["key"]: store.secret_key},
    }
    plane.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    return key_id["name"]


def install_operator(
    plane: KubeControlPlane,
    namespace: str = "deltaflow-system",
    values: dict[str, str] | None = None,
    timeout: str = "5m",
) -> None:
    """``helm install --wait`` of charts/deltaflow with the image the node holds."""
    repository, tag = plane.image.rsplit(":", 1)
    settings = {
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "IfNotPresent",
    }
    settings.update(values or {})
    args = [f"--set={k}={v}" for k, v in settings.items()]
    plane.helm(
        "install", "deltaflow", str(REPO_ROOT / "charts" / "deltaflow"),
        "--namespace", namespace, "--create-namespace", "--wait", f"--timeout={timeout}", *args,
    )  # fmt: skip
