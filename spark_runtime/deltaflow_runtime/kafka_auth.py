"""How every Kafka client of a stream connects: the Java clients (Spark's source on the driver
and the executors, the dead-letter re-read) and librdkafka (the driver's lag poll, the consumer
group commit), from one ``spec.source.auth`` and the files its Secrets are mounted as.

No secret value is put into a Spark option, a config file or a log: the Java properties refer
to the mounted files (``${dir:<folder>:<file>}``, resolved by Kafka's DirectoryConfigProvider in
each JVM, limited to those folders), and only the Python clients read the values, into
librdkafka's configuration in this process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltaflow_api.driver_pod import KAFKA_SECRET_FILES, KafkaSecretFile, kafka_secret_refs
from deltaflow_api.failures import FailureReason
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.msk_iam import MskTokenProvider

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
    "AWS_MSK_IAM": "software.amazon.msk.auth.iam.IAMLoginModule",
}
OIDC_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MSK_IAM_CALLBACK_HANDLER = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"

# source.options the Python clients take too, in librdkafka's words: the rest tune Spark's
# Java consumers only (librdkafka refuses a setting it does not know).
LIBRDKAFKA_OPTIONS = ("client.rack", "client.dns.lookup", "ssl.endpoint.identification.algorithm")


class KafkaCredentialsError(DeltaflowError):
    """A Secret key spec.source.auth references is not where the stream reads it from. The
    pods mount them as optional volumes, so the driver starts and says which one; a driver
    started once the Secret exists reads it."""

    reason = FailureReason.KAFKA_CREDENTIALS_MISSING


def file_env(secret_file: KafkaSecretFile) -> str:
    """The variable a local run (``deltaflow run -f``) names this file with, e.g.
    DELTAFLOW_KAFKA_PASSWORD_FILE; in a pod the operator mounts it at ``secret_file.path``."""
    return f"DELTAFLOW_{secret_file.volume.upper().replace('-', '_')}_FILE"


@dataclass(frozen=True)
class KafkaMaterial:
    """Where this process finds each Secret key ``spec.source.auth`` references, by field."""

    files: Mapping[str, str]

    @classmethod
    def locate(cls, source: KafkaSource, env: Mapping[str, str] | None = None) -> KafkaMaterial:
        """The pod's mounted files, or for a local run the files the environment names."""
        e = os.environ if env is None else env
        return cls(
            {sf.field: e.get(file_env(sf), sf.path) for sf, _ in kafka_secret_refs(source.auth)}
        )

    def path(self, field: str) -> str | None:
        return self.files.get(field)

    def reference(self, field: str) -> str:
        """A reference the Java clients resolve to the file's content (never the content)."""
        folder, name = os.path.split(self.files[field])
        return "${dir:" + folder + ":" + name + "}"

    def read(self, field: str) -> str:
        """The value, for the Python clients; fails naming the field and where it looked."""
        path = self.files[field]
        try:
            return Path(path).read_text()
        except OSError as e:
            raise KafkaCredentialsError(_missing(field, path, e.strerror or str(e))) from e

    def check(self, source: KafkaSource) -> None:
        """Fail naming the first referenced Secret key that is not there or empty (the Java
        clients would fail later, in Spark, in words that do not name it)."""
        refs = {sf.field: ref for sf, ref in kafka_secret_refs(source.auth)}
        for field, path in self.files.items():
            try:
                empty = Path(path).stat().st_size == 0
            except OSError as e:
                ref = refs[field]
                raise KafkaCredentialsError(
                    _missing(field, path, e.strerror or str(e), f"{ref.name}, key {ref.key}")
                ) from e
            if empty:
                raise KafkaCredentialsError(f"spec.source.auth.{field}: {path} is empty")

    def folders(self) -> list[str]:
        return sorted({os.path.dirname(p) for p in self.files.values()})


def _env_of(field: str) -> str:
    return next(file_env(sf) for sf in KAFKA_SECRET_FILES if sf.field == field)


def _missing(field: str, path: str, why: str, secret: str | None = None) -> str:
    where = f" (Secret {secret})" if secret else ""
    return (
        f"spec.source.auth.{field}{where}: not found at {path} ({why}); in a pod it is "
        f"mounted there once the Secret and its key exist, and the driver restarts with "
        f"backoff until then; for a local run set {_env_of(field)} to a file holding it"
    )


def _quoted(value: str) -> str:
    # Client ids, scopes and extensions are held by the API to characters JAAS carries as they
    # are; references are paths under the mount folders.
    return f'"{value}"'


def java_properties(source: KafkaSource, material: KafkaMaterial) -> dict[str, str]:
    """The Java Kafka client's security properties (without Spark's ``kafka.`` prefix)."""
    auth = source.auth
    if auth is None:
        return {}
    props: dict[str, str] = {"security.protocol": auth.security_protocol}
    if material.files:
        props["config.providers"] = "dir"
        props["config.providers.dir.class"] = DIRECTORY_PROVIDER
        # A reference in a user's option can read no other file of the pod.
        props["config.providers.dir.param.allowed.paths"] = ",".join(material.folders())
    ca = material.path("caCertificate")
    if ca is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = ca
    if auth.client_certificate is not None:
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.certificate.chain"] = material.reference(
            "clientCertificate.certificate"
        )
        props["ssl.keystore.key"] = material.reference("clientCertificate.key")
        if auth.client_certificate.key_password is not None:
            props["ssl.key.password"] = material.reference("clientCertificate.keyPassword")
    mechanism = auth.sasl_mechanism
    if mechanism is None or not auth.security_protocol.startswith("SASL"):
        return props
    props["sasl.mechanism"] = mechanism
    options: list[str] = []
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        options = [
            f"username={_quoted(material.reference('username'))}",
            f"password={_quoted(material.reference('password'))}",
        ]
    elif mechanism == "OAUTHBEARER" and auth.oauth_bearer is not None:
        oauth = auth.oauth_bearer
        props["sasl.login.callback.handler.class"] = OIDC_LOGIN_HANDLER
        props["sasl.oauthbearer.token.endpoint.url"] = oauth.token_endpoint_url
        options = [
            f"clientId={_quoted(oauth.client_id)}",
            f"clientSecret={_quoted(material.reference('oauthBearer.clientSecret'))}",
        ]
        if oauth.scope is not None:
            options.append(f"scope={_quoted(oauth.scope)}")
        options += [f"extension_{k}={_quoted(v)}" for k, v in sorted(oauth.extensions.items())]
        token_ca = material.path("oauthBearer.tokenEndpointCaCertificate")
        if token_ca is not None:
            # The login's HTTPS client takes its trust from the JAAS options.
            options += ['ssl.truststore.type="PEM"', f"ssl.truststore.location={_quoted(token_ca)}"]
    elif mechanism == "AWS_MSK_IAM" and auth.aws_msk_iam is not None:
        msk = auth.aws_msk_iam
        props["sasl.client.callback.handler.class"] = MSK_IAM_CALLBACK_HANDLER
        if msk.role_arn is not None:
            options.append(f"awsRoleArn={_quoted(msk.role_arn)}")
            if msk.region is not None:
                options.append(f"awsStsRegion={_quoted(msk.region)}")
    props["sasl.jaas.config"] = " ".join([LOGIN_MODULES[mechanism], "required", *options]) + ";"
    return props


def librdkafka_config(source: KafkaSource, material: KafkaMaterial) -> dict[str, Any]:
    """The same connection for confluent-kafka's clients (librdkafka's property names), with
    the secret values read from their files (and, for MSK IAM, a token callback)."""
    config: dict[str, Any] = {"bootstrap.servers": source.bootstrap_servers}
    for key in LIBRDKAFKA_OPTIONS:
        value = source.options.get(f"kafka.{key}")
        if value is not None:
            # Java turns endpoint identification off with "", librdkafka with "none".
            off = key == "ssl.endpoint.identification.algorithm" and value == ""
            config[key] = "none" if off else value
    auth = source.auth
    if auth is None:
        return config
    config["security.protocol"] = auth.security_protocol.lower()
    ca = material.path("caCertificate")
    if ca is not None:
        config["ssl.ca.location"] = ca
    if auth.client_certificate is not None:
        config["ssl.certificate.location"] = material.files["clientCertificate.certificate"]
        config["ssl.key.location"] = material.files["clientCertificate.key"]
        if auth.client_certificate.key_password is not None:
            config["ssl.key.password"] = material.read("clientCertificate.keyPassword")
    mechanism = auth.sasl_mechanism
    if mechanism is None or not auth.security_protocol.startswith("SASL"):
        return config
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        config["sasl.mechanisms"] = mechanism
        config["sasl.username"] = material.read("username")
        config["sasl.password"] = material.read("password")
    elif mechanism == "OAUTHBEARER" and auth.oauth_bearer is not None:
        oauth = auth.oauth_bearer
        config["sasl.mechanisms"] = "OAUTHBEARER"
        config["sasl.oauthbearer.method"] = "oidc"
        config["sasl.oauthbearer.client.id"] = oauth.client_id
        config["sasl.oauthbearer.client.secret"] = material.read("oauthBearer.clientSecret")
        config["sasl.oauthbearer.token.endpoint.url"] = oauth.token_endpoint_url
        if oauth.scope is not None:
            config["sasl.oauthbearer.scope"] = oauth.scope
        if oauth.extensions:
            config["sasl.oauthbearer.extensions"] = ",".join(
                f"{k}={v}" for k, v in sorted(oauth.extensions.items())
            )
        token_ca = material.path("oauthBearer.tokenEndpointCaCertificate")
        if token_ca is not None:
            config["https.ca.location"] = token_ca
    elif mechanism == "AWS_MSK_IAM" and auth.aws_msk_iam is not None:
        # MSK takes OAUTHBEARER with a SigV4-signed token from non-Java clients.
        config["sasl.mechanisms"] = "OAUTHBEARER"
        config["oauth_cb"] = MskTokenProvider(
            source.bootstrap_servers, auth.aws_msk_iam.role_arn, auth.aws_msk_iam.region
        )
    return config


def spark_source_options(source: KafkaSource, material: KafkaMaterial) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's source: the user's settings (source.options), then
    the isolation level and security, which admission keeps out of source.options (a resource
    stored before that rule cannot override them either)."""
    options = dict(source.options)
    options["kafka.isolation.level"] = source.isolation_level
    for key, value in java_properties(source, material).items():
        options[f"kafka.{key}"] = value
    return options
