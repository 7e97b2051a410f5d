"""The stack broker's security listeners, through librdkafka (confluent-kafka), on the session's
broker: each answers a metadata request with good credentials and refuses bad ones, and ACLs
decide what an authenticated principal may see."""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from devstack.kafka import KafkaBroker


def _client(conf: dict[str, Any]) -> tuple[AdminClient, list[KafkaError]]:
    errors: list[KafkaError] = []
    # log_level 0: refused connections are expected here; errors come through error_cb.
    full: dict[str, Any] = {**conf, "error_cb": errors.append, "log_level": 0}
    return AdminClient(full), errors


def _answers(conf: dict[str, Any]) -> AdminClient:
    """The client authenticates and gets the cluster's metadata (the one broker)."""
    admin, errors = _client(conf)
    metadata = admin.list_topics(timeout=15)
    assert len(metadata.brokers) == 1, errors
    return admin


def _refused(conf: dict[str, Any]) -> KafkaError:
    """The first error the client reports: it connects at once, so the refusal comes quickly."""
    admin, errors = _client(conf)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        admin.poll(0.05)
    assert errors, "the broker neither refused nor reported anything in 15s"
    return errors[0]


def _tls(kafka: KafkaBroker) -> dict[str, Any]:
    return {"ssl.ca.location": str(kafka.ca_file)}


def _mtls(kafka: KafkaBroker, cert: str, key: str) -> dict[str, Any]:
    conf = {"bootstrap.servers": kafka.mtls_bootstrap, "security.protocol": "SSL", **_tls(kafka)}
    return {**conf, "ssl.certificate.location": cert, "ssl.key.location": key}


def _sasl(
    bootstrap: str, protocol: str, mechanism: str, user: str, password: str
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_mtls_listener_takes_only_certificates_of_its_ca(kafka: KafkaBroker) -> None:
    pki = kafka.pki
    assert pki.mtls_key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert pki.enc_key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert pki.pkcs1_key.read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")

    _answers(_mtls(kafka, str(pki.mtls_cert), str(pki.mtls_key)))
    encrypted = _mtls(kafka, str(pki.enc_cert), str(pki.enc_key))
    _answers({**encrypted, "ssl.key.password": pki.enc_key_password})

    # A certificate of another CA (same CN), and none at all: the broker's TLS alert ends the
    # handshake. TLS 1.3 sends it after the client's Finished, so librdkafka may report it as a
    # receive failure (_TRANSPORT) rather than _SSL; its text names the alert either way.
    for conf in (
        _mtls(kafka, str(pki.rogue_cert), str(pki.rogue_key)),
        {"bootstrap.servers": kafka.mtls_bootstrap, "security.protocol": "SSL", **_tls(kafka)},
    ):
        err = _refused(conf)
        assert err.code() in (KafkaError._SSL, KafkaError._TRANSPORT), err
        assert "alert bad certificate" in err.str(), err


def test_sasl_listeners_check_scram_and_plain_passwords(kafka: KafkaBroker) -> None:
    user, password = f"scram-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    kafka.add_scram_user(user, "SCRAM-SHA-512", password)
    kafka.add_scram_user(user, "SCRAM-SHA-256", password)
    sasl_ssl, sasl_plain = kafka.sasl_ssl_bootstrap, kafka.sasl_plaintext_bootstrap

    for conf in (
        {**_sasl(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", user, password), **_tls(kafka)},
        {**_sasl(sasl_ssl, "SASL_SSL", "SCRAM-SHA-256", user, password), **_tls(kafka)},
        _sasl(sasl_plain, "SASL_PLAINTEXT", "SCRAM-SHA-512", user, password),
        {
            **_sasl(
                sasl_ssl, "SASL_SSL", "PLAIN", "stream-plain", kafka.plain_users["stream-plain"]
            ),
            **_tls(kafka),
        },
    ):
        _answers(conf)

    for conf, words in (
        (
            {**_sasl(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", user, "wrong"), **_tls(kafka)},
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        (
            _sasl(sasl_plain, "SASL_PLAINTEXT", "SCRAM-SHA-512", user, "wrong"),
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        (
            {**_sasl(sasl_ssl, "SASL_SSL", "PLAIN", "stream-plain", "wrong"), **_tls(kafka)},
            "Invalid username or password",
        ),
    ):
        err = _refused(conf)
        assert err.code() == KafkaError._AUTHENTICATION, err
        assert words in err.str(), err
        assert "wrong" not in err.str()


def _post_token(kafka: KafkaBroker, form: dict[str, str], basic: str | None = None) -> Any:
    headers = {"Authorization": f"Basic {basic}"} if basic else {}
    request = urllib.request.Request(
        kafka.issuer.token_url, data=urllib.parse.urlencode(form).encode(), headers=headers
    )
    context = ssl.create_default_context(cafile=str(kafka.issuer.ca_file))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_token_issuer_speaks_client_credentials(kafka: KafkaBroker) -> None:
    client = f"issuer-{uuid.uuid4().hex[:8]}"
    secret = kafka.issuer.register_client(client)
    grant = {"grant_type": "client_credentials"}

    status, body = _post_token(kafka, {**grant, "client_id": client, "client_secret": secret})
    assert status == 200, body
    claims = json.loads(base64.urlsafe_b64decode(body["access_token"].split(".")[1] + "=="))
    assert claims["iss"] == kafka.issuer.issuer
    assert (claims["sub"], claims["aud"], claims["scope"]) == (client, "kafka", "kafka")
    assert claims["exp"] - claims["iat"] == body["expires_in"]

    basic = base64.b64encode(f"{client}:{secret}".encode()).decode()
    assert _post_token(kafka, {**grant, "scope": "orders"}, basic)[1]["scope"] == "orders"
    wrong = base64.b64encode(f"{client}:not-{secret}".encode()).decode()
    assert _post_token(kafka, grant, wrong) == (401, {"error": "invalid_client"})


def _oauth_cb(
    token: str, principal: str
) -> Callable[[str], tuple[str, float, str, dict[str, str]]]:
    return lambda _config: (token, time.time() + 300, principal, {})


def test_oauthbearer_takes_only_tokens_the_issuer_signed(kafka: KafkaBroker) -> None:
    client = f"stream-oidc-{uuid.uuid4().hex[:8]}"
    secret = kafka.issuer.register_client(client)
    oauth = {
        "bootstrap.servers": kafka.sasl_ssl_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        **_tls(kafka),
    }
    oidc = {
        **oauth,
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": client,
        "sasl.oauthbearer.token.endpoint.url": kafka.issuer.token_url,
        "https.ca.location": str(kafka.issuer.ca_file),
    }
    _answers({**oidc, "sasl.oauthbearer.client.secret": secret})
    err = _refused({**oidc, "sasl.oauthbearer.client.secret": f"not-{secret}"})
    assert err.code() == KafkaError._AUTHENTICATION, err
    assert "invalid_client" in err.str(), err

    # The same claims signed by another key (with the issuer's kid): the broker checks the
    # signature against the issuer's JWKS, so only the issuer's own token passes.
    _answers({**oauth, "oauth_cb": _oauth_cb(kafka.issuer.fetch_token(client, secret), client)})
    forged = kafka.issuer.foreign_token(client)
    err = _refused({**oauth, "oauth_cb": _oauth_cb(forged, client)})
    assert err.code() == KafkaError._AUTHENTICATION, err
    assert "invalid_token" in err.str(), err


def _describe(admin: AdminClient, topic: str) -> KafkaError | None:
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic]
    try:
        future.result()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def test_acls_decide_what_an_authenticated_principal_sees(kafka: KafkaBroker) -> None:
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    kafka.admin().create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
    user, password = f"acl-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    kafka.add_scram_user(user, "SCRAM-SHA-512", password)
    scram = _answers(
        _sasl(kafka.sasl_plaintext_bootstrap, "SASL_PLAINTEXT", "SCRAM-SHA-512", user, password)
    )
    pki = kafka.pki
    mtls = _answers(_mtls(kafka, str(pki.mtls_cert), str(pki.mtls_key)))

    # No ACL: Kafka does not even say whether the topic exists.
    for admin in (scram, mtls):
        denied = _describe(admin, topic)
        assert denied is not None
        assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied

    kafka.grant(user, topic=topic)
    assert _describe(scram, topic) is None
    # The certificate's CN is the principal (ssl.principal.mapping.rules): User:stream-mtls.
    kafka.grant("User:stream-mtls", topic_prefix=topic, operations=("DESCRIBE",))
    try:
        assert _describe(mtls, topic) is None
    finally:
        kafka.revoke("User:stream-mtls", topic_prefix=topic, operations=("DESCRIBE",))
    revoked = _describe(mtls, topic)
    assert revoked is not None
    assert revoked.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, revoked
