"""The Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The API server listens on the pod network's gateway (see devstack.network), so pods reach it
through the `kubernetes` Service and the host's clients through the same address. RBAC and the
PodSecurity admission plugin stay on. The node that runs the pods is devstack.node.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devstack.install import installed_path
from devstack.network import GATEWAY, KUBERNETES_SERVICE_IP, SERVICE_CIDR, PodNetwork
from devstack.pki import make_ca, openssl, signed_cert
from devstack.process import Service, free_port

if TYPE_CHECKING:
    from devstack.node import Node

ADMIN_TOKEN_FILE = "admin.token"


def make_certs(pki: Path) -> None:
    """A throwaway CA, serving certificates (API server, kubelet), the API server's client
    certificate towards the kubelet, and a service-account signing key."""
    make_ca(pki, "ca", "deltaflow-test-ca")
    signed_cert(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        f"IP:127.0.0.1,IP:{GATEWAY},IP:{KUBERNETES_SERVICE_IP},DNS:localhost,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc",
    )
    # `kubectl logs/exec` go API server -> kubelet: the kubelet trusts this client certificate.
    signed_cert(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet")
    signed_cert(pki, "kubelet", "/CN=deltaflow-node", f"IP:{GATEWAY},DNS:deltaflow-node")
    openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str = "admin") -> None:
    """A kubeconfig with one cluster, one token user and a current context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


class CommandError(subprocess.CalledProcessError):
    """A kubectl/helm call failed; unlike CalledProcessError, its message carries stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}\nstdout: {self.stdout}"


@dataclass
class KubeControlPlane:
    """A running control plane and what a client needs to talk to it."""

    server: str
    ca_file: Path
    admin_token: str
    kubeconfig: Path
    bin_dir: Path
    helm_bin: Path
    work_dir: Path
    services: list[Service] = field(default_factory=list)
    # Set once the node runs (devstack.node): the image its pods run, and the node itself.
    image: str = ""
    node: Node | None = None

    @property
    def kubectl_bin(self) -> Path:
        """The kubectl built at the same version as the API server."""
        return self.bin_dir / "kubectl"

    def env(self) -> dict[str, str]:
        """Environment for kubectl/helm subprocesses: KUBECONFIG and a private helm home."""
        helm_home = self.work_dir / "helm"
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (as admin unless another kubeconfig is given)."""
        env = self.env()
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        proc = subprocess.run(
            [str(self.kubectl_bin), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise CommandError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def kubectl_json(self, *args: str) -> Any:
        """Run ``kubectl ... -o json`` and parse the answer."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run helm against this control plane."""
        proc = subprocess.run(
            [str(self.helm_bin), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise CommandError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def stop(self) -> None:
        """Stop the node (if any), then the scheduler, controller manager, API server, etcd."""
        if self.node is not None:
            self.node.stop()
            self.node = None
        for service in reversed(self.services):
            service.stop()


def _https_ok(url: str, ca: Path | None, token: str | None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, context=ctx, timeout=2) as resp:
        return bool(resp.status == 200)


def start_control_plane(
    work_dir: Path, net: PodNetwork, timeout: float = 120.0
) -> KubeControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

    etcd and the controllers listen on loopback; the API server on the pod network's gateway
    (``net`` must exist), where pods and the host's clients both reach it.
    """
    bin_dir = installed_path("kube")
    etcd_bin = installed_path("etcd") / "etcd"
    helm_bin = installed_path("helm") / "helm"
    work_dir.mkdir(parents=True, exist_ok=True)
    pki = work_dir / "pki"
    make_certs(pki)
    token = os.urandom(16).hex()
    (pki / "tokens.csv").write_text(f'{token},deltaflow-admin,deltaflow-admin,"system:masters"\n')
    (work_dir / ADMIN_TOKEN_FILE).write_text(token)
    plane = KubeControlPlane(
        server="",
        ca_file=pki / "ca.crt",
        admin_token=token,
        kubeconfig=work_dir / "kubeconfig",
        bin_dir=bin_dir,
        helm_bin=helm_bin,
        work_dir=work_dir,
    )
    try:
        _start_etcd_and_apiserver(plane, etcd_bin, net, timeout)
        _start_controller_manager(plane, timeout)
        _start_scheduler(plane, timeout)
    except BaseException:
        plane.stop()
        raise
    return plane


def _start_etcd_and_apiserver(
    plane: KubeControlPlane, etcd_bin: Path, net: PodNetwork, timeout: float
) -> None:
    work, pki = plane.work_dir, plane.work_dir / "pki"
    client_port, peer_port = free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client_port}"
    etcd = Service(
        "etcd",
        [
            str(etcd_bin),
            "--name=test",
            f"--data-dir={work / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=test=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        work / "etcd.log",
    )
    plane.services.append(etcd)
    etcd.start()
    etcd.wait_ready(lambda: _https_ok(f"{etcd_url}/health", None, None), timeout, "healthy")

    port = free_port()
    plane.server = f"https://{net.gateway}:{port}"
    apiserver = Service(
        "kube-apiserver",
        [
            str(plane.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={net.gateway}",
            # Published as the endpoint of the `kubernetes` Service (lease reconciler): the
            # address in-cluster clients reach through the Service's ClusterIP.
            f"--advertise-address={net.gateway}",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",  # kept on: the RBAC tests depend on it
            f"--service-cluster-ip-range={net.service_cidr}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=false",
            f"--cert-dir={work / 'apiserver-certs'}",
        ],
        work / "kube-apiserver.log",
    )
    plane.services.append(apiserver)
    apiserver.start()
    apiserver.wait_ready(
        lambda: _https_ok(f"{plane.server}/readyz", plane.ca_file, plane.admin_token),
        timeout,
        "ready (/readyz)",
    )
    write_kubeconfig(plane.kubeconfig, plane.server, plane.ca_file, plane.admin_token)


def _start_controller(
    plane: KubeControlPlane, name: str, extra_args: list[str], timeout: float
) -> None:
    """Start kube-controller-manager or kube-scheduler on loopback, as admin, one instance (no
    leader election), and wait until its /healthz answers."""
    work = plane.work_dir
    port = free_port()
    service = Service(
        name,
        [
            str(plane.bin_dir / name),
            f"--kubeconfig={plane.kubeconfig}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            "--authentication-skip-lookup=true",  # no front-proxy CA in this control plane
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={work / (name + '-certs')}",
            *extra_args,
        ],
        work / f"{name}.log",
    )
    plane.services.append(service)
    service.start()
    service.wait_ready(
        lambda: _https_ok(f"https://127.0.0.1:{port}/healthz", None, None),
        timeout,
        "healthy (/healthz)",
    )


def _start_controller_manager(plane: KubeControlPlane, timeout: float) -> None:
    pki = plane.work_dir / "pki"
    args = [
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]
    _start_controller(plane, "kube-controller-manager", args, timeout)


def _start_scheduler(plane: KubeControlPlane, timeout: float) -> None:
    _start_controller(plane, "kube-scheduler", [], timeout)
