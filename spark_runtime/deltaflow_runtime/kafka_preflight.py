"""Before the JVM starts: can this stream reach its Kafka, log in, and read its topic and commit
its group? A short metadata exchange over the stream's own connection (librdkafka, ~1 s) turns
what Spark would report as a timeout and pages of Java into one failure reason that names the
spec field or Secret key to fix and quotes the broker's words.

The classification is pure (tested as a table); :func:`check_kafka` does the talking. A failure
ends the driver with its reason: the operator restarts it with backoff (no tight loop), and a
driver started after the Secret, the ACL or the topic is fixed goes on by itself.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltaflow_api.driver_pod import kafka_secret_refs
from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.kafka_auth import KafkaMaterial, librdkafka_config
from deltaflow_runtime.msk_iam import MskIamError

log = logging.getLogger(__name__)

# Values that go between the quotes of a JAAS option: Kafka substitutes the file's content
# there before parsing, so a quote, backslash or line break would change the login's meaning.
_JAAS_CARRIED = (
    "username",
    "password",
    "oauthBearer.clientSecret",
    "clientCertificate.keyPassword",  # a property value of its own, as exact
)
_NOT_IN_JAAS = re.compile(r'["\\\x00-\x1f\x7f]')


GROUP_AUTHORIZATION_FAILED = "GROUP_AUTHORIZATION_FAILED"


class KafkaPreflightError(DeltaflowError):
    """The stream cannot use its Kafka as configured; the message says what to fix."""


@dataclass(frozen=True)
class KafkaProblem:
    """What is wrong, which spec field or Secret key it is about, and the broker's words."""

    reason: FailureReason
    field: str
    message: str

    def error(self) -> KafkaPreflightError:
        return KafkaPreflightError(f"{self.field}: {self.message}", self.reason)


def secret_field(source: KafkaSource, field: str) -> str:
    """``spec.source.auth.<field> (Secret <name>, key <key>)``: where to fix a value."""
    for secret_file, ref in kafka_secret_refs(source.auth):
        if secret_file.field == field:
            return f"spec.source.auth.{field} (Secret {ref.name}, key {ref.key})"
    return f"spec.source.auth.{field}"


def material_problem(source: KafkaSource, contents: dict[str, str]) -> KafkaProblem | None:
    """What the Secrets' contents (by field) hold that cannot work, before any connection."""

    def invalid(field: str, what: str) -> KafkaProblem:
        return KafkaProblem(
            FailureReason.KAFKA_CREDENTIALS_INVALID, secret_field(source, field), what
        )

    for field in _JAAS_CARRIED:
        value = contents.get(field)
        if value is not None and _NOT_IN_JAAS.search(value):
            ends = value.endswith("\n")
            return invalid(
                field,
                "ends with a line break: store the value without one (kubectl create secret "
                "generic --from-literal, or printf '%s')"
                if ends
                else "holds a quote, a backslash or a control character, which Kafka's JAAS "
                "login configuration cannot carry",
            )
    cert = contents.get("clientCertificate.certificate")
    if cert is not None and "-----BEGIN CERTIFICATE-----" not in cert:
        return invalid("clientCertificate.certificate", "is not a PEM certificate")
    key = contents.get("clientCertificate.key")
    if key is not None:
        if re.search(r"-----BEGIN (RSA|EC|DSA) PRIVATE KEY-----", key):
            return invalid(
                "clientCertificate.key",
                "is a traditional (PKCS#1/SEC1) key; Kafka reads PKCS#8 only: convert it "
                "with openssl pkcs8 -topk8 -nocrypt -in tls.key -out tls.pk8.key",
            )
        encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----" in key
        if not encrypted and "-----BEGIN PRIVATE KEY-----" not in key:
            return invalid("clientCertificate.key", "is not a PEM private key")
        auth = source.auth
        has_password = (
            auth is not None
            and auth.client_certificate is not None
            and auth.client_certificate.key_password is not None
        )
        if encrypted and not has_password:
            return invalid(
                "clientCertificate.key",
                "is encrypted: set spec.source.auth.clientCertificate.keyPassword",
            )
    return None


# librdkafka's words for a broker that refused the client's certificate.
_CLIENT_CERT_REFUSED = ("alert bad certificate", "alert unknown ca", "certificate required")


def connection_problem(source: KafkaSource, errors: Sequence[tuple[str, str]]) -> KafkaProblem:
    """Classify a failed connection from librdkafka's errors (code name, text), first match."""
    texts = [text for _, text in errors]
    codes = {code for code, _ in errors}
    words = next(
        (text for code, text in errors if code != "_ALL_BROKERS_DOWN"),
        texts[0] if texts else "no answer",
    )
    mechanism = source.auth.sasl_mechanism if source.auth else None

    def problem(reason: FailureReason, field: str, advice: str) -> KafkaProblem:
        return KafkaProblem(reason, field, f"{advice} (Kafka client: {words})")

    if "_AUTHENTICATION" in codes or "SASL_AUTHENTICATION_FAILED" in codes:
        if "Unsupported SASL mechanism" in words or "UNSUPPORTED_SASL_MECHANISM" in codes:
            return problem(
                FailureReason.KAFKA_AUTHENTICATION_FAILED,
                "spec.source.auth.saslMechanism",
                f"the listener does not offer {mechanism}",
            )
        if "OAUTHBEARER token" in words:
            if "invalid_client" in words or "unauthorized_client" in words:
                field = secret_field(source, "oauthBearer.clientSecret")
                return problem(
                    FailureReason.KAFKA_AUTHENTICATION_FAILED,
                    field,
                    "the token endpoint refused the client id and secret",
                )
            return problem(
                FailureReason.KAFKA_AUTHENTICATION_FAILED,
                "spec.source.auth.oauthBearer.tokenEndpointUrl",
                "no token from the token endpoint",
            )
        if mechanism == "AWS_MSK_IAM":
            field = "the pods' workload identity (spec.serviceAccount)"
        elif mechanism == "OAUTHBEARER":
            field = "spec.source.auth.oauthBearer"
        else:
            field = f"{secret_field(source, 'username')} or {secret_field(source, 'password')}"
        return problem(
            FailureReason.KAFKA_AUTHENTICATION_FAILED, field, "the broker refused the login"
        )
    if "_SSL" in codes:
        if "certificate verify failed" in words:
            return problem(
                FailureReason.KAFKA_TLS_FAILED,
                secret_field(source, "caCertificate"),
                "the broker's certificate is not signed by this CA (or the host name does "
                "not match it)",
            )
        return problem(
            FailureReason.KAFKA_TLS_FAILED, "spec.source.auth", "the TLS handshake failed"
        )
    if any(mark in words for mark in _CLIENT_CERT_REFUSED):
        field = (
            secret_field(source, "clientCertificate.certificate")
            if source.auth is not None and source.auth.client_certificate is not None
            else "spec.source.auth.clientCertificate"
        )
        return problem(
            FailureReason.KAFKA_TLS_FAILED,
            field,
            "the broker refused the stream's client certificate (missing, or not signed by "
            "a CA it trusts)",
        )
    if codes & {"_TRANSPORT", "_RESOLVE"} and "SSL" not in words:
        return problem(
            FailureReason.KAFKA_UNREACHABLE,
            "spec.source.bootstrapServers",
            "cannot connect to the brokers",
        )
    return problem(
        FailureReason.KAFKA_UNREACHABLE,
        "spec.source.bootstrapServers",
        "connected, but the brokers did not answer: does spec.source.auth.securityProtocol "
        "match the listener's",
    )


# The librdkafka setting a client refused at its construction, and the auth field it holds.
_CONSTRUCTION_FIELDS = (
    ("https.ca.location", "oauthBearer.tokenEndpointCaCertificate"),
    ("ssl.ca.location", "caCertificate"),
    ("ssl.key.location", "clientCertificate.key"),
    ("ssl.certificate.location", "clientCertificate.certificate"),
)


def construction_problem(source: KafkaSource, words: str) -> KafkaProblem:
    """A Kafka client that could not be made from the stream's material, e.g. "ssl.key.location
    failed: ... key values mismatch": the field and Secret key the setting came from."""
    field = next(
        (secret_field(source, f) for setting, f in _CONSTRUCTION_FIELDS if setting in words),
        "spec.source",
    )
    return KafkaProblem(
        FailureReason.KAFKA_CREDENTIALS_INVALID,
        field,
        f"the Kafka client cannot use it (Kafka client: {words})",
    )


def topic_problem(
    topic: str, code: str | None, operations: Sequence[str] | None
) -> KafkaProblem | None:
    """The stream's topic as its principal sees it (``code``: describe's error, if any)."""
    if code == "UNKNOWN_TOPIC_OR_PART":
        return KafkaProblem(
            FailureReason.KAFKA_TOPIC_NOT_FOUND,
            "spec.source.topic",
            f"topic {topic} does not exist; create it (or fix the name)",
        )
    if code == "TOPIC_AUTHORIZATION_FAILED":
        return KafkaProblem(
            FailureReason.KAFKA_AUTHORIZATION_FAILED,
            "spec.source.topic",
            f"the stream's principal may not describe Topic:{topic} (or it does not exist): "
            "grant it Read and Describe on the topic",
        )
    if code is not None:
        return KafkaProblem(
            FailureReason.KAFKA_UNREACHABLE, "spec.source.topic", f"describing {topic}: {code}"
        )
    if operations is not None and "READ" not in operations:
        return KafkaProblem(
            FailureReason.KAFKA_AUTHORIZATION_FAILED,
            "spec.source.topic",
            f"the stream's principal may describe but not read Topic:{topic}: grant it Read",
        )
    return None


def group_problem(
    group: str, code: str | None, operations: Sequence[str] | None
) -> KafkaProblem | None:
    """The stream's commit group (its offsets after each Delta commit, for lag tools)."""
    missing = code == GROUP_AUTHORIZATION_FAILED or (
        code is None and operations is not None and "READ" not in operations
    )
    if not missing:
        return None
    return KafkaProblem(
        FailureReason.KAFKA_AUTHORIZATION_FAILED,
        "spec.source.auth",
        f"the stream's principal may not use Group:{group}, where it commits its offsets after "
        "each Delta commit (for lag tools and KEDA): grant it Read on the group",
    )


def group_commit_problem(group: str, error: BaseException) -> str | None:
    """What a group commit that failed tells the user, when the stream's principal may not use
    the group; None for anything else (a broker hiccup: the next commit tries again). The same
    refusal reads the same every time (it is compared to say it once)."""
    from confluent_kafka import KafkaError

    first = error.args[0] if error.args else None
    if not isinstance(first, KafkaError) or first.name() != GROUP_AUTHORIZATION_FAILED:
        return None
    problem = group_problem(group, GROUP_AUTHORIZATION_FAILED, None)
    assert problem is not None
    return f"{problem.field}: {problem.message} (Kafka client: {first.str()[:300]})"


def check_kafka(
    source: KafkaSource,
    material: KafkaMaterial,
    group: str,
    *,
    timeout: float = 10.0,
    topic_wait: float = 60.0,
    stop: threading.Event | None = None,
) -> bool:
    """Raise :class:`KafkaPreflightError` (or the material's own error) unless the stream can
    connect, log in and read its topic. A missing topic is waited for up to ``topic_wait``
    seconds first (a producer's first record often creates it). A principal that may not use
    the commit group is only warned about: that commit serves lag tools, not the stream.
    Returns False when ``stop`` was set meanwhile (SIGTERM: the driver ends quietly)."""
    stop = stop or threading.Event()
    material.check(source)
    problem = material_problem(source, _contents(source, material))
    if problem is not None:
        raise problem.error()
    try:
        admin, errors = _admin(source, material)
        return _check(
            admin, errors, source, group, timeout=timeout, topic_wait=topic_wait, stop=stop
        )
    except KafkaPreflightError:
        raise
    except Exception as e:  # anything unforeseen still ends with a reason and the field
        raise KafkaProblem(
            FailureReason.KAFKA_UNREACHABLE,
            "spec.source",
            f"the Kafka preflight failed: {type(e).__name__}: {str(e)[:500]}",
        ).error() from e


def _contents(source: KafkaSource, material: KafkaMaterial) -> dict[str, str]:
    contents = {}
    for field, path in material.files.items():
        try:
            contents[field] = Path(path).read_text()
        except UnicodeDecodeError:
            raise KafkaProblem(
                FailureReason.KAFKA_CREDENTIALS_INVALID,
                secret_field(source, field),
                "is not text: PEM (or a password) is expected, not DER or a Java keystore",
            ).error() from None
    return contents


def _admin(source: KafkaSource, material: KafkaMaterial) -> tuple[Any, list[tuple[str, str]]]:
    """The AdminClient on the stream's connection and the list its errors go to."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[tuple[str, str]] = []
    try:
        config: dict[str, Any] = dict(librdkafka_config(source, material))
        token = config.get("oauth_cb")
        if token is not None:
            token(None)  # MSK IAM: the workload identity signs a token (or says why not)
    except MskIamError as e:
        raise KafkaProblem(
            FailureReason.KAFKA_AUTHENTICATION_FAILED,
            "spec.serviceAccount (the pods' AWS workload identity)",
            str(e),
        ).error() from None
    config.update(
        log_level=0,  # its words come through error_cb, once, in the message
        error_cb=lambda e: errors.append((e.name(), e.str())),
    )
    try:
        return AdminClient(config), errors
    except KafkaException as e:
        # librdkafka loads the TLS material when the client is made: a key that does not
        # match its certificate, a CA file that is no PEM.
        raise construction_problem(source, e.args[0].str()).error() from None


# A refusal that repeats the same way on every try: no need to wait out the timeout.
_FINAL = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL"}


def _check(
    admin: Any,
    errors: list[tuple[str, str]],
    source: KafkaSource,
    group: str,
    *,
    timeout: float,
    topic_wait: float,
    stop: threading.Event,
) -> bool:
    from confluent_kafka import KafkaException, TopicCollection

    answered = admin.describe_cluster(request_timeout=timeout)
    started = time.monotonic()
    while not answered.done():
        admin.poll(0.25)  # an AdminClient serves error_cb only from poll()
        if stop.is_set():
            return False
        codes = {code for code, _ in errors}
        refused_cert = any(mark in text for _, text in errors for mark in _CLIENT_CERT_REFUSED)
        # Every broker down (not one of several) or a final refusal decides early.
        down = "_ALL_BROKERS_DOWN" in codes and time.monotonic() - started > 2.0
        if codes & _FINAL or refused_cert or down:
            raise connection_problem(source, errors).error()
    try:
        answered.result()
    except KafkaException:
        admin.poll(0.5)
        raise connection_problem(source, errors).error() from None
    if source.topic is not None:
        deadline = time.monotonic() + topic_wait
        while True:
            found = admin.describe_topics(
                TopicCollection([source.topic]),
                include_authorized_operations=True,
                request_timeout=timeout,
            )[source.topic]
            code, operations = _outcome(found, timeout)
            problem = topic_problem(source.topic, code, operations)
            waiting = problem is not None and problem.reason == FailureReason.KAFKA_TOPIC_NOT_FOUND
            if not waiting or time.monotonic() >= deadline:
                break
            log.info("waiting for topic %s to exist (spec.source.topic)", source.topic)
            if stop.wait(5.0):
                return False
        if problem is not None:
            raise problem.error()
    described = admin.describe_consumer_groups(
        [group], include_authorized_operations=True, request_timeout=timeout
    )[group]
    code, operations = _outcome(described, timeout)
    problem = group_problem(group, code, operations)
    if problem is not None:
        log.warning("%s: %s (the stream runs without it)", problem.field, problem.message)
    return True


def _outcome(future: Any, timeout: float) -> tuple[str | None, list[str] | None]:
    from confluent_kafka import KafkaException

    try:
        result = future.result(timeout=timeout)
    except KafkaException as e:
        return e.args[0].name(), None
    except concurrent.futures.TimeoutError:
        return "_TIMED_OUT", None
    operations = getattr(result, "authorized_operations", None)
    return None, None if operations is None else [op.name for op in operations]
