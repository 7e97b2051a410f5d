"""One Kafka connection per spec, for the Java clients and librdkafka: golden properties per
mechanism, and no secret value in anything Spark or a config file would hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deltaflow_api.driver_pod import KAFKA_SECRET_FILES, KAFKA_SECRET_VOLUMES
from deltaflow_api.failures import FailureReason
from deltaflow_api.rules import RESERVED_VOLUME_NAMES
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.kafka_auth import (
    KafkaCredentialsError,
    KafkaMaterial,
    file_env,
    java_properties,
    librdkafka_config,
    spark_source_options,
)
from support.manifests import MSK_AUTH, MTLS_AUTH, OAUTH_AUTH, SCRAM_AUTH

SECRET_VALUES = {
    "username": "orders-reader",
    "password": "s3cret-Pa55",
    "clientCertificate.keyPassword": "key-pa55",
    "oauthBearer.clientSecret": "oidc-S3cret",
    "clientCertificate.certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n",
    "clientCertificate.key": "-----BEGIN PRIVATE KEY-----\nMIIE\n",
    "caCertificate": "-----BEGIN CERTIFICATE-----\nMIIC\n",
    "oauthBearer.tokenEndpointCaCertificate": "-----BEGIN CERTIFICATE-----\nMIID\n",
}


def _source(auth: dict[str, Any]) -> KafkaSource:
    return KafkaSource.model_validate({"bootstrapServers": "k:9093", "topic": "t", "auth": auth})


def _material(source: KafkaSource, root: Path) -> KafkaMaterial:
    """The referenced files laid out as a pod has them, under ``root`` (a local run's env)."""
    env = {}
    for secret_file in KAFKA_SECRET_FILES:
        path = root / secret_file.volume / secret_file.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET_VALUES[secret_file.field])
        env[file_env(secret_file)] = str(path)
    return KafkaMaterial.locate(source, env)


def _ref(root: Path, volume: str, file: str) -> str:
    return "${dir:" + f"{root}/{volume}:{file}" + "}"


def test_scram_over_tls(tmp_path: Path) -> None:
    source = _source(SCRAM_AUTH)
    material = _material(source, tmp_path)
    props = java_properties(source, material)
    assert props == {
        "security.protocol": "SASL_SSL",
        "config.providers": "dir",
        "config.providers.dir.class": (
            "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
        ),
        "config.providers.dir.param.allowed.paths": ",".join(
            sorted(str(tmp_path / v) for v in ("kafka-ca", "kafka-password", "kafka-username"))
        ),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "kafka-ca/ca.crt"),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{_ref(tmp_path, "kafka-username", "username")}" '
        f'password="{_ref(tmp_path, "kafka-password", "password")}";',
    }
    assert librdkafka_config(source, material) == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "sasl_ssl",
        "ssl.ca.location": str(tmp_path / "kafka-ca/ca.crt"),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "orders-reader",
        "sasl.password": "s3cret-Pa55",
    }


def test_mutual_tls_with_an_encrypted_key(tmp_path: Path) -> None:
    auth = {
        **MTLS_AUTH,
        "clientCertificate": {
            **MTLS_AUTH["clientCertificate"],
            "keyPassword": {"name": "stream-tls", "key": "password"},
        },
    }
    source = _source(auth)
    material = _material(source, tmp_path)
    props = java_properties(source, material)
    assert props["security.protocol"] == "SSL"
    assert props["ssl.keystore.type"] == "PEM"
    assert props["ssl.keystore.certificate.chain"] == _ref(tmp_path, "kafka-client-cert", "tls.crt")
    assert props["ssl.keystore.key"] == _ref(tmp_path, "kafka-client-key", "tls.key")
    assert props["ssl.key.password"] == _ref(tmp_path, "kafka-key-password", "password")
    assert "sasl.mechanism" not in props
    assert librdkafka_config(source, material) == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "ssl",
        "ssl.ca.location": str(tmp_path / "kafka-ca/ca.crt"),
        "ssl.certificate.location": str(tmp_path / "kafka-client-cert/tls.crt"),
        "ssl.key.location": str(tmp_path / "kafka-client-key/tls.key"),
        "ssl.key.password": "key-pa55",
    }


def test_oauthbearer_with_oidc_client_credentials(tmp_path: Path) -> None:
    auth = {
        **OAUTH_AUTH,
        "oauthBearer": {
            **OAUTH_AUTH["oauthBearer"],
            "tokenEndpointCaCertificate": {"name": "idp-ca", "key": "ca.crt"},
        },
    }
    source = _source(auth)
    material = _material(source, tmp_path)
    props = java_properties(source, material)
    assert props["sasl.mechanism"] == "OAUTHBEARER"
    assert props["sasl.login.callback.handler.class"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    )
    assert props["sasl.oauthbearer.token.endpoint.url"] == "https://login.example.com/oauth2/token"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="orders-stream" '
        f'clientSecret="{_ref(tmp_path, "kafka-client-secret", "client-secret")}" '
        'scope="kafka:read kafka:describe" '
        'extension_identityPoolId="pool-XyZ" extension_logicalCluster="lkc-a1b2c3" '
        f'ssl.truststore.type="PEM" ssl.truststore.location="{tmp_path}/kafka-token-ca/ca.crt";'
    )
    assert librdkafka_config(source, material) == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "orders-stream",
        "sasl.oauthbearer.client.secret": "oidc-S3cret",
        "sasl.oauthbearer.token.endpoint.url": "https://login.example.com/oauth2/token",
        "sasl.oauthbearer.scope": "kafka:read kafka:describe",
        "sasl.oauthbearer.extensions": "identityPoolId=pool-XyZ,logicalCluster=lkc-a1b2c3",
        "https.ca.location": str(tmp_path / "kafka-token-ca/ca.crt"),
    }


def test_aws_msk_iam_uses_the_workload_identity_and_no_file(tmp_path: Path) -> None:
    role = "arn:aws:iam::123456789012:role/orders-reader"
    source = _source({**MSK_AUTH, "awsMskIam": {"region": "eu-west-1", "roleArn": role}})
    material = _material(source, tmp_path)
    assert material.files == {}
    assert java_properties(source, material) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "AWS_MSK_IAM",
        "sasl.client.callback.handler.class": (
            "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
        ),
        "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required "
        f'awsRoleArn="{role}" awsStsRegion="eu-west-1";',
    }
    plain = _source(MSK_AUTH)
    assert java_properties(plain, _material(plain, tmp_path))["sasl.jaas.config"] == (
        "software.amazon.msk.auth.iam.IAMLoginModule required;"
    )
    # The driver's own client: OAUTHBEARER with MSK's signed token (msk_iam), no file.
    on_msk = source.model_copy(
        update={"bootstrap_servers": "b-1.lake.x1.c2.kafka.eu-west-1.amazonaws.com:9098"}
    )
    config = librdkafka_config(on_msk, material)
    assert config["security.protocol"] == "sasl_ssl"
    assert config["sasl.mechanisms"] == "OAUTHBEARER"
    assert config["oauth_cb"].region == "eu-west-1"  # from the brokers' host names


@pytest.mark.parametrize(
    "auth", [SCRAM_AUTH, MTLS_AUTH, OAUTH_AUTH], ids=["scram", "mtls", "oauth"]
)
def test_no_secret_value_reaches_spark_s_options(auth: dict[str, Any], tmp_path: Path) -> None:
    source = _source(auth)
    options = spark_source_options(source, _material(source, tmp_path))
    rendered = repr(options)
    for field, value in SECRET_VALUES.items():
        assert value.strip() not in rendered, field


def test_a_missing_secret_names_the_field_the_secret_and_the_key(tmp_path: Path) -> None:
    source = _source(SCRAM_AUTH)
    material = _material(source, tmp_path)
    (tmp_path / "kafka-password" / "password").unlink()
    with pytest.raises(KafkaCredentialsError) as err:
        material.check(source)
    assert err.value.reason == FailureReason.KAFKA_CREDENTIALS_MISSING
    assert "spec.source.auth.password (Secret kafka-creds, key password)" in str(err.value)
    assert "DELTAFLOW_KAFKA_PASSWORD_FILE" in str(err.value)
    (tmp_path / "kafka-password" / "password").write_text("")
    with pytest.raises(KafkaCredentialsError, match=r"spec.source.auth.password: .* is empty"):
        material.check(source)


def test_in_a_pod_the_files_are_where_the_operator_mounts_them() -> None:
    source = _source(SCRAM_AUTH)
    material = KafkaMaterial.locate(source, env={})
    assert material.files == {
        "caCertificate": "/etc/deltaflow/kafka-ca/ca.crt",
        "username": "/etc/deltaflow/kafka-username/username",
        "password": "/etc/deltaflow/kafka-password/password",
    }


def test_every_secret_volume_name_is_reserved_from_user_volumes() -> None:
    assert set(KAFKA_SECRET_VOLUMES) <= set(RESERVED_VOLUME_NAMES)
