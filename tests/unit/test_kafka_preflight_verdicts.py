"""The Kafka preflight's verdicts as a table: librdkafka's errors (the texts seen against the
stack's broker) and the Secrets' contents, each to a reason and the field to fix."""

from __future__ import annotations

from typing import Any

import pytest

from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.kafka_preflight import (
    connection_problem,
    construction_problem,
    group_commit_problem,
    group_problem,
    material_problem,
    topic_problem,
)
from support.manifests import MTLS_AUTH, OAUTH_AUTH, SCRAM_AUTH

R = FailureReason


def _source(auth: dict[str, Any] | None) -> KafkaSource:
    body: dict[str, Any] = {"bootstrapServers": "k:9093", "topic": "orders"}
    if auth is not None:
        body["auth"] = auth
    return KafkaSource.model_validate(body)


AUTH_FAIL = "sasl_ssl://k:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 320ms in state AUTH_REQ)"  # noqa: E501
CONNECTION_CASES: list[tuple[str, dict[str, Any] | None, list[tuple[str, str]], R, str]] = [
    (
        "wrong password",
        SCRAM_AUTH,
        [("_AUTHENTICATION", AUTH_FAIL), ("_ALL_BROKERS_DOWN", "1/1 brokers are down")],
        R.KAFKA_AUTHENTICATION_FAILED,
        "spec.source.auth.username (Secret kafka-creds, key username) or "
        "spec.source.auth.password (Secret kafka-creds, key password)",
    ),
    (
        "mechanism the listener lacks",
        SCRAM_AUTH,
        [
            (
                "_AUTHENTICATION",
                "sasl_plaintext://k:1/bootstrap: SASL SCRAM-SHA-512 mechanism "
                "handshake failed: Broker: Unsupported SASL mechanism: broker's supported "
                "mechanisms: "
                "PLAIN",
            )
        ],
        R.KAFKA_AUTHENTICATION_FAILED,
        "spec.source.auth.saslMechanism",
    ),
    (
        "untrusted broker certificate",
        SCRAM_AUTH,
        [
            (
                "_SSL",
                "sasl_ssl://k:9093/bootstrap: SSL handshake failed: error:0A000086:SSL "
                "routines::certificate verify failed: broker certificate could not be verified",
            )
        ],
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.caCertificate (Secret kafka-ca, key ca.crt)",
    ),
    (
        "client certificate refused",
        MTLS_AUTH,
        [
            (
                "_TRANSPORT",
                "ssl://k:9093/bootstrap: Receive failed: error:0A000412:SSL routines::"
                "ssl/tls alert bad certificate: SSL alert number 42",
            )
        ],
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.clientCertificate.certificate (Secret stream-tls, key tls.crt)",
    ),
    (
        "no client certificate where the listener wants one",
        {"securityProtocol": "SSL"},
        [("_TRANSPORT", "ssl://k:9093/bootstrap: Receive failed: ssl/tls alert bad certificate")],
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.clientCertificate",
    ),
    (
        "wrong OIDC client secret",
        OAUTH_AUTH,
        [
            (
                "_AUTHENTICATION",
                'Failed to acquire SASL OAUTHBEARER token: {"error": "invalid_client"}',
            )
        ],
        R.KAFKA_AUTHENTICATION_FAILED,
        "spec.source.auth.oauthBearer.clientSecret (Secret kafka-oauth, key client-secret)",
    ),
    (
        "token endpoint unreachable",
        OAUTH_AUTH,
        [
            (
                "_AUTHENTICATION",
                "Failed to acquire SASL OAUTHBEARER token: Failed to connect to "
                "idp:443 after 0 ms: Could not connect to server",
            )
        ],
        R.KAFKA_AUTHENTICATION_FAILED,
        "spec.source.auth.oauthBearer.tokenEndpointUrl",
    ),
    (
        "connection refused",
        None,
        [
            (
                "_TRANSPORT",
                "k:9093/bootstrap: Connect to ipv4#10.0.0.1:9093 failed: Connection "
                "refused (after 0ms in state CONNECT)",
            )
        ],
        R.KAFKA_UNREACHABLE,
        "spec.source.bootstrapServers",
    ),
    (
        "unknown host",
        None,
        [("_RESOLVE", "k:9093/bootstrap: Failed to resolve 'k:9093': Name or service not known")],
        R.KAFKA_UNREACHABLE,
        "spec.source.bootstrapServers",
    ),
    (
        "plaintext to a TLS listener: no answer at all",
        None,
        [("_ALL_BROKERS_DOWN", "1/1 brokers are down")],
        R.KAFKA_UNREACHABLE,
        "spec.source.bootstrapServers",
    ),
]


@pytest.mark.parametrize(
    ("auth", "errors", "reason", "field"),
    [case[1:] for case in CONNECTION_CASES],
    ids=[case[0] for case in CONNECTION_CASES],
)
def test_a_failed_connection_names_the_reason_and_the_field(
    auth: dict[str, Any] | None, errors: list[tuple[str, str]], reason: R, field: str
) -> None:
    problem = connection_problem(_source(auth), errors)
    assert problem.reason == reason
    assert problem.field == field
    words = next(text for code, text in errors if code != "_ALL_BROKERS_DOWN" or len(errors) == 1)
    assert words in problem.message  # the Kafka client's own words, quoted


def test_no_answer_asks_about_the_security_protocol() -> None:
    problem = connection_problem(_source(None), [("_ALL_BROKERS_DOWN", "1/1 brokers are down")])
    assert "securityProtocol" in problem.message


@pytest.mark.parametrize(
    ("code", "operations", "reason"),
    [
        (None, ["READ", "DESCRIBE"], None),
        (None, None, None),  # the broker's authorizer does not say: nothing to judge
        ("UNKNOWN_TOPIC_OR_PART", None, R.KAFKA_TOPIC_NOT_FOUND),
        ("TOPIC_AUTHORIZATION_FAILED", None, R.KAFKA_AUTHORIZATION_FAILED),
        (None, ["DESCRIBE"], R.KAFKA_AUTHORIZATION_FAILED),
    ],
)
def test_the_topic_as_the_stream_s_principal_sees_it(
    code: str | None, operations: list[str] | None, reason: R | None
) -> None:
    problem = topic_problem("orders", code, operations)
    assert (problem.reason if problem else None) == reason
    if problem is not None:
        assert problem.field == "spec.source.topic"
        assert "orders" in problem.message
    if reason == R.KAFKA_AUTHORIZATION_FAILED:
        assert problem is not None
        assert "Topic:orders" in problem.message
        assert "Read" in problem.message


@pytest.mark.parametrize(
    ("code", "operations", "refused"),
    [
        (None, ["READ", "DESCRIBE"], False),
        (None, None, False),
        ("GROUP_AUTHORIZATION_FAILED", None, True),
        (None, ["DESCRIBE"], True),
    ],
)
def test_the_commit_group_needs_read(
    code: str | None, operations: list[str] | None, refused: bool
) -> None:
    problem = group_problem("deltaflow.data.orders", code, operations)
    assert (problem is not None) == refused
    if problem is not None:
        assert problem.reason == R.KAFKA_AUTHORIZATION_FAILED
        assert "Group:deltaflow.data.orders" in problem.message


def _kafka_exception(code: int) -> Exception:
    from confluent_kafka import KafkaError, KafkaException

    return KafkaException(KafkaError(code))


def test_a_group_commit_refused_for_want_of_read_names_the_group_and_the_grant() -> None:
    from confluent_kafka import KafkaError

    refused = group_commit_problem(
        "deltaflow.data.orders", _kafka_exception(KafkaError.GROUP_AUTHORIZATION_FAILED)
    )
    assert refused is not None
    assert refused.startswith("spec.source.auth: the stream's principal may not use ")
    assert "Group:deltaflow.data.orders" in refused
    assert "grant it Read on the group" in refused
    assert "(Kafka client: " in refused  # the client's own words
    # The same refusal reads the same each time (a batch's, the next one's): said once.
    again = group_commit_problem(
        "deltaflow.data.orders", _kafka_exception(KafkaError.GROUP_AUTHORIZATION_FAILED)
    )
    assert again == refused
    # Anything else is a hiccup the next commit retries, not the principal's rights.
    for other in (
        _kafka_exception(KafkaError._TIMED_OUT),
        _kafka_exception(KafkaError.COORDINATOR_LOAD_IN_PROGRESS),
        _kafka_exception(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        RuntimeError("GROUP_AUTHORIZATION_FAILED"),  # only the client's own error is read
        ValueError(),
    ):
        assert group_commit_problem("g", other) is None, other


CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
MATERIAL_CASES: list[tuple[str, dict[str, Any], dict[str, str], str | None]] = [
    ("good scram", SCRAM_AUTH, {"username": "orders", "password": "p4ss-w0rd"}, None),
    (
        "password with a newline",
        SCRAM_AUTH,
        {"username": "orders", "password": "p4ssw0rd\n"},
        "password",
    ),
    (
        "password with a quote",
        SCRAM_AUTH,
        {"username": "orders", "password": 'p4"ssw0rd'},
        "password",
    ),
    (
        "user with a backslash",
        SCRAM_AUTH,
        {"username": "ord\\ers", "password": "p4ssw0rd"},
        "username",
    ),
    (
        "client secret with a newline",
        OAUTH_AUTH,
        {"oauthBearer.clientSecret": "s3cret-value\n"},
        "oauthBearer.clientSecret",
    ),
    (
        "good mtls",
        MTLS_AUTH,
        {"clientCertificate.certificate": CERT, "clientCertificate.key": KEY},
        None,
    ),
    (
        "pkcs1 key",
        MTLS_AUTH,
        {
            "clientCertificate.certificate": CERT,
            "clientCertificate.key": KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY"),
        },
        "clientCertificate.key",
    ),
    (
        "encrypted key without its password",
        MTLS_AUTH,
        {
            "clientCertificate.certificate": CERT,
            "clientCertificate.key": KEY.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"),
        },
        "clientCertificate.key",
    ),
    (
        "not a certificate",
        MTLS_AUTH,
        {"clientCertificate.certificate": "hello", "clientCertificate.key": KEY},
        "clientCertificate.certificate",
    ),
]


@pytest.mark.parametrize(
    ("auth", "contents", "field"),
    [case[1:] for case in MATERIAL_CASES],
    ids=[case[0] for case in MATERIAL_CASES],
)
def test_secret_contents_that_cannot_work_are_named_before_connecting(
    auth: dict[str, Any], contents: dict[str, str], field: str | None
) -> None:
    problem = material_problem(_source(auth), contents)
    assert (problem.field.split(" ")[0] if problem else None) == (
        f"spec.source.auth.{field}" if field else None
    )
    if problem is not None:
        assert problem.reason == R.KAFKA_CREDENTIALS_INVALID
        assert "(Secret " in problem.field
        for value in contents.values():  # the value itself is never repeated
            if len(value.strip()) > 3:
                assert value.strip() not in problem.message


# What librdkafka says when it cannot make a client from the material (seen locally).
CONSTRUCTION_CASES = [
    ("ssl.ca.location failed: x509 certificate routines::no certificate or crl found",
     "spec.source.auth.caCertificate (Secret kafka-ca, key ca.crt)"),
    ("ssl.key.location failed: x509 certificate routines::key values mismatch",
     "spec.source.auth.clientCertificate.key (Secret stream-tls, key tls.key)"),
    ("ssl.certificate.location failed: SSL routines::PEM lib",
     "spec.source.auth.clientCertificate.certificate (Secret stream-tls, key tls.crt)"),
    ("some setting it does not take", "spec.source"),
]  # fmt: skip


@pytest.mark.parametrize(("words", "field"), CONSTRUCTION_CASES)
def test_material_the_client_cannot_load_names_its_secret_key(words: str, field: str) -> None:
    problem = construction_problem(_source(MTLS_AUTH), f"Failed to create admin client: {words}")
    assert problem.reason == R.KAFKA_CREDENTIALS_INVALID
    assert problem.field == field
    assert words in problem.message
