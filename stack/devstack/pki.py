"""Throwaway certificates for the stack, made with the openssl CLI (no Python crypto library in
the certificate path): the control plane's (devstack.kube) and the Kafka broker's security
listeners' (devstack.kafka)."""

from __future__ import annotations

import secrets
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from devstack.process import ServiceError


def openssl(*args: str, cwd: Path) -> None:
    """Run ``openssl ARGS`` in ``cwd``; raise with its stderr when it fails."""
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ServiceError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def make_ca(pki: Path, name: str, cn: str) -> None:
    """A self-signed CA: ``<name>.crt`` and ``<name>.key`` in ``pki``."""
    pki.mkdir(parents=True, exist_ok=True)
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3", "-subj", f"/CN={cn}",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=pki,
    )  # fmt: skip


def signed_cert(pki: Path, name: str, subject: str, san: str | None = None, ca: str = "ca") -> None:
    """A key (unencrypted PKCS#8, as OpenSSL 3 writes it) and a certificate signed by the CA
    ``<ca>.crt``/``<ca>.key`` in ``pki`` (``san``: subjectAltName, for servers). Calls may run
    in parallel: each certificate gets a random serial (no shared serial file)."""
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=pki,
    )  # fmt: skip
    extra: list[str] = []
    if san is not None:
        (pki / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-set_serial", f"0x{secrets.token_hex(16)}", "-days", "3", *extra, "-out", f"{name}.crt",
        cwd=pki,
    )  # fmt: skip


def _secret_file(path: Path, value: str) -> None:
    """Write ``value`` to a file only its owner reads (created so, never world-readable)."""
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(value)


def _encrypt_key(pki: Path, plain: str, encrypted: str, password_file: str) -> None:
    """An encrypted PKCS#8 copy ("BEGIN ENCRYPTED PRIVATE KEY", PBES2 with AES-256-CBC)."""
    openssl(
        "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", plain, "-out", encrypted,
        "-passout", f"file:{password_file}", cwd=pki,
    )  # fmt: skip


@dataclass(frozen=True)
class KafkaPki:
    """Paths of the Kafka stack's certificates and keys (PEM), and the passwords of its
    encrypted keys. Every certificate but ``rogue_*`` is signed by ``ca_file``."""

    dir: Path
    ca_file: Path
    # The broker's keystore: its PKCS#8 key then its certificate, in one PEM file.
    broker_keystore: Path
    # Client certificates (CN becomes the principal: User:stream-mtls, User:stream-enc).
    mtls_cert: Path
    mtls_key: Path  # unencrypted PKCS#8 ("BEGIN PRIVATE KEY")
    enc_cert: Path
    enc_key: Path  # encrypted PKCS#8 ("BEGIN ENCRYPTED PRIVATE KEY")
    enc_key_password_file: Path
    # Signed by another CA the broker does not trust.
    rogue_ca_file: Path
    rogue_cert: Path
    rogue_key: Path
    # A traditional PKCS#1 key ("BEGIN RSA PRIVATE KEY"), which Java's PEM stores refuse.
    pkcs1_cert: Path
    pkcs1_key: Path
    # The token issuer's HTTPS certificate and key.
    issuer_cert: Path
    issuer_key: Path

    @property
    def enc_key_password(self) -> str:
        """The password of ``enc_key``."""
        return self.enc_key_password_file.read_text()


def kafka_pki_paths(pki: Path) -> KafkaPki:
    """Where :func:`make_kafka_pki` puts each file (nothing is read or written)."""
    return KafkaPki(
        dir=pki,
        ca_file=pki / "ca.crt",
        broker_keystore=pki / "broker.pem",
        mtls_cert=pki / "stream-mtls.crt",
        mtls_key=pki / "stream-mtls.key",
        enc_cert=pki / "stream-enc.crt",
        enc_key=pki / "stream-enc.enc.key",
        enc_key_password_file=pki / "stream-enc.password",
        rogue_ca_file=pki / "rogue-ca.crt",
        rogue_cert=pki / "rogue.crt",
        rogue_key=pki / "rogue.key",
        pkcs1_cert=pki / "pkcs1.crt",
        pkcs1_key=pki / "pkcs1.rsa.key",
        issuer_cert=pki / "issuer.crt",
        issuer_key=pki / "issuer.key",
    )


def make_kafka_pki(pki: Path, host: str) -> KafkaPki:
    """Make the Kafka stack's CAs, broker, client and issuer certificates in ``pki`` (fresh each
    call). ``host`` (the pod network's gateway, or 127.0.0.1) goes into the servers' SANs.
    Nine RSA-2048 keys: made in parallel, as the broker's storage is formatted meanwhile."""
    paths = kafka_pki_paths(pki)
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    san = "IP:127.0.0.1,DNS:localhost" + (f",IP:{host}" if host != "127.0.0.1" else "")
    with ThreadPoolExecutor(max_workers=4) as pool:
        cas = [("ca", "deltaflow-kafka-ca"), ("rogue-ca", "deltaflow-rogue-ca")]
        for done in [pool.submit(make_ca, pki, name, cn) for name, cn in cas]:
            done.result()
        leaves = [
            ("broker", "/CN=deltaflow-kafka", san, "ca"),
            ("issuer", "/CN=deltaflow-token-issuer", san, "ca"),
            ("stream-mtls", "/CN=stream-mtls", None, "ca"),
            ("stream-enc", "/CN=stream-enc", None, "ca"),
            ("pkcs1", "/CN=stream-pkcs1", None, "ca"),
            # The same subject as stream-mtls: only the signer differs.
            ("rogue", "/CN=stream-mtls", None, "rogue-ca"),
        ]
        jobs = [pool.submit(signed_cert, pki, *leaf) for leaf in leaves]
        for done in jobs:
            done.result()
    # Kafka's PEM keystore file: the key (unencrypted PKCS#8), then the certificate.
    _secret_file(
        paths.broker_keystore, (pki / "broker.key").read_text() + (pki / "broker.crt").read_text()
    )
    _secret_file(paths.enc_key_password_file, secrets.token_urlsafe(18))
    _encrypt_key(pki, "stream-enc.key", paths.enc_key.name, paths.enc_key_password_file.name)
    openssl("rsa", "-in", "pkcs1.key", "-traditional", "-out", paths.pkcs1_key.name, cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)
    return paths
