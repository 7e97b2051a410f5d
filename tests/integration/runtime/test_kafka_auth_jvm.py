"""The Java Kafka client in Spark's jar set authenticates as the client properties say:
io.deltaflow.kafka.ConnectCheck, run in the session's JVM (what the driver's check will do) and
from the command line (what an image check does), connects over PLAINTEXT, mTLS (PEM read through
Kafka's DirectoryConfigProvider) and SCRAM over SASL_SSL; and the classes that the other SASL
mechanisms load by name from the properties (AWS_MSK_IAM's login module and callback handler,
OAUTHBEARER's login handler and the jose4j it references) are on the classpath: each fails where it
must, at the SASL handshake or at the token endpoint, not for a missing class. Real broker, real
Spark; no AWS account, and a stub token endpoint of the test's own."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from kafka_logins import scram, secret_files
from runtime_kit import create_topic, unique

from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.kafka_auth import KafkaMaterial, java_properties
from deltaflow_runtime.kafka_preflight import check_kafka
from devstack.kafka import KafkaBroker
from devstack.spark import spark_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

CONNECT_CHECK = "io.deltaflow.kafka.ConnectCheck"
TIMEOUT_MS = 5_000

# The Java client properties of a stream on MSK with IAM (kafka_auth.java_properties writes these).
MSK_IAM = {
    "sasl.mechanism": "AWS_MSK_IAM",
    "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
    "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
}
# OIDC client credentials against a token endpoint where nothing listens; quick retries.
OAUTHBEARER = {
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.login.callback.handler.class": (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    ),
    "sasl.oauthbearer.token.endpoint.url": "https://127.0.0.1:1/token",
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
        ' clientId="deltaflow-test" clientSecret="not-a-secret";'
    ),
    "sasl.login.retry.backoff.ms": "50",
    "sasl.login.retry.backoff.max.ms": "200",
}
# What a class missing from the classpath looks like, wherever in the chain it shows.
MISSING_CLASS = (
    "ClassNotFoundException",
    "NoClassDefFoundError",
    "could not be found",
    "No LoginModule found",
)


def _check(
    spark: SparkSession, props: dict[str, str], timeout_ms: int = TIMEOUT_MS
) -> dict[str, str]:
    jvm: Any = spark.sparkContext._jvm
    return dict(getattr(jvm, CONNECT_CHECK).check(props, timeout_ms))


def _loaded_every_class(answer: dict[str, str]) -> None:
    text = json.dumps(answer)
    assert not any(sign in text for sign in MISSING_CLASS), answer


def test_the_plaintext_listener_and_its_topics_answer(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    topic = unique("connect-check")
    create_topic(kafka.bootstrap_servers, topic, 1)
    plain = {"bootstrap.servers": kafka.bootstrap_servers}
    assert _check(spark, plain) == {"ok": "true"}
    assert _check(spark, {**plain, "deltaflow.check.topic": topic}) == {"ok": "true"}

    missing = _check(spark, {**plain, "deltaflow.check.topic": unique("no-such-topic")})
    assert missing["ok"] == "false"
    assert missing["exceptionClass"] == (
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException"
    ), missing
    assert missing["exceptionChain"].startswith("java.util.concurrent.ExecutionException,")


def _msk_iam(kafka: KafkaBroker) -> dict[str, str]:
    """A stream's MSK IAM properties, aimed at the broker's SASL_SSL listener (which offers PLAIN,
    SCRAM and OAUTHBEARER, not AWS_MSK_IAM)."""
    return {
        "bootstrap.servers": kafka.sasl_ssl_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(kafka.ca_file),
        **MSK_IAM,
    }


def test_msk_iam_properties_load_their_classes_and_reach_the_sasl_handshake(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    # The broker refuses the mechanism at the SASL handshake, after TLS: the client got there only
    # once the JAAS line was parsed, IAMLoginModule had logged in and IAMClientCallbackHandler had
    # made the SASL client. No AWS credentials are looked up before the broker's challenge.
    answer = _check(spark, _msk_iam(kafka))
    _loaded_every_class(answer)
    assert answer["ok"] == "false"
    assert answer["exceptionClass"] == (
        "org.apache.kafka.common.errors.UnsupportedSaslMechanismException"
    ), answer
    assert answer["message"].startswith("Client SASL mechanism 'AWS_MSK_IAM' not enabled"), answer

    # The same on a listener without SASL (the handshake comes back as ILLEGAL_SASL_STATE).
    answer = _check(
        spark,
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            **MSK_IAM,
        },
    )
    _loaded_every_class(answer)
    assert answer["exceptionClass"] == "org.apache.kafka.common.errors.IllegalSaslStateException"
    assert "client mechanism AWS_MSK_IAM" in answer["message"], answer


def test_mtls_and_scram_properties_connect(spark: SparkSession, kafka: KafkaBroker) -> None:
    # The Java client reads the PEM key and certificate through Kafka's DirectoryConfigProvider,
    # as the driver's and executors' clients do from the mounted Secrets.
    pki = kafka.pki
    mtls = {
        "bootstrap.servers": kafka.mtls_bootstrap,
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(kafka.ca_file),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": f"${{dir:{pki.mtls_cert.parent}:{pki.mtls_cert.name}}}",
        "ssl.keystore.key": f"${{dir:{pki.mtls_key.parent}:{pki.mtls_key.name}}}",
        "config.providers": "dir",
        "config.providers.dir.class": (
            "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
        ),
    }
    assert _check(spark, mtls) == {"ok": "true"}

    user, password = unique("connect-check"), "scram-" + unique("pw")
    kafka.add_scram_user(user, "SCRAM-SHA-512", password)
    scram = {
        "bootstrap.servers": kafka.sasl_ssl_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(kafka.ca_file),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required"
            f' username="{user}" password="{password}";'
        ),
    }
    assert _check(spark, scram) == {"ok": "true"}
    wrong = _check(
        spark, {**scram, "sasl.jaas.config": scram["sasl.jaas.config"].replace(password, "wrong")}
    )
    assert wrong["exceptionClass"] == (
        "org.apache.kafka.common.errors.SaslAuthenticationException"
    ), wrong


@pytest.mark.parametrize(
    ("mechanism", "protocol"),
    [("PLAIN", "SASL_SSL"), ("SCRAM-SHA-256", "SASL_SSL"), ("SCRAM-SHA-512", "SASL_PLAINTEXT")],
)
def test_each_password_login_logs_in_from_both_clients_as_the_runtime_maps_it(
    spark: SparkSession, kafka: KafkaBroker, tmp_path: Path, mechanism: str, protocol: str
) -> None:
    # The mechanisms the stream tests do not run (they run SCRAM-SHA-512 over TLS): the driver's
    # librdkafka preflight and the Java client Spark reads with, each configured from the spec
    # by the runtime itself, log in and may read the topic.
    topic = unique("password-login")
    create_topic(kafka.bootstrap_servers, topic, 1)
    if mechanism == "PLAIN":  # the broker's PLAIN users are in its JAAS file
        user, password = "stream-plain", kafka.plain_users["stream-plain"]
    else:
        user, password = unique("login"), "pw-" + unique("pw")
        kafka.add_scram_user(user, mechanism, password)
    login = scram(kafka, user, password, mechanism, protocol)
    kafka.grant(login.principal, topic=topic)
    source = KafkaSource.model_validate(
        {"bootstrapServers": login.bootstrap, "topic": topic, "auth": login.auth}
    )
    material = KafkaMaterial(secret_files(tmp_path, login))
    assert check_kafka(source, material, "deltaflow.check.group", timeout=5.0, topic_wait=0.0)
    props = {
        "bootstrap.servers": login.bootstrap,
        **java_properties(source, material),
        "deltaflow.check.topic": topic,
    }
    assert props["sasl.mechanism"] == mechanism
    assert password not in json.dumps(props)  # a reference to the Secret's file, not the value
    assert _check(spark, props) == {"ok": "true"}
    wrong = KafkaMaterial(secret_files(tmp_path / "wrong", login.with_contents(password="nope")))
    refused = _check(spark, {**props, **java_properties(source, wrong)})
    assert refused["exceptionClass"] == (
        "org.apache.kafka.common.errors.SaslAuthenticationException"
    ), refused


def test_oauthbearer_properties_fail_at_the_token_endpoint_not_on_a_missing_class(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    # Nothing listens at the token endpoint. Kafka's OAuthBearerLoginModule logs the callback
    # handler's IOException and throws a LoginException without it as cause: this message is what
    # the handler failing to fetch a token looks like (a missing class is an Error it does not
    # catch, and would show in the chain).
    answer = _check(
        spark,
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            **OAUTHBEARER,
        },
    )
    _loaded_every_class(answer)
    assert answer["ok"] == "false"
    assert answer["exceptionClass"] == "javax.security.auth.login.LoginException", answer
    assert answer["message"] == (
        "An internal error occurred while retrieving token from callback handler"
    ), answer


class _TokenEndpoint(BaseHTTPRequestHandler):
    """Answers every client-credentials request with one unsigned token (the client checks a
    token's shape and expiry, the broker its signature)."""

    requests: ClassVar[list[tuple[str, str, str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        self.requests.append((self.path, self.headers.get("Authorization", ""), body))
        now = int(time.time())
        claims = {"sub": "deltaflow-test", "iat": now, "exp": now + 300, "scope": "kafka"}
        token = ".".join(
            base64.urlsafe_b64encode(part).rstrip(b"=").decode()
            for part in (
                json.dumps({"alg": "none", "typ": "JWT"}).encode(),
                json.dumps(claims).encode(),
                b"signature",
            )
        )
        reply = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 300})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def token_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    _TokenEndpoint.requests.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_oauthbearer_properties_fetch_a_token_and_reach_the_sasl_handshake(
    spark: SparkSession, kafka: KafkaBroker, token_endpoint: str
) -> None:
    # With a token endpoint that answers, the whole client side runs: the login handler posts the
    # client credentials, validates the token it gets, and the client offers OAUTHBEARER at the
    # handshake (which the PLAINTEXT listener refuses, naming it).
    answer = _check(
        spark,
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            **OAUTHBEARER,
            "sasl.oauthbearer.token.endpoint.url": token_endpoint,
        },
    )
    _loaded_every_class(answer)
    assert answer["exceptionClass"] == "org.apache.kafka.common.errors.IllegalSaslStateException"
    assert "client mechanism OAUTHBEARER" in answer["message"], answer
    path, authorization, body = _TokenEndpoint.requests[0]
    assert path == "/token"
    assert "grant_type=client_credentials" in body
    assert authorization == "Basic " + base64.b64encode(b"deltaflow-test:not-a-secret").decode()


def test_a_class_missing_from_the_classpath_is_named_not_thrown(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    # The failure the two tests above rule out, for real: the check answers it too.
    answer = _check(
        spark,
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            **MSK_IAM,
            "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.NoSuchHandler",
        },
    )
    assert answer["ok"] == "false"
    assert "NoSuchHandler" in answer["message"], answer
    with pytest.raises(AssertionError):
        _loaded_every_class(answer)


def test_an_unreachable_broker_is_answered_within_the_timeout(spark: SparkSession) -> None:
    answer = _check(spark, {"bootstrap.servers": "127.0.0.1:1"}, timeout_ms=1_500)
    assert answer["ok"] == "false"
    assert answer["exceptionClass"] == "org.apache.kafka.common.errors.TimeoutException", answer


def test_the_command_line_prints_one_json_line(tmp_path: Path, kafka: KafkaBroker) -> None:
    import pyspark

    classpath = ":".join(
        [str(Path(pyspark.__file__).parent / "jars" / "*"), *(str(j) for j in spark_jars())]
    )
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _msk_iam(kafka).items()))
    done = subprocess.run(
        ["java", "-cp", classpath, CONNECT_CHECK, str(props), "5000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, (done.stdout, done.stderr)
    answer = json.loads(lines[0])
    assert answer["exceptionClass"] == (
        "org.apache.kafka.common.errors.UnsupportedSaslMechanismException"
    ), answer
    assert "'AWS_MSK_IAM'" in answer["message"]
    assert done.returncode == 1, done.stderr
