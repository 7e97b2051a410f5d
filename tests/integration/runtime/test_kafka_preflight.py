"""The Kafka preflight against the stack's real broker and token issuer: each way a stream's
login or rights can be wrong becomes its reason, names what to fix, quotes the broker, and
repeats no secret. librdkafka only: no Spark."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_logins import Login, mtls, oauth, ref, scram, secret_files
from runtime_kit import create_topic, unique

from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.kafka_auth import KafkaMaterial
from deltaflow_runtime.kafka_preflight import check_kafka
from devstack.kafka import KafkaBroker

pytestmark = [pytest.mark.kafka]

R = FailureReason
GROUP = "deltaflow.preflight.orders"


@dataclass(frozen=True)
class Attempt:
    """A stream's login, checked as its driver would before Spark starts."""

    login: Login
    topic: str | None = None

    def check(self, root: Path, topic: str) -> None:
        source = KafkaSource.model_validate(
            {
                "bootstrapServers": self.login.bootstrap,
                "topic": self.topic or topic,
                "auth": self.login.auth,
            }
        )
        files = secret_files(root, self.login)
        check_kafka(source, KafkaMaterial(files), GROUP, timeout=5.0, topic_wait=0.0)


def _scram(kafka: KafkaBroker, user: str, password: str) -> Attempt:
    return Attempt(scram(kafka, user, password))


def _mtls(kafka: KafkaBroker, cert: Path | None, key: Path | None) -> Attempt:
    return Attempt(mtls(kafka, cert, key))


def _oauth(kafka: KafkaBroker, client_id: str, secret: str) -> Attempt:
    return Attempt(oauth(kafka, client_id, secret))


@dataclass(frozen=True)
class Principals:
    topic: str
    user: str  # SCRAM: Read+Describe on the topic, Read on the group
    password: str
    describe_only: str  # SCRAM: Describe on the topic only
    no_group: str  # SCRAM: the topic, not the group
    client_id: str  # OIDC client with the full grants
    client_secret: str


@pytest.fixture(scope="module")
def principals(kafka: KafkaBroker) -> Principals:
    topic = unique("preflight")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    password = secrets.token_urlsafe(16)
    user, describe_only, no_group = unique("pf"), unique("pf-describe"), unique("pf-nogroup")
    for name in (user, describe_only, no_group):
        kafka.add_scram_user(name, "SCRAM-SHA-512", password)
    client_id = unique("pf-oidc")
    client_secret = kafka.issuer.register_client(client_id)
    for principal in (user, client_id, "stream-mtls"):
        kafka.grant(principal, topic=topic, group=GROUP)
    kafka.grant(describe_only, topic=topic, group=GROUP, operations=("DESCRIBE",))
    kafka.grant(no_group, topic=topic)
    return Principals(topic, user, password, describe_only, no_group, client_id, client_secret)


CASES: dict[str, tuple[Callable[[KafkaBroker, Principals], Attempt], R | None, str, str]] = {
    # name: (attempt, reason, the field named, the broker's or client's words quoted)
    "scram-good": (lambda k, p: _scram(k, p.user, p.password), None, "", ""),
    "mtls-good": (lambda k, p: _mtls(k, k.pki.mtls_cert, k.pki.mtls_key), None, "", ""),
    "oauth-good": (lambda k, p: _oauth(k, p.client_id, p.client_secret), None, "", ""),
    "wrong-password": (
        lambda k, p: _scram(k, p.user, "wrong-" + p.password),
        R.KAFKA_AUTHENTICATION_FAILED,
        # The broker does not say which of the two is wrong.
        "spec.source.auth.username (Secret kafka-creds, key username) or "
        "spec.source.auth.password (Secret kafka-creds, key password)",
        "invalid credentials with SASL mechanism SCRAM-SHA-512",
    ),
    "rogue-client-certificate": (
        lambda k, p: _mtls(k, k.pki.rogue_cert, k.pki.rogue_key),
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.clientCertificate.certificate (Secret kafka-creds, key tls.crt)",
        "bad certificate",
    ),
    "no-client-certificate": (
        lambda k, p: _mtls(k, None, None),
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.clientCertificate",
        "bad certificate",
    ),
    "untrusted-broker": (
        lambda k, p: Attempt(
            scram(k, p.user, p.password).with_contents(
                caCertificate=k.pki.rogue_ca_file.read_text()
            )
        ),
        R.KAFKA_TLS_FAILED,
        "spec.source.auth.caCertificate (Secret kafka-creds, key ca.crt)",
        "certificate verify failed",
    ),
    "wrong-client-secret": (
        lambda k, p: _oauth(k, p.client_id, "not-" + p.client_secret),
        R.KAFKA_AUTHENTICATION_FAILED,
        "spec.source.auth.oauthBearer.clientSecret (Secret kafka-creds, key client-secret)",
        "invalid_client",
    ),
    "pkcs1-key": (
        lambda k, p: _mtls(k, k.pki.pkcs1_cert, k.pki.pkcs1_key),
        R.KAFKA_CREDENTIALS_INVALID,
        "spec.source.auth.clientCertificate.key (Secret kafka-creds, key tls.key)",
        "openssl pkcs8 -topk8",
    ),
    "nothing-listening": (
        lambda k, p: Attempt(Login("-", "127.0.0.1:1", {"securityProtocol": "PLAINTEXT"})),
        R.KAFKA_UNREACHABLE,
        "spec.source.bootstrapServers",
        "Connection refused",
    ),
    "missing-topic": (
        lambda k, p: Attempt(scram(k, p.user, p.password), topic="no-such-topic-anywhere"),
        # The principal may not describe a topic that does not exist either: Kafka hides
        # existence from who lacks rights, and the message says both.
        R.KAFKA_AUTHORIZATION_FAILED,
        "spec.source.topic",
        "or it does not exist",
    ),
    "no-read-on-the-topic": (
        lambda k, p: _scram(k, p.describe_only, p.password),
        R.KAFKA_AUTHORIZATION_FAILED,
        "spec.source.topic",
        "may describe but not read Topic:",
    ),
    # The group's commit serves lag tools, not the stream: a warning, the stream starts.
    "no-read-on-the-group": (lambda k, p: _scram(k, p.no_group, p.password), None, "", ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_mistake_gets_its_reason_the_field_and_the_broker_s_words(
    kafka: KafkaBroker,
    principals: Principals,
    tmp_path: Path,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make, reason, field_named, words = CASES[case]
    attempt = make(kafka, principals)
    if reason is None:
        attempt.check(tmp_path, principals.topic)  # no exception: the stream may start
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        named = [w for w in warned if f"Group:{GROUP}" in w and "grant it Read" in w]
        assert bool(named) == (case == "no-read-on-the-group"), warned
        return
    with pytest.raises(DeltaflowError) as err:
        attempt.check(tmp_path, principals.topic)
    message = str(err.value)
    assert err.value.reason == reason, message
    assert message.startswith(f"{field_named}:"), message
    assert words in message, message
    for value in (principals.password, principals.client_secret):
        assert value not in message


def test_msk_iam_signs_a_token_the_broker_receives_and_names_the_workload_identity(
    kafka: KafkaBroker, principals: Principals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No AWS here: the driver's client signs an MSK token from the pods' keys and sends it
    # over OAUTHBEARER; this broker validates JWTs, not MSK tokens, and refuses it. That the
    # refusal comes from the broker's login proves the token was made and sent.
    msk = {
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "AWS_MSK_IAM",
        "awsMskIam": {},
        "caCertificate": ref("ca.crt"),
    }
    attempt = Attempt(
        Login("-", kafka.sasl_ssl_bootstrap, msk, {"caCertificate": kafka.ca_file.read_text()})
    )
    for name in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    with pytest.raises(DeltaflowError) as err:
        attempt.check(tmp_path, principals.topic)
    assert err.value.reason == R.KAFKA_AUTHENTICATION_FAILED
    assert str(err.value).startswith("the pods' workload identity (spec.serviceAccount):")
    assert "invalid_token" in str(err.value)  # the broker's OAUTHBEARER validator read it
    assert "wJalrXUtnFEMI" not in str(err.value)
    # Without any identity in the pods, it says so before connecting.
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(DeltaflowError) as err:
        attempt.check(tmp_path, principals.topic)
    assert err.value.reason == R.KAFKA_AUTHENTICATION_FAILED
    assert "no workload identity in the pods" in str(err.value)
