"""How a test stream logs in to the stack's broker per mechanism: its spec.source.auth, the
values its Secrets would hold, and the files a pod would have them in."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime_kit import unique

from deltaflow_api.driver_pod import KAFKA_SECRET_FILES
from devstack.kafka import KafkaBroker


@dataclass(frozen=True)
class Login:
    """A stream's principal, listener, spec.source.auth and its Secrets' values by field
    (under spec.source.auth)."""

    principal: str
    bootstrap: str
    auth: dict[str, Any]
    contents: dict[str, str] = field(default_factory=dict)

    def with_contents(self, **changes: str) -> Login:
        """The same login with some Secret values changed (field names with '.' as '__')."""
        updated = {k.replace("__", "."): v for k, v in changes.items()}
        return replace(self, contents={**self.contents, **updated})


def ref(key: str) -> dict[str, str]:
    """A key of the Secret ``kafka-creds`` (only named: files stand for the Secret here)."""
    return {"name": "kafka-creds", "key": key}


def scram(
    kafka: KafkaBroker,
    user: str,
    password: str,
    mechanism: str = "SCRAM-SHA-512",
    protocol: str = "SASL_SSL",
) -> Login:
    """A user name and password login (SCRAM-SHA-512, -256 or PLAIN), by default over the
    SASL_SSL listener; SASL_PLAINTEXT uses the listener without TLS (SCRAM-SHA-512 only)."""
    tls = protocol == "SASL_SSL"
    auth = {
        "securityProtocol": protocol,
        "saslMechanism": mechanism,
        "username": ref("username"),
        "password": ref("password"),
    }
    contents = {"username": user, "password": password}
    if tls:
        auth["caCertificate"] = ref("ca.crt")
        contents["caCertificate"] = kafka.ca_file.read_text()
    bootstrap = kafka.sasl_ssl_bootstrap if tls else kafka.sasl_plaintext_bootstrap
    return Login(user, bootstrap, auth, contents)


def mtls(kafka: KafkaBroker, cert: Path | None, key: Path | None) -> Login:
    """Mutual TLS (no client certificate when ``cert`` is None); the principal is the
    certificate's CN by the broker's mapping rule."""
    auth: dict[str, Any] = {"securityProtocol": "SSL", "caCertificate": ref("ca.crt")}
    contents = {"caCertificate": kafka.ca_file.read_text()}
    if cert is not None and key is not None:
        auth["clientCertificate"] = {"certificate": ref("tls.crt"), "key": ref("tls.key")}
        contents["clientCertificate.certificate"] = cert.read_text()
        contents["clientCertificate.key"] = key.read_text()
    return Login("stream-mtls", kafka.mtls_bootstrap, auth, contents)


def oauth(kafka: KafkaBroker, client_id: str, secret: str) -> Login:
    """OIDC client credentials against the stack's token issuer; the principal is the token's
    sub (the client id)."""
    return Login(
        client_id,
        kafka.sasl_ssl_bootstrap,
        {
            "securityProtocol": "SASL_SSL",
            "saslMechanism": "OAUTHBEARER",
            "caCertificate": ref("ca.crt"),
            "oauthBearer": {
                "tokenEndpointUrl": kafka.issuer.token_url,
                "clientId": client_id,
                "clientSecret": ref("client-secret"),
                "scope": "kafka",
                "tokenEndpointCaCertificate": ref("issuer-ca.crt"),
            },
        },
        {
            "caCertificate": kafka.ca_file.read_text(),
            "oauthBearer.clientSecret": secret,
            "oauthBearer.tokenEndpointCaCertificate": kafka.issuer.ca_file.read_text(),
        },
    )


def secret_files(root: Path, login: Login, *, like_kubelet: bool = False) -> dict[str, str]:
    """Write each Secret value where a pod has it, under ``root``; the path of each by field.
    ``like_kubelet``: as the kubelet mounts a Secret (``<dir>/<file> -> ..data/<file>``,
    ``..data -> ..<timestamp>``), which Kafka's DirectoryConfigProvider must follow."""
    paths = {}
    for secret_file in KAFKA_SECRET_FILES:
        if secret_file.field not in login.contents:
            continue
        folder = root / secret_file.volume
        content = login.contents[secret_file.field]
        if like_kubelet:
            version = folder / "..2026_12_05_12_00_00.000000001"
            version.mkdir(parents=True)
            (version / secret_file.file).write_text(content)
            (folder / "..data").symlink_to(version.name)
            (folder / secret_file.file).symlink_to(f"..data/{secret_file.file}")
        else:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / secret_file.file).write_text(content)
        paths[secret_file.field] = str(folder / secret_file.file)
    return paths


def login_mtls(kafka: KafkaBroker) -> Login:
    """The stack's client certificate (principal stream-mtls)."""
    return mtls(kafka, kafka.pki.mtls_cert, kafka.pki.mtls_key)


def login_scram(kafka: KafkaBroker) -> Login:
    """A new SCRAM-SHA-512 user over TLS."""
    user, password = unique("scram"), secrets.token_urlsafe(18)
    kafka.add_scram_user(user, "SCRAM-SHA-512", password)
    return scram(kafka, user, password)


def login_oauth(kafka: KafkaBroker, token_lifetime: int | None = None) -> Login:
    """A new OIDC client of the stack's issuer."""
    client_id = unique("oidc")
    return oauth(
        kafka, client_id, kafka.issuer.register_client(client_id, token_lifetime=token_lifetime)
    )


LOGINS: dict[str, Callable[[KafkaBroker], Login]] = {
    "mtls": login_mtls,
    "scram-sha-512-over-tls": login_scram,
    "oauthbearer": login_oauth,
}
