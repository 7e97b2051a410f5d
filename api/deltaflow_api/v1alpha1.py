"""The DeltaIngestion API, v1alpha1: the only shape users write, and the one source of truth.

The CRD in ``crds/`` is generated from these models (``deltaflow crd``). Field names are camelCase
on the wire, as Kubernetes users expect, and snake_case in Python. Every cross-field rule is a
:class:`~deltaflow_api.rules.Rule`, so the API server (CEL) and pydantic judge alike.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from deltaflow_api.names import MAX_NAME_LENGTH, NAME_LIMITED_BY
from deltaflow_api.rules import (
    FREE_SASL_OPTION_PREFIXES,
    MEMORY_MIB_CEL,
    OWNED_KAFKA_OPTION_PREFIXES,
    OWNED_KAFKA_OPTIONS,
    PATH_SCHEMES_TEXT,
    RESERVED_KEY_DOMAIN,
    RESERVED_MOUNT_PATHS,
    RESERVED_VOLUME_NAMES,
    Rule,
    ascii_lower,
    canonical_path,
    canonical_path_cel,
    check_rules,
    cpu_millicores,
    dead_letter_place,
    dead_letter_place_cel,
    immutable,
    kafka_option_owned,
    kafka_option_spelled,
    kafka_option_spelled_cel,
    memory_mib,
    mount_path_allowed,
    mount_path_allowed_cel,
    path_has_alias,
    path_has_alias_cel,
    path_is_root,
    path_is_root_cel,
    path_scheme_supported,
    path_scheme_supported_cel,
    places_apart,
    places_apart_cel,
    reserved_key,
    reserved_key_cel,
    secret_like_conf_key,
    secret_like_conf_key_cel,
    topic_pattern_in_dialect,
    topic_pattern_in_dialect_cel,
    unique_cel,
    volume_name_allowed,
    volume_name_allowed_cel,
)

GROUP = "deltaflow.io"
VERSION = "v1alpha1"
KIND = "DeltaIngestion"
PLURAL = "deltaingestions"
SINGULAR = "deltaingestion"
SHORT_NAMES = ["di", "dingest"]

# Names are RE2- and Rust-regex compatible: the API server and pydantic run the same pattern.
DURATION_PATTERN = r"^[1-9][0-9]{0,5}(ms|s|m|h)$"
# Spark's form (512m, 2g; any case, binary: 2G is 2 GiB as in spark.executor.memory) or
# Kubernetes' binary form (512Mi, 2Gi). Kubernetes' decimal "2G" would read as 2 GiB here, so
# the description says which.
MEMORY_PATTERN = r"^[1-9][0-9]{0,6}([mMgG]|[MG]i)$"
KAFKA_TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
# Where the operator scales executors and the spec sets no source.minPartitions: Spark tasks per
# batch per executor core at maxExecutors, at most the bound source.minPartitions has.
DEFAULT_TASKS_PER_CORE = 2
MAX_MIN_PARTITIONS = 10_000
BOOTSTRAP_PATTERN = r"^[A-Za-z0-9.-]+:[0-9]{1,5}(,[A-Za-z0-9.-]+:[0-9]{1,5})*$"
# No whitespace or control characters; the scheme, root and spelling rules say the rest with a
# message (an explicit class: RE2's \s and pydantic's Unicode \s differ).
TABLE_PATH_PATTERN = r"^[^\x00-\x20\x7f]+$"
COLUMN_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"
IMAGE_PATTERN = r"^[^\s]{1,512}$"
# A Kubernetes CPU quantity, as the API server and Spark's request.cores both take it: millicores
# ("250m") or cores with up to three decimals ("0.5", "1", "2.25"); zero is no request.
CPU_QUANTITY_PATTERN = (
    r"^([1-9][0-9]{0,4}m|[1-9][0-9]?(\.[0-9]{1,3})?|0\.([1-9][0-9]{0,2}|0[1-9][0-9]?|00[1-9]))$"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Absolute, no trailing '/', no empty, '.' or '..' segments: one spelling per directory, so the
# reserved-path rule cannot be dodged with "/tmp/" or "/etc//deltaflow".
MOUNT_PATH_PATTERN = r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$"


def _cron_pattern() -> str:
    """Five-field cron (minute hour day-of-month month day-of-week) with ranges, steps and lists,
    each field bounded to its legal values, or one of the @-macros CronJob accepts."""

    def field(value: str) -> str:
        item = f"(\\*|{value}(-{value})?)(/[1-9][0-9]?)?"
        return f"{item}(,{item})*"

    minute, hour = "[0-5]?[0-9]", "(1[0-9]|2[0-3]|0?[0-9])"
    dom, month, dow = "(3[01]|[12][0-9]|0?[1-9])", "(1[0-2]|0?[1-9])", "[0-7]"
    fields = " ".join(field(f) for f in (minute, hour, dom, month, dow))
    return f"^(@(yearly|annually|monthly|weekly|daily|hourly)|{fields})$"


CRON_PATTERN = _cron_pattern()


class ApiModel(BaseModel):
    """Base for every API object: camelCase on the wire, unknown fields rejected.

    Strict like the API server: "yes" is not a boolean and "5" is not an integer.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        # On the validated, defaulted values in their wire form: what CEL sees after the API
        # server applied defaults (an unset optional is absent, as for CEL's has()).
        if self.rules:
            check_rules(self.rules, self.model_dump(by_alias=True, exclude_none=True))
        return self


class SecretKeyRef(ApiModel):
    """A key in a Secret in the resource's namespace; the operator never reads its value."""

    name: Annotated[
        str,
        Field(pattern=K8S_NAME_PATTERN, max_length=253, description="The Secret's name."),
    ]
    key: Annotated[
        str, Field(pattern=SECRET_KEY_PATTERN, description="The key within the Secret's data.")
    ]


# Printable ASCII without space, '"', '\' or '$': what a JAAS value can carry between its
# quotes, and no "${...}" reference the Java clients' config provider would resolve (it reads
# the stream's own secret files: a client id could copy a password into every log line).
JAAS_VALUE_PATTERN = r"^[!#%-\[\]-~]{1,255}$"
# RFC 6749 scope tokens (the same characters), separated by single spaces.
OAUTH_SCOPE_PATTERN = r"^[!#%-\[\]-~]+( [!#%-\[\]-~]+)*$"
# RFC 7628 extension keys; their values also go into librdkafka's "k=v,k=v" list: no ','.
OAUTH_EXTENSION_KEY = r"^[A-Za-z]{1,64}$"
OAUTH_EXTENSION_VALUE_PATTERN = r"^[!#%-+\--\[\]-~]{1,256}$"
USER_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM"]


class ClientCertificate(ApiModel):
    """The stream's own certificate for mutual TLS, from Secrets (e.g. a kubernetes.io/tls one)."""

    certificate: SecretKeyRef = Field(
        description="PEM certificate chain, the stream's certificate first (e.g. key tls.crt)."
    )
    key: SecretKeyRef = Field(
        description="PEM private key in PKCS#8 (BEGIN PRIVATE KEY or BEGIN ENCRYPTED PRIVATE "
        "KEY; convert an RSA key with openssl pkcs8 -topk8), e.g. key tls.key."
    )
    key_password: SecretKeyRef | None = Field(
        default=None, description="The password of an encrypted key; unset for a plain key."
    )


class OAuthBearer(ApiModel):
    """SASL OAUTHBEARER with OIDC client credentials: the stream gets tokens from the token
    endpoint and refreshes them before they expire."""

    token_endpoint_url: Annotated[
        str,
        Field(
            pattern=r"^https://[!#%-\[\]-~]+$",
            max_length=2048,
            description="The identity provider's token endpoint (https://.../token).",
        ),
    ]
    client_id: Annotated[
        str, Field(pattern=JAAS_VALUE_PATTERN, description="The OAuth client id (not a secret).")
    ]
    client_secret: SecretKeyRef = Field(description="The OAuth client secret, from a Secret.")
    scope: Annotated[
        str | None,
        Field(
            pattern=OAUTH_SCOPE_PATTERN,
            max_length=1024,
            description="Scopes to request, space-separated.",
        ),
    ] = None
    extensions: Annotated[
        dict[str, Annotated[str, Field(pattern=OAUTH_EXTENSION_VALUE_PATTERN)]],
        Field(
            max_length=8,
            description="SASL extensions sent with the token (e.g. Confluent Cloud's "
            "logicalCluster and identityPoolId).",
        ),
    ] = {}
    token_endpoint_ca_certificate: SecretKeyRef | None = Field(
        default=None,
        description="PEM CA bundle that signs the token endpoint's certificate; unset: the "
        "image's public CAs.",
    )
    rules = (
        Rule(
            cel="!has(self.extensions) || self.extensions.all(k, "
            f"k.matches('{OAUTH_EXTENSION_KEY}') && k != 'auth')",
            message="extension names are 1-64 letters (RFC 7628), and not auth",
            check=lambda v: all(
                re.fullmatch(OAUTH_EXTENSION_KEY, str(k)) is not None and k != "auth"
                for k in v.get("extensions") or {}
            ),
            field_path=".extensions",
        ),
    )


class AwsMskIam(ApiModel):
    """Amazon MSK's IAM access control. No keys: the pods' workload identity (EKS Pod Identity
    or IRSA on the service account) signs the login."""

    region: Annotated[
        str | None,
        Field(
            pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$",
            description="The region of the STS endpoint that assumes roleArn (only with "
            "roleArn); the login is signed for the region in the brokers' host names.",
        ),
    ] = None
    role_arn: Annotated[
        str | None,
        Field(
            pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@/_-]{1,512}$",
            description="A role to assume with the workload identity before signing; unset: "
            "the workload identity's own role.",
        ),
    ] = None


def _mechanism_in(v: Mapping[str, Any], *mechanisms: str) -> bool:
    return v.get("saslMechanism") in mechanisms


def _mechanism_in_cel(*mechanisms: str) -> str:
    listed = ", ".join(f"'{m}'" for m in mechanisms)
    return f"(has(self.saslMechanism) && self.saslMechanism in [{listed}])"


class KafkaAuth(ApiModel):
    """How the stream authenticates to Kafka; credentials only by reference, mounted as files
    into the stream's pods (never in a ConfigMap, an environment variable or a log)."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="SASL_SSL",
        description="Kafka's security.protocol: TLS (SSL), SASL, both (SASL_SSL) or neither.",
    )
    sasl_mechanism: SaslMechanism | None = Field(
        default=None,
        description="The SASL mechanism, required with a SASL_* protocol: PLAIN or SCRAM-SHA-* "
        "(username and password), OAUTHBEARER (oauthBearer) or AWS_MSK_IAM (awsMskIam).",
    )
    username: SecretKeyRef | None = Field(
        default=None, description="The PLAIN or SCRAM user name, from a Secret."
    )
    password: SecretKeyRef | None = Field(
        default=None, description="The PLAIN or SCRAM password, from a Secret."
    )
    ca_certificate: SecretKeyRef | None = Field(
        default=None,
        description="PEM CA bundle that signs the brokers' certificates; unset: the image's "
        "public CAs.",
    )
    client_certificate: ClientCertificate | None = Field(
        default=None, description="The stream's certificate for mutual TLS (SSL or SASL_SSL)."
    )
    oauth_bearer: OAuthBearer | None = Field(
        default=None, description="OIDC client credentials, with saslMechanism OAUTHBEARER."
    )
    aws_msk_iam: AwsMskIam | None = Field(
        default=None, description="Amazon MSK IAM, with saslMechanism AWS_MSK_IAM ({} is enough)."
    )
    rules = (
        Rule(
            cel="!self.securityProtocol.startsWith('SASL') || has(self.saslMechanism)",
            message="SASL_SSL and SASL_PLAINTEXT need saslMechanism: PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM",
            check=lambda v: (
                not str(v.get("securityProtocol", "SASL_SSL")).startswith("SASL")
                or v.get("saslMechanism") is not None
            ),
            field_path=".securityProtocol",
        ),
        Rule(
            cel="!has(self.saslMechanism) || self.securityProtocol.startsWith('SASL')",
            message="saslMechanism needs securityProtocol SASL_SSL (or SASL_PLAINTEXT)",
            check=lambda v: (
                v.get("saslMechanism") is None
                or str(v.get("securityProtocol", "SASL_SSL")).startswith("SASL")
            ),
            field_path=".saslMechanism",
        ),
        Rule(
            cel=f"!{_mechanism_in_cel(*USER_PASSWORD_MECHANISMS)} || "
            "(has(self.username) && has(self.password))",
            message="PLAIN and SCRAM-SHA-* need username and password (secretKeyRefs)",
            check=lambda v: (
                not _mechanism_in(v, *USER_PASSWORD_MECHANISMS)
                or (v.get("username") is not None and v.get("password") is not None)
            ),
            field_path=".username",
        ),
        Rule(
            cel=f"(!has(self.username) && !has(self.password)) || "
            f"{_mechanism_in_cel(*USER_PASSWORD_MECHANISMS)}",
            message="username and password go only with saslMechanism PLAIN, SCRAM-SHA-256 or "
            "SCRAM-SHA-512",
            check=lambda v: (
                (v.get("username") is None and v.get("password") is None)
                or _mechanism_in(v, *USER_PASSWORD_MECHANISMS)
            ),
            field_path=".username",
        ),
        Rule(
            cel=f"{_mechanism_in_cel('OAUTHBEARER')} == has(self.oauthBearer)",
            message="saslMechanism OAUTHBEARER goes with oauthBearer (token endpoint, client id "
            "and secret), and oauthBearer only with it",
            check=lambda v: _mechanism_in(v, "OAUTHBEARER") == (v.get("oauthBearer") is not None),
            field_path=".oauthBearer",
        ),
        Rule(
            cel=f"{_mechanism_in_cel('AWS_MSK_IAM')} == has(self.awsMskIam)",
            message="saslMechanism AWS_MSK_IAM goes with awsMskIam ({} to use the pods' "
            "workload identity as it is), and awsMskIam only with it",
            check=lambda v: _mechanism_in(v, "AWS_MSK_IAM") == (v.get("awsMskIam") is not None),
            field_path=".awsMskIam",
        ),
        Rule(
            cel=f"!{_mechanism_in_cel('AWS_MSK_IAM')} || self.securityProtocol == 'SASL_SSL'",
            message="AWS_MSK_IAM needs securityProtocol SASL_SSL (MSK's IAM listeners are TLS)",
            check=lambda v: (
                not _mechanism_in(v, "AWS_MSK_IAM")
                or v.get("securityProtocol", "SASL_SSL") == "SASL_SSL"
            ),
            field_path=".securityProtocol",
        ),
        Rule(
            cel="!has(self.clientCertificate) || self.securityProtocol in ['SSL', 'SASL_SSL']",
            message="clientCertificate needs TLS: securityProtocol SSL or SASL_SSL",
            check=lambda v: (
                v.get("clientCertificate") is None
                or v.get("securityProtocol", "SASL_SSL") in ("SSL", "SASL_SSL")
            ),
            field_path=".clientCertificate",
        ),
    )


def _refused_options(v: Mapping[str, Any], refused: Callable[[str], bool]) -> str:
    return ", ".join(k for k in sorted(v.get("options") or {}) if refused(str(k)))


_OPTIONS_SPELLING = (
    "must be kafka.<consumer setting> in Kafka's lowercase spelling (e.g. kafka.fetch.max.bytes, "
    "kafka.client.rack)"
)
_OPTIONS_OWNED = (
    "belong to Deltaflow: the broker list, group and offsets (the checkpoint holds them), "
    "deserializers, the isolation level (spec.source.isolationLevel) and security "
    "(spec.source.auth, whose secrets come from Secrets); remove them"
)


def _starts_with(key: str, prefix: str) -> bool:
    return key.startswith(prefix)


def _owned_option_rules() -> tuple[Rule, ...]:
    """One rule per owned key or prefix, so that the API server's message names it: a message
    built from the map's keys (messageExpression) costs more than CEL's budget allows, as keys
    have no length bound the server can see. The Python check names the exact keys."""

    def none_owned(match: Callable[[str], bool]) -> Callable[[Mapping[str, Any]], bool]:
        def check(v: Mapping[str, Any]) -> bool:
            keys = (str(k) for k in v.get("options") or {})
            return not any(match(k) and kafka_option_owned(k) for k in keys)

        return check

    def explain(v: Mapping[str, Any]) -> str:
        return f"options {_refused_options(v, kafka_option_owned)} {_OPTIONS_OWNED}"

    by_key = tuple(
        Rule(
            cel=f"!has(self.options) || !('{key}' in self.options)",
            message=f"options {key} {_OPTIONS_OWNED}",
            explain=explain,
            check=none_owned(key.__eq__),
            field_path=".options",
        )
        for key in OWNED_KAFKA_OPTIONS
    )
    free = ", ".join(f"'{p}'" for p in FREE_SASL_OPTION_PREFIXES)
    by_prefix = tuple(
        Rule(
            cel=f"!has(self.options) || self.options.all(k, !k.startsWith('{prefix}')"
            + (f" || [{free}].exists(p, k.startsWith(p))" if prefix == "kafka.sasl." else "")
            + ")",
            message=f"options {prefix}*"
            + (" (but for the login's tuning)" if prefix == "kafka.sasl." else "")
            + f" {_OPTIONS_OWNED}",
            explain=explain,
            check=none_owned(functools.partial(_starts_with, prefix=prefix)),
            field_path=".options",
        )
        for prefix in OWNED_KAFKA_OPTION_PREFIXES
    )
    return by_key + by_prefix


_OPTIONS_SECRET = (
    "look like they hold a secret, and the spec lands in a ConfigMap: give credentials in "
    "spec.source.auth as secretKeyRefs"
)


class KafkaSource(ApiModel):
    """The Kafka topic(s) the stream reads."""

    bootstrap_servers: Annotated[
        str, Field(pattern=BOOTSTRAP_PATTERN, max_length=2048, description="host:port[,host:port]")
    ]
    topic: Annotated[
        str | None,
        Field(
            pattern=KAFKA_TOPIC_PATTERN,
            description="The one topic to read (or topicPattern); immutable.",
        ),
    ] = None
    topic_pattern: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=512,
            description="A Java regular expression, searched in each topic name as Spark's "
            "Kafka source does: orders-.* also reads eu-orders-1; ^orders-.*$ reads only names "
            "that start with orders-. Held to the syntax Java and Python read alike: topic "
            "characters, ., [a-z0-9_.-] classes, \\. \\d \\w, (...) and (?:...) one level "
            "deep, |, * + ? {n} {n,} {n,m}, ^ and $.",
        ),
    ] = None
    starting_offsets: Literal["earliest", "latest"] = Field(
        default="earliest",
        description="Where a new stream starts; ignored once it has a checkpoint.",
    )
    max_offsets_per_trigger: Annotated[
        int | None,
        Field(
            ge=1,
            le=100_000_000,
            description="At most this many records a batch, over all partitions (Spark's "
            "maxOffsetsPerTrigger); unset: everything waiting. Bounds a catch-up batch's memory "
            "and time.",
        ),
    ] = None
    min_partitions: Annotated[
        int | None,
        Field(
            ge=1,
            le=MAX_MIN_PARTITIONS,
            description="Spark tasks per batch, at least (Spark's minPartitions): with more than "
            "the topic's partitions, each partition's offset range is split in proportion to its "
            "share, so executors beyond the partition count add capacity and a hot partition is "
            "read by several cores. Default on Kubernetes: 2 per core at scaling.maxExecutors "
            "(executor.cores x maxExecutors x 2); 1 keeps one task per Kafka partition. Writes "
            "stay about 100k records per task whatever the read's task count.",
        ),
    ] = None
    fail_on_data_loss: bool = Field(
        default=True,
        description="Fail loudly when retention deleted offsets the stream had not read yet.",
    )
    auth: KafkaAuth | None = Field(
        default=None, description="Authentication and TLS; unset: PLAINTEXT without credentials."
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="read_committed: records of aborted or open Kafka transactions are never "
        "landed; read_uncommitted also lands those of aborted ones (Kafka's isolation.level).",
    )
    options: Annotated[
        dict[str, Annotated[str, Field(max_length=1024)]],
        Field(
            max_length=32,
            description="Further Kafka consumer settings for Spark's consumers, as Spark users "
            "write them: kafka.fetch.max.bytes, kafka.client.rack, kafka.request.timeout.ms, "
            "kafka.ssl.endpoint.identification.algorithm... Deltaflow's own keys (group, "
            "offsets, deserializers, isolation level, security) are refused.",
        ),
    ] = {}
    rules = (
        Rule(
            cel=f"!has(self.options) || self.options.all(k, {kafka_option_spelled_cel('k')})",
            message=f"options keys {_OPTIONS_SPELLING}",
            explain=lambda v: (
                f"options {_refused_options(v, lambda k: not kafka_option_spelled(k))} "
                f"{_OPTIONS_SPELLING}"
            ),
            check=lambda v: all(kafka_option_spelled(str(k)) for k in v.get("options") or {}),
            field_path=".options",
        ),
        *_owned_option_rules(),
        Rule(
            cel="!has(self.options) || self.options.all(k, !self.options[k].contains('${'))",
            message="options values must not hold ${...}: Kafka's clients would resolve it "
            "from the stream's mounted secret files",
            check=lambda v: not any("${" in str(x) for x in (v.get("options") or {}).values()),
            field_path=".options",
        ),
        Rule(
            cel=f"!has(self.options) || self.options.all(k, !{secret_like_conf_key_cel('k')})",
            message=f"options named like a password, secret, token, credential or key "
            f"{_OPTIONS_SECRET}",
            explain=lambda v: (
                f"options {_refused_options(v, secret_like_conf_key)} {_OPTIONS_SECRET}"
            ),
            check=lambda v: not any(secret_like_conf_key(str(k)) for k in v.get("options") or {}),
            field_path=".options",
        ),
        Rule(
            cel="has(self.topic) != has(self.topicPattern)",
            message="set exactly one of topic or topicPattern",
            check=lambda v: (v.get("topic") is None) != (v.get("topicPattern") is None),
            field_path=".topic",
        ),
        Rule(
            cel=f"!has(self.topicPattern) || {topic_pattern_in_dialect_cel('self.topicPattern')}",
            message="topicPattern must keep to the regular expressions Java (Spark's Kafka "
            "source) and Python (Deltaflow's lag) read alike: topic characters, ., classes such "
            "as [a-z0-9_.-] or [^0-9], escapes \\. \\- \\_ \\d \\D \\w \\W, groups "
            "(...) or (?:...) not nested, |, the quantifiers * + ? {n} {n,} {n,m}, ^ at the start "
            "and $ at the end of an alternative (e.g. ^(orders|payments)-[a-z]{2}$)",
            check=lambda v: (
                v.get("topicPattern") is None or topic_pattern_in_dialect(str(v["topicPattern"]))
            ),
            field_path=".topicPattern",
        ),
        immutable(
            "topic",
            "topic is immutable: the checkpoint is bound to it; create a new "
            "DeltaIngestion (new name, new checkpointPath) to read another topic",
        ),
        immutable(
            "topicPattern",
            "topicPattern is immutable: the checkpoint is bound to it; "
            "create a new DeltaIngestion to read other topics",
        ),
    )


class Format(ApiModel):
    """How record values are parsed; anything that does not parse goes to the dead-letter table."""

    type: Literal["json", "avro", "raw"] = Field(
        description="json: a JSON object per value; avro: an Avro binary record; raw: the bytes "
        "as they are (key and value columns). Immutable."
    )
    schema_: Annotated[
        str | None,
        Field(
            alias="schema",
            min_length=1,
            max_length=65536,
            description="json: a Spark DDL string (id BIGINT NOT NULL, name STRING, ...); avro: "
            "the Avro schema as JSON. Values that do not match go to the dead-letter table.",
        ),
    ] = None
    key_required: bool = Field(default=False, description="Dead-letter records with a null key.")
    max_record_bytes: Annotated[
        int,
        Field(
            ge=1,
            le=104_857_600,
            description="A value larger than this is dead-lettered (record_too_large) unparsed.",
        ),
    ] = 1_048_576
    avro_wire_format: Literal["plain", "confluent"] = Field(
        default="plain",
        description="avro only. plain: each value is one Avro binary record. confluent: the "
        "Confluent serializers' framing, a magic byte 0 and a 4-byte schema id before the record.",
    )
    schema_ids: Annotated[
        list[Annotated[int, Field(ge=0, le=2_147_483_647)]],
        Field(
            max_length=32,
            description="avro with confluent framing (required there): the registry ids "
            "under which spec.format.schema was registered; a value framed with another id is "
            "dead-lettered (read with this schema it would be misread).",
        ),
    ] = []
    rules = (
        Rule(
            cel="self.type == 'avro' || ((!has(self.avroWireFormat) || "
            "self.avroWireFormat == 'plain') && "
            "(!has(self.schemaIds) || size(self.schemaIds) == 0))",
            message="avroWireFormat and schemaIds apply to format.type avro only",
            check=lambda v: (
                v.get("type") == "avro"
                or (v.get("avroWireFormat", "plain") == "plain" and not v.get("schemaIds"))
            ),
            field_path=".avroWireFormat",
        ),
        Rule(
            cel="!has(self.avroWireFormat) || self.avroWireFormat != 'confluent' || "
            "(has(self.schemaIds) && size(self.schemaIds) > 0)",
            message="avroWireFormat confluent needs schemaIds, the registry ids spec.format.schema "
            "was registered under: a value framed with another id would be decoded with this "
            "schema and land misread (fields of the same type swapped, say); find them with the "
            "registry's GET /subjects/<subject>/versions",
            check=lambda v: (
                v.get("avroWireFormat", "plain") != "confluent" or bool(v.get("schemaIds"))
            ),
            field_path=".schemaIds",
        ),
        Rule(
            cel="!has(self.schemaIds) || size(self.schemaIds) == 0 || "
            "(has(self.avroWireFormat) && self.avroWireFormat == 'confluent')",
            message="schemaIds need avroWireFormat: confluent (plain Avro values carry no id)",
            check=lambda v: not v.get("schemaIds") or v.get("avroWireFormat") == "confluent",
            field_path=".schemaIds",
        ),
        Rule(
            cel="self.type == 'raw' || has(self.schema)",
            message="json and avro need a schema (a Spark DDL string for json, an Avro schema "
            "for avro)",
            check=lambda v: v.get("type") == "raw" or v.get("schema") is not None,
            field_path=".schema",
        ),
        immutable(
            "type",
            "format.type is immutable: the checkpoint and table are bound to it; "
            "create a new DeltaIngestion for another format",
        ),
    )


class Storage(ApiModel):
    """Object-store access for s3a:// tables; keys by reference."""

    endpoint: Annotated[
        str | None,
        Field(
            pattern=r"^https?://[^\s]+$",
            description="The S3 API's URL (MinIO, Ceph, ...); unset: AWS S3.",
        ),
    ] = None
    region: Annotated[
        str | None, Field(pattern=r"^[a-z0-9-]{1,64}$", description="The bucket's region.")
    ] = None
    path_style_access: bool = Field(
        default=False,
        description="Address buckets as <endpoint>/<bucket> (most S3-compatible stores) "
        "instead of <bucket>.<endpoint>.",
    )
    access_key_id: SecretKeyRef | None = Field(
        default=None,
        description="The access key id, from a Secret; unset with secretAccessKey: the pod's "
        "workload identity.",
    )
    secret_access_key: SecretKeyRef | None = Field(
        default=None, description="The secret access key, from a Secret."
    )
    rules = (
        Rule(
            cel="has(self.accessKeyId) == has(self.secretAccessKey)",
            message="set both accessKeyId and secretAccessKey, or neither (workload identity)",
            check=lambda v: (v.get("accessKeyId") is None) == (v.get("secretAccessKey") is None),
            field_path=".accessKeyId",
        ),
    )


def _path_rules(field: str, name: str, at_root: str) -> tuple[Rule, ...]:
    """The rules every table or checkpoint path keeps: a scheme the image writes, a folder below
    the bucket (``at_root`` says why), one spelling. ``field`` is the wire name in the model,
    ``name`` the one the messages use; an unset optional path breaks none."""

    def rule(cel: str, message: str, bad: Callable[[str], bool]) -> Rule:
        return Rule(
            cel=f"!has(self.{field}) || {cel}",
            message=message,
            check=lambda v: v.get(field) is None or not bad(str(v[field])),
            field_path=f".{field}",
        )

    path = f"self.{field}"
    return (
        rule(
            path_scheme_supported_cel(path),
            f"{name} must start with {PATH_SCHEMES_TEXT}: the image has no file system for "
            "other schemes (gs://, abfss://, wasbs://, hdfs://, ...)",
            lambda p: not path_scheme_supported(p),
        ),
        rule(
            f"!{path_is_root_cel(path)}",
            f"{name} must be a folder inside the bucket or below / (s3a://lake/orders, not "
            f"s3a://lake): {at_root}",
            path_is_root,
        ),
        rule(
            f"!{path_has_alias_cel(path)}",
            f"{name} must spell each folder once: no '//' (one trailing '/' is fine) and no '.' "
            "or '..' folders (Hadoop reads s3a://lake//a/./b as s3a://lake/a/b)",
            path_has_alias,
        ),
    )


_TABLE_AT_ROOT = (
    "the stream's checkpoint and dead-letter table go beside the table, which would put them "
    "outside the bucket, and VACUUM would judge every other file in it"
)


class DeltaSink(ApiModel):
    """The Delta table the stream appends to."""

    table_path: Annotated[
        str,
        Field(
            pattern=TABLE_PATH_PATTERN,
            max_length=2048,
            description="The Delta table: s3a://bucket/folder, s3://, or file:// (a volume). "
            "Created by the first batch; immutable.",
        ),
    ]
    partition_by: Annotated[
        list[Annotated[str, Field(pattern=COLUMN_PATTERN, max_length=128)]],
        Field(
            max_length=8,
            description="The table's partition columns (columns of the schema or the _kafka_* "
            "metadata columns, not ARRAY, MAP or STRUCT); immutable.",
        ),
    ] = []
    checkpoint_path: Annotated[
        str | None,
        Field(
            pattern=TABLE_PATH_PATTERN,
            max_length=2048,
            description="Default: <table parent>/_checkpoints/<ns>/<name>, never in the table.",
        ),
    ] = None
    kafka_metadata_columns: bool = Field(
        default=True,
        description="Add _kafka_topic, _kafka_partition, _kafka_offset, _kafka_timestamp.",
    )
    optimize_write: bool = Field(
        default=False,
        description="Shuffle each batch by the table's partition columns before writing: one "
        "file per table partition per batch even for large batches, at the cost of a shuffle "
        "(about 10% more CPU per record). Without it, small batches are "
        "written by fewer tasks (no shuffle) and large ones by one task per Kafka partition.",
    )
    storage: Storage | None = Field(
        default=None,
        description="Object-store access for s3a:// paths (the table, the dead-letter table, "
        "the checkpoint).",
    )
    rules = (
        *_path_rules("tablePath", "tablePath", _TABLE_AT_ROOT),
        *_path_rules(
            "checkpointPath",
            "checkpointPath",
            "a checkpoint there shares its folder with every other file of the bucket",
        ),
        Rule(
            cel="!has(self.partitionBy) || "
            "self.partitionBy.all(a, self.partitionBy.exists_one(b, b.lowerAscii() == "
            "a.lowerAscii()))",
            message="partitionBy must name each column once: Delta's column names are "
            "case-insensitive (country and Country are one column)",
            check=lambda v: _unique([ascii_lower(str(c)) for c in v.get("partitionBy") or []]),
            field_path=".partitionBy",
        ),
        Rule(
            cel="self.tablePath == oldSelf.tablePath",
            message="tablePath is immutable: create a new DeltaIngestion to write another table",
            check=lambda _: True,
            field_path=".tablePath",
            transition=True,
        ),
        immutable(
            "checkpointPath",
            "checkpointPath is immutable, also from or to the default: another checkpoint "
            "restarts the stream from startingOffsets (duplicates or a gap); create a new "
            "DeltaIngestion instead",
        ),
        immutable(
            "partitionBy",
            "partitionBy is immutable: the table's partition columns are fixed when it is "
            "created; create a new DeltaIngestion (and table) to partition differently",
        ),
        immutable(
            "kafkaMetadataColumns",
            "kafkaMetadataColumns is immutable: the table's columns would no longer match its "
            "rows; create a new DeltaIngestion (and table) instead",
        ),
    )


class DeadLetter(ApiModel):
    """Where refused records go, with the reason; defaults to ``<tablePath>_dead_letter``."""

    table_path: Annotated[
        str | None,
        Field(
            pattern=TABLE_PATH_PATTERN,
            max_length=2048,
            description="The dead-letter table; default: <sink.tablePath>_dead_letter.",
        ),
    ] = None
    rules = _path_rules(
        "tablePath", "deadLetter.tablePath", "VACUUM of a table there would judge every file of it"
    )


class Freshness(ApiModel):
    """How fresh the table must be: the knob a stream's cost follows (docs/freshness.md)."""

    target_seconds: Annotated[
        int,
        Field(
            ge=1,
            le=86_400,
            description="The p99 of a record's age when it lands (Delta commit time minus Kafka "
            "record timestamp) to keep under. Unless trigger.interval pins it, the trigger "
            "follows from this and the measured batch time: a batch at most once per interval, "
            "none while the topic is idle; a longer target means fewer, cheaper batches. Also "
            "scaling.targetLagSeconds' default.",
        ),
    ] = 60


class Trigger(ApiModel):
    """How often a micro-batch starts: derived from spec.freshness unless pinned here."""

    interval: Annotated[
        str | None,
        Field(
            pattern=DURATION_PATTERN,
            description="A duration (500ms, 10s, 1m): a batch starts at most this often. "
            "Unset: derived from spec.freshness.targetSeconds and the measured batch time.",
        ),
    ] = None

    @property
    def pinned_seconds(self) -> float | None:
        """The pinned interval in seconds; None when the freshness target derives it."""
        return None if self.interval is None else duration_seconds(self.interval)


def duration_seconds(text: str) -> float:
    """A duration of DURATION_PATTERN's form (``10s``, ``500ms``, ``2m``, ``1h``) in seconds."""
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h)", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match[2]]


class Scaling(ApiModel):
    """Executor count: sized on Kafka lag by the operator (``lag``), or set from outside
    (``manual``: ``kubectl scale``, an HPA or KEDA through the /scale subresource), within bounds.
    One owner at a time: ``executors`` may only be set in manual mode. A count of 0 runs Spark in
    local mode inside the driver pod (no executor pods): with ``minExecutors: 0`` in lag mode the
    operator moves the stream between that and executor pods as its lag needs."""

    mode: Literal["lag", "manual"] = Field(
        default="lag",
        description="lag: the operator sizes executors from Kafka lag and measured capacity; "
        "manual: spec.scaling.executors (the /scale subresource) sets the count.",
    )
    executors: Annotated[
        int | None,
        Field(
            ge=0,
            le=1000,
            description="Manual mode only: the executor count (what kubectl scale sets); "
            "minExecutors when unset. 0: Spark runs in local mode inside the driver pod.",
        ),
    ] = None
    min_executors: Annotated[
        int,
        Field(
            ge=0,
            le=1000,
            description="The fewest executors, in either mode. 0: while the driver alone keeps "
            "the lag target, Spark runs in local mode inside the driver pod (no executor pods, "
            "spec.driver.cores task threads); the operator moves the stream to executor pods "
            "(a new driver from the same checkpoint) when it cannot, and back after "
            "scaleDownStabilizationSeconds.",
        ),
    ] = 1
    max_executors: Annotated[
        int, Field(ge=1, le=1000, description="The most executors, in either mode.")
    ] = 4
    target_lag_seconds: Annotated[
        int | None,
        Field(
            ge=1,
            le=86_400,
            description="Lag mode: the backlog's age (records waiting / arrival rate) to keep "
            "under; the operator adds executors when it would not. Unset: "
            "spec.freshness.targetSeconds (one knob, not two that disagree).",
        ),
    ] = None
    scale_up_stabilization_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=3600,
            description="Lag mode: a scale-up must be called for this long before it happens.",
        ),
    ] = 30
    scale_down_stabilization_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=86_400,
            description="Lag mode: scale down to the highest count recommended over this window.",
        ),
    ] = 300

    @property
    def may_run_locally(self) -> bool:
        """Whether a count of 0 (Spark in local mode in the driver pod) is allowed."""
        if self.mode == "manual":
            return (self.executors if self.executors is not None else self.min_executors) == 0
        return self.min_executors == 0

    rules = (
        Rule(
            cel="self.maxExecutors >= self.minExecutors",
            message="maxExecutors must be >= minExecutors",
            check=lambda v: v.get("maxExecutors", 4) >= v.get("minExecutors", 1),
            field_path=".maxExecutors",
        ),
        Rule(
            cel="!has(self.executors) || self.mode == 'manual'",
            message="executors (what kubectl scale sets) is for scaling.mode manual; in mode lag "
            "the operator owns the count: set scaling.mode: manual to scale by hand or with an "
            "HPA, or remove executors",
            check=lambda v: v.get("executors") is None or v.get("mode", "lag") == "manual",
            field_path=".executors",
        ),
        Rule(
            cel="!has(self.executors) || (self.executors >= self.minExecutors && "
            "self.executors <= self.maxExecutors)",
            message="executors must be within minExecutors..maxExecutors: change the bounds first",
            check=lambda v: (
                v.get("executors") is None
                or v.get("minExecutors", 1) <= v["executors"] <= v.get("maxExecutors", 4)
            ),
            field_path=".executors",
        ),
    )


LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"


class Toleration(ApiModel):
    """A Kubernetes toleration (the pod's ``spec.tolerations`` entry)."""

    key: Annotated[
        str | None, Field(max_length=253, description="The taint key; unset with Exists: all.")
    ] = None
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Equal (the default) or Exists."
    )
    value: Annotated[
        str | None, Field(max_length=63, description="The taint value, with Equal.")
    ] = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect to tolerate; unset: all."
    )
    toleration_seconds: int | None = Field(
        default=None, description="NoExecute: how long the pod stays once the taint appears."
    )


def _own_keys_rule(field: str) -> Rule:
    """The map ``field`` (labels or annotations) keeps out of the operator's own keys."""
    return Rule(
        cel=f"!has(self.{field}) || self.{field}.all(k, !{reserved_key_cel('k')})",
        message=f"{field} must not use the prefix {RESERVED_KEY_DOMAIN}/ or "
        f"<sub>.{RESERVED_KEY_DOMAIN}/: the operator's own keys (its channel to the driver, the "
        "driver's spec hash) live there; choose another prefix",
        check=lambda v: not any(reserved_key(str(k)) for k in v.get(field) or {}),
        field_path=f".{field}",
    )


class PodOptions(ApiModel):
    """Where and how the pods of one role (driver, executors) run: what a cluster's placement,
    cost and identity rules need. Deltaflow's own labels win over equal keys here."""

    labels: Annotated[
        dict[str, Annotated[str, Field(pattern=LABEL_VALUE_PATTERN)]],
        Field(max_length=32, description="Extra pod labels (not under deltaflow.io/)."),
    ] = {}
    annotations: Annotated[
        dict[str, str],
        Field(max_length=32, description="Extra pod annotations (not under deltaflow.io/)."),
    ] = {}
    node_selector: Annotated[
        dict[str, Annotated[str, Field(pattern=LABEL_VALUE_PATTERN)]],
        Field(max_length=16, description="The pod's nodeSelector."),
    ] = {}
    tolerations: Annotated[
        list[Toleration], Field(max_length=32, description="The pod's tolerations.")
    ] = []
    affinity: Annotated[
        dict[str, Any],
        Field(
            description="A Kubernetes Affinity (nodeAffinity, podAffinity, podAntiAffinity), "
            "passed to the pod as is; the API server judges it when the pod is created.",
            json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        ),
    ] = {}
    priority_class_name: Annotated[
        str | None,
        Field(pattern=K8S_NAME_PATTERN, max_length=253, description="The pod's PriorityClass."),
    ] = None
    rules = (_own_keys_rule("labels"), _own_keys_rule("annotations"))


class LocalObjectReference(ApiModel):
    """A Secret in the resource's namespace, by name (e.g. an image pull secret)."""

    name: Annotated[
        str, Field(pattern=K8S_NAME_PATTERN, max_length=253, description="The Secret's name.")
    ]


class ServiceAccountOptions(ApiModel):
    """The driver's ServiceAccount (executors and maintenance jobs run without API access)."""

    annotations: Annotated[
        dict[str, str],
        Field(
            max_length=32,
            description="e.g. eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account: a "
            "workload identity for the object store instead of keys in a Secret.",
        ),
    ] = {}
    rules = (_own_keys_rule("annotations"),)


def _core_limit_covers_request(values: Mapping[str, Any]) -> bool:
    limit = values.get("coreLimit")
    if limit is None:
        return True
    request = values.get("coreRequest") or str(values.get("cores", 1))
    return cpu_millicores(str(limit)) >= cpu_millicores(str(request))


class Resources(ApiModel):
    """CPU and memory of one Spark JVM (driver or executor)."""

    cores: Annotated[
        int, Field(ge=1, le=64, description="Spark cores (task slots); the CPU request by default.")
    ] = 1
    core_request: Annotated[
        str | None,
        Field(
            pattern=CPU_QUANTITY_PATTERN,
            max_length=8,
            description="Kubernetes CPU request of the pod (250m, 0.5, 2), when it should differ "
            "from cores: Spark still runs `cores` tasks at once.",
        ),
    ] = None
    core_limit: Annotated[
        str | None,
        Field(
            pattern=CPU_QUANTITY_PATTERN,
            max_length=8,
            description="Kubernetes CPU limit of the pod (500m, 1, 2), at least the request: for "
            "namespaces whose ResourceQuota or LimitRange requires one, or to keep a JVM from "
            "taking a shared node's CPU. Unset: CPU is not capped (a capped JVM is throttled).",
        ),
    ] = None
    pod: PodOptions = PodOptions()
    memory: Annotated[
        str,
        Field(
            pattern=MEMORY_PATTERN,
            max_length=9,
            description="Heap of the JVM, binary units: 512m, 2g, 2G (Spark's form) or 512Mi, "
            "2Gi (Kubernetes'); the pod gets Spark's overhead on top.",
        ),
    ] = "1g"
    rules = (
        Rule(
            cel=f"{MEMORY_MIB_CEL} >= 512 && {MEMORY_MIB_CEL} <= 262144",
            message="memory must be between 512m and 256g",
            check=lambda v: 512 <= memory_mib(str(v.get("memory", "1g"))) <= 262144,
            field_path=".memory",
        ),
        Rule(
            # No string(self.cores): a conversion of unbounded size over-runs the cost budget.
            cel="!has(self.coreLimit) || (has(self.coreRequest) ? "
            "quantity(self.coreLimit).compareTo(quantity(self.coreRequest)) >= 0 : "
            "quantity(self.coreLimit).asApproximateFloat() >= double(self.cores))",
            message="coreLimit must be at least coreRequest (or cores when coreRequest is "
            "unset): the API server refuses a pod whose CPU limit is below its request",
            check=_core_limit_covers_request,
            field_path=".coreLimit",
        ),
    )


class Volume(ApiModel):
    """A PersistentVolumeClaim mounted at one path in the driver, executors and maintenance jobs."""

    name: Annotated[
        str, Field(pattern=DNS_LABEL_PATTERN, max_length=63, description="A DNS label.")
    ]
    claim_name: Annotated[
        str,
        Field(
            pattern=K8S_NAME_PATTERN,
            max_length=253,
            description="PersistentVolumeClaim in the resource's namespace.",
        ),
    ]
    mount_path: Annotated[
        str,
        Field(
            pattern=MOUNT_PATH_PATTERN,
            max_length=512,
            description="Absolute path, the same in every pod; not /, /tmp, /etc/deltaflow, "
            "a directory above them or under them.",
        ),
    ]
    read_only: bool = Field(default=False, description="Mount the volume read-only.")
    rules = (
        Rule(
            cel=volume_name_allowed_cel("self.name"),
            message=f"volume names {', '.join(RESERVED_VOLUME_NAMES)} and spark-* are taken by "
            "the pods' own volumes: choose another name",
            check=lambda v: volume_name_allowed(str(v.get("name", ""))),
            field_path=".name",
        ),
        Rule(
            cel=mount_path_allowed_cel("self.mountPath"),
            message=f"mountPath must not be {', '.join(RESERVED_MOUNT_PATHS)}, a directory above "
            "them or under them: the pods keep their config and scratch space there",
            check=lambda v: mount_path_allowed(str(v.get("mountPath", ""))),
            field_path=".mountPath",
        ),
    )


class OptimizeSchedule(ApiModel):
    """Periodic OPTIMIZE (bin-packing, optional Z-ORDER) of the table."""

    enabled: bool = Field(default=True, description="Run the OPTIMIZE CronJob.")
    schedule: Annotated[
        str,
        Field(pattern=CRON_PATTERN, max_length=128, description="A cron schedule (UTC)."),
    ] = "0 * * * *"
    z_order_by: Annotated[
        list[Annotated[str, Field(pattern=COLUMN_PATTERN, max_length=128)]],
        Field(
            max_length=4,
            description="Columns to Z-ORDER by (not partition columns); empty: bin-packing only.",
        ),
    ] = []
    recent_partitions_only: bool = Field(
        default=False, description="Only compact partitions written since the last OPTIMIZE."
    )


class VacuumSchedule(ApiModel):
    """Periodic VACUUM; the retention keeps what readers and restarts need."""

    enabled: bool = Field(default=True, description="Run the VACUUM CronJob.")
    schedule: Annotated[
        str,
        Field(pattern=CRON_PATTERN, max_length=128, description="A cron schedule (UTC)."),
    ] = "30 3 * * *"
    retention_hours: Annotated[
        int,
        Field(
            ge=1,
            le=87_600,
            description="Files removed from the table longer ago than this are deleted (both "
            "tables); under 168 needs allowUnsafeRetention.",
        ),
    ] = 168
    allow_unsafe_retention: bool = Field(
        default=False,
        description="Allow retentionHours under 168: readers and restarts may lose files.",
    )
    rules = (
        Rule(
            cel="self.retentionHours >= 168 || self.allowUnsafeRetention",
            message="retentionHours under 168 can delete files that readers and stream restarts "
            "still need; raise it or set allowUnsafeRetention: true",
            check=lambda v: (
                v.get("retentionHours", 168) >= 168 or bool(v.get("allowUnsafeRetention", False))
            ),
            field_path=".retentionHours",
        ),
    )


class Maintenance(ApiModel):
    """Table maintenance CronJobs."""

    optimize: OptimizeSchedule = OptimizeSchedule()
    vacuum: VacuumSchedule = VacuumSchedule()


def _tables_apart(spec: Mapping[str, Any]) -> bool:
    dead = (spec.get("deadLetter") or {}).get("tablePath")
    table = (spec.get("sink") or {}).get("tablePath")
    if dead is None or table is None:
        return True
    return places_apart(canonical_path(str(dead)), canonical_path(str(table)))


def _checkpoint_apart(spec: Mapping[str, Any]) -> bool:
    sink = spec.get("sink") or {}
    checkpoint, table = sink.get("checkpointPath"), sink.get("tablePath")
    if checkpoint is None or table is None:
        return True
    place = canonical_path(str(checkpoint))
    dead = (spec.get("deadLetter") or {}).get("tablePath")
    return places_apart(place, canonical_path(str(table))) and places_apart(
        place, dead_letter_place(str(table), None if dead is None else str(dead))
    )


def _z_order_not_partitioned(spec: Mapping[str, Any]) -> bool:
    partitions = {ascii_lower(str(c)) for c in (spec.get("sink") or {}).get("partitionBy") or []}
    optimize = (spec.get("maintenance") or {}).get("optimize") or {}
    return not any(ascii_lower(str(c)) in partitions for c in optimize.get("zOrderBy") or [])


# sparkConf keys the operator or the runtime set, or whose change would split the stream's view
# of its topics: with the deprecated offset reader Spark matches topicPattern against whole topic
# names, while Deltaflow's lag searches it as the default reader does.
# Who may talk to the driver and executors is the operator's: Spark's authentication and
# encryption, the UI and the ports the stream's NetworkPolicies open.
_OWNED_CONF_PREFIXES = (
    "spark.kubernetes.",
    "spark.dynamicAllocation.",
    "spark.authenticate",
    "spark.network.crypto.",
    "spark.network.sasl.",
)
# A pooled stream (spec.placement: pooled) shares its pool's JVM and SparkContext: of Spark's
# settings only session ones are its own (set on its SparkSession), and of those not the ones
# Spark fixes when the JVM starts (StaticSQLConf and Delta's catalog hooks).
POOL_MEMBER_CONF_PREFIXES = ("spark.sql.", "spark.databricks.delta.")
POOL_STATIC_CONF = (
    "spark.sql.extensions",
    "spark.sql.catalog.",
    "spark.sql.catalogImplementation",
    "spark.sql.warehouse.dir",
    "spark.sql.ui.",
    "spark.sql.streaming.ui.",
    "spark.sql.queryExecutionListeners",
    "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.hive.",
    "spark.sql.cache.serializer",
    "spark.sql.globalTempDatabase",
    "spark.sql.event.truncate.length",
    "spark.sql.legacy.sessionInitWithConfigDefaults",
)


def pool_member_conf_key(key: str) -> bool:
    """Whether a pooled stream may set the Spark setting ``key`` on its own session."""
    return key.startswith(POOL_MEMBER_CONF_PREFIXES) and not key.startswith(POOL_STATIC_CONF)


def _pooled_cel(condition: str) -> str:
    return f"!has(self.placement) || self.placement != 'pooled' || ({condition})"


def _pooled(check: Callable[[Mapping[str, Any]], bool]) -> Callable[[Mapping[str, Any]], bool]:
    return lambda v: v.get("placement") != "pooled" or check(v)


# What a pool cannot run (spec.placement: pooled is refused with these; auto keeps such a stream
# on a driver of its own and says why: pool_refusals). Kafka credentials, volumes, the pod's
# placement and identity are not among them: a pool's pod carries them for members that share
# them all (the operator's builders.pool.group_of).
POOLED_RULES = (
    Rule(
        cel=_pooled_cel(
            "!has(self.sparkConf) || self.sparkConf.all(k, ("
            + " || ".join(f"k.startsWith('{p}')" for p in POOL_MEMBER_CONF_PREFIXES)
            + ") && "
            + " && ".join(f"!k.startsWith('{p}')" for p in POOL_STATIC_CONF)
            + ")"
        ),
        message="a pooled stream's sparkConf may hold session settings only (spark.sql.*, "
        "spark.databricks.delta.*, but not the ones Spark fixes at the JVM's start such as "
        "spark.sql.extensions or spark.sql.catalog.*): it shares its pool's JVM and "
        "SparkContext; remove the key or set placement: dedicated",
        check=_pooled(
            lambda v: all(pool_member_conf_key(str(k)) for k in v.get("sparkConf") or {})
        ),
        field_path=".sparkConf",
    ),
)


def pool_refusals(spec: Mapping[str, Any]) -> list[str]:
    """Why a stream with this spec (the CRD's field names) cannot run in a pool, each naming the
    field and the fix; empty when it can."""
    pooled = {**spec, "placement": "pooled"}
    return [f"spec{r.field_path}: {r.message}" for r in POOLED_RULES if not r.check(pooled)]


_OWNED_CONF_KEYS = (
    "spark.master",
    "spark.sql.streaming.kafka.useDeprecatedOffsetFetching",
    "spark.ui.enabled",
    "spark.driver.port",
    "spark.driver.blockManager.port",
    "spark.blockManager.port",
    "spark.driver.bindAddress",
)


class DeltaIngestionSpec(ApiModel):
    """What a data engineer writes: one Kafka source into one Delta table."""

    suspend: bool = Field(default=False, description="Stop the driver; resume from the checkpoint.")
    image: Annotated[
        str | None,
        Field(
            pattern=IMAGE_PATTERN,
            description="Image of the driver, executors and maintenance jobs (a Deltaflow "
            "runtime image, e.g. one with extra jars); default: the operator's own image.",
        ),
    ] = None
    source: KafkaSource
    format: Format
    sink: DeltaSink
    dead_letter: DeadLetter = DeadLetter()
    freshness: Freshness = Freshness()
    trigger: Trigger = Trigger()
    scaling: Scaling = Scaling()
    driver: Resources = Resources()
    executor: Resources = Resources(memory="2g")
    image_pull_secrets: Annotated[
        list[LocalObjectReference],
        Field(max_length=8, description="Secrets to pull spec.image with."),
    ] = []
    service_account: ServiceAccountOptions = ServiceAccountOptions()
    placement: Annotated[
        Literal["dedicated", "pooled", "auto"],
        Field(
            description="Where the stream runs: dedicated (a driver pod of its own, Spark in "
            "local mode or on executor pods as spec.scaling says), pooled (a member of a "
            "shared pool driver of its namespace and object store, with the other small streams: "
            "one JVM for many; its own checkpoint, dead letters, status and metrics; "
            "it shares a pool only with streams of the same object store, Kafka credentials, "
            "ServiceAccount annotations, volumes, image and spec.driver.pod; spec.scaling, "
            "spec.driver's size and spec.executor do not apply there) or auto (starts in "
            "a pool and moves by its measured task time: to a driver of its own after 2 min "
            "busier than a pool member may be, or behind its freshness target for 2 min beyond "
            "its freshness window, back after 15 min quiet; a spec a pool cannot run stays "
            "dedicated, status.placement says why). "
            "A move stops the stream in one place after its batch, then starts it in the other.",
        ),
    ] = "dedicated"
    spark_conf: Annotated[
        dict[str, str],
        Field(
            max_length=64,
            description="Extra Spark properties for the driver and executors. Refused: the keys "
            "the operator owns (spark.kubernetes.*, ports, authentication, the master, ...) "
            "and keys that would hold secrets (this map lands in a ConfigMap).",
        ),
    ] = {}
    maintenance: Maintenance = Maintenance()
    volumes: Annotated[
        list[Volume],
        Field(
            max_length=8,
            description="PersistentVolumeClaims mounted into the driver, the executors and the "
            "maintenance jobs (e.g. for file:// tables).",
        ),
    ] = []
    rules = (
        Rule(
            cel="!has(self.source.auth) || !has(self.source.auth.saslMechanism) || "
            "self.source.auth.saslMechanism != 'AWS_MSK_IAM' || !has(self.sink.storage) || "
            "!has(self.sink.storage.accessKeyId)",
            message="AWS_MSK_IAM signs its login with the pods' AWS identity, and "
            "sink.storage's keys would become it (AWS_ACCESS_KEY_ID in the pods): give the "
            "object store the workload identity too (remove sink.storage.accessKeyId and "
            "secretAccessKey)",
            check=lambda v: (
                ((v.get("source") or {}).get("auth") or {}).get("saslMechanism") != "AWS_MSK_IAM"
                or ((v.get("sink") or {}).get("storage") or {}).get("accessKeyId") is None
            ),
            field_path=".source.auth.saslMechanism",
        ),
        Rule(
            cel=f"!has(self.volumes) || {unique_cel('self.volumes', 'name')}",
            message="volume names must be unique",
            check=lambda v: _unique([str(x.get("name")) for x in v.get("volumes") or []]),
            field_path=".volumes",
        ),
        Rule(
            cel=f"!has(self.volumes) || {unique_cel('self.volumes', 'mountPath')}",
            message="volume mountPaths must be unique",
            check=lambda v: _unique([str(x.get("mountPath")) for x in v.get("volumes") or []]),
            field_path=".volumes",
        ),
        Rule(
            cel="!has(self.sparkConf) || self.sparkConf.all(k, k.startsWith('spark.') && "
            + " && ".join(f"!k.startsWith('{p}')" for p in _OWNED_CONF_PREFIXES)
            + " && !(k in ["
            + ", ".join(f"'{k}'" for k in _OWNED_CONF_KEYS)
            + "]))",
            message="sparkConf keys must start with spark. and must not set spark.master, "
            "spark.kubernetes.* or spark.dynamicAllocation.* (the operator owns those), nor "
            "Spark's authentication, encryption, UI or ports (spark.authenticate*, "
            "spark.network.crypto.*, spark.network.sasl.*, spark.ui.enabled, spark.driver.port, "
            "spark.driver.blockManager.port, spark.blockManager.port, spark.driver.bindAddress: "
            "the operator owns who may talk to the driver and executors), nor "
            "spark.sql.streaming.kafka.useDeprecatedOffsetFetching (that reader matches "
            "topicPattern differently from Deltaflow's lag)",
            check=lambda v: all(
                k.startswith("spark.")
                and not k.startswith(_OWNED_CONF_PREFIXES)
                and k not in _OWNED_CONF_KEYS
                for k in (v.get("sparkConf") or {})
            ),
            field_path=".sparkConf",
        ),
        Rule(
            cel=f"!has(self.sparkConf) || self.sparkConf.all(k, !{secret_like_conf_key_cel('k')})",
            message="sparkConf must hold no secrets (a key naming a password, secret, token, "
            "credential, JAAS config or key, such as spark.hadoop.fs.s3a.secret.key): it is "
            "stored in a ConfigMap; give object-store keys as spec.sink.storage.accessKeyId and "
            "secretAccessKey, Kafka credentials as spec.source.auth (secretKeyRefs)",
            check=lambda v: not any(secret_like_conf_key(str(k)) for k in v.get("sparkConf") or {}),
            field_path=".sparkConf",
        ),
        Rule(
            cel="!has(self.deadLetter) || !has(self.deadLetter.tablePath) || "
            + places_apart_cel(
                canonical_path_cel("self.deadLetter.tablePath"),
                canonical_path_cel("self.sink.tablePath"),
            ),
            message="deadLetter.tablePath must be a table of its own, neither sink.tablePath nor "
            "inside it (nor holding it): VACUUM of one would delete the other's files; leave it "
            "unset for <tablePath>_dead_letter",
            check=_tables_apart,
            field_path=".deadLetter.tablePath",
        ),
        Rule(
            cel="!has(self.sink.checkpointPath) || ("
            + places_apart_cel(
                canonical_path_cel("self.sink.checkpointPath"),
                canonical_path_cel("self.sink.tablePath"),
            )
            + " && "
            + places_apart_cel(
                canonical_path_cel("self.sink.checkpointPath"), dead_letter_place_cel("self")
            )
            + ")",
            message="checkpointPath must be a folder of its own, neither the table nor the "
            "dead-letter table (deadLetter.tablePath, or <tablePath>_dead_letter), not inside "
            "them and not holding them: VACUUM deletes what a table does not know, and a rebuilt "
            "checkpoint replaces its folder; leave it unset for <table "
            "parent>/_checkpoints/<namespace>/<name>",
            check=_checkpoint_apart,
            field_path=".sink.checkpointPath",
        ),
        *POOLED_RULES,
        Rule(
            cel="!has(self.sink.partitionBy) || !has(self.maintenance) || "
            "!has(self.maintenance.optimize) || !has(self.maintenance.optimize.zOrderBy) || "
            "!self.maintenance.optimize.zOrderBy.exists(z, self.sink.partitionBy.exists(p, "
            "p.lowerAscii() == z.lowerAscii()))",
            message="zOrderBy must not name a partitionBy column: Delta Z-orders the files "
            "within each partition, by data columns only",
            check=_z_order_not_partitioned,
            field_path=".maintenance.optimize.zOrderBy",
        ),
    )

    @property
    def target_lag_seconds(self) -> int:
        """The autoscaler's lag target: scaling.targetLagSeconds, else the freshness target."""
        pinned = self.scaling.target_lag_seconds
        return self.freshness.target_seconds if pinned is None else pinned

    def tasks_per_batch(self, *, scaled_executors: bool) -> int | None:
        """Spark's Kafka ``minPartitions`` for this stream: the spec's ``source.minPartitions``,
        else, where the operator scales executors, two tasks per core at ``maxExecutors``
        (Spark's tuning guide asks for 2-3 tasks per core). Without it a topic with fewer
        partitions than cores caps the stream at one task per partition, so executors past that
        add nothing, and a hot partition stays on one core. None: one task per Kafka partition
        (a local run, whose cores do not change)."""
        if self.source.min_partitions is not None:
            return self.source.min_partitions
        if not scaled_executors:
            return None
        tasks = DEFAULT_TASKS_PER_CORE * self.scaling.max_executors * self.executor.cores
        return min(tasks, MAX_MIN_PARTITIONS)


def _unique(values: list[str]) -> bool:
    return len(set(values)) == len(values)


class StatusModel(ApiModel):
    """Base for status objects: written by the operator, read back as JSON (timestamps as text)."""

    model_config = ConfigDict(strict=False, extra="ignore")


class Condition(StatusModel):
    """A status condition in the metav1.Condition shape."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


class DriverStatus(StatusModel):
    """What the operator last saw of the driver pod."""

    pod_name: str | None = None
    phase: str | None = None
    restarts: int = 0
    consecutive_failures: int = 0
    last_failure_reason: str | None = None
    next_start_after: datetime | None = None


class ExecutorStatus(StatusModel):
    """Executors as measured: absent until the driver reported them (unknown is not 0)."""

    desired: int | None = None  # what the operator asked the driver for
    current: int | None = None  # registered with the driver (the /scale status)
    pending: int | None = None  # asked for, not registered yet
    selector: str | None = None  # label selector of the executor pods (for an HPA)


class PartitionLagStatus(StatusModel):
    """One partition's lag."""

    topic: str
    partition: int
    records: int


class LagStatus(StatusModel):
    """How far the stream is behind the topic, as last measured; absent fields are unknown."""

    records: int | None = None
    seconds: float | None = None
    arrival_rate: float | None = Field(default=None, description="records/s into the topic")
    consumption_rate: float | None = Field(default=None, description="records/s committed")
    worst_partitions: list[PartitionLagStatus] = []
    measured_at: datetime | None = None


class FreshnessStatus(StatusModel):
    """How fresh the table is, as the driver measured it (a record's age when it landed)."""

    target_seconds: int | None = None
    p50_seconds: float | None = Field(
        default=None, description="median age at the Delta commit over the window"
    )
    p99_seconds: float | None = Field(
        default=None, description="99th percentile age at the Delta commit over the window"
    )
    window_seconds: float | None = None
    batches: int | None = Field(default=None, description="batches with records in the window")
    records: int | None = Field(default=None, description="records landed in the window")
    trigger_seconds: float | None = Field(
        default=None, description="the trigger interval the driver runs"
    )
    trigger_pinned: bool | None = Field(
        default=None, description="true: spec.trigger.interval; false: derived from the target"
    )
    batch_seconds: float | None = Field(
        default=None,
        description="what a steady batch takes, as measured (the trigger plans around it)",
    )
    measured_at: datetime | None = None


class CostStatus(StatusModel):
    """What the stream cost over the last window, as the driver measured it: CPU of all its
    processes (the driver's Python and JVM, every executor JVM), executor pods held, memory."""

    cpu_seconds_per_hour: float | None = Field(
        default=None, description="CPU-seconds per hour of all the stream's processes"
    )
    executor_seconds_per_hour: float | None = Field(
        default=None, description="executor pods x seconds, per hour"
    )
    cpu_seconds_per_million_records: float | None = None
    executor_seconds_per_million_records: float | None = None
    records: int | None = Field(default=None, description="records landed in the window")
    window_seconds: float | None = None
    driver_memory_bytes: int | None = Field(
        default=None, description="resident memory of the driver's processes"
    )
    executor_memory_bytes: int | None = Field(
        default=None, description="resident memory of the running executors, together"
    )
    measured_at: datetime | None = None


class CapacityStatus(StatusModel):
    """What the driver measured one executor core to do."""

    records_per_core_second: float
    batch_overhead_seconds: float
    batches: int
    fitted: bool | None = Field(
        default=None,
        description="false: records / busy time of batches of one size so far, a lower bound "
        "(each batch's fixed cost counted as work); true: the slope fitted over batches of "
        "different sizes",
    )
    executor_start_seconds: float | None = Field(
        default=None,
        description="seconds from asking for executors to their registration, as last "
        "measured; a scale-up is sized to also clear what piles up meanwhile",
    )


class RecommendationStatus(StatusModel):
    """One round's raw executor recommendation (kept for the stabilization windows)."""

    at: float
    executors: int
    arrival_rate: float


class ScaleActionStatus(StatusModel):
    """The last change of the executor count."""

    at: float
    from_executors: int
    to_executors: int
    expected_rate: float


class AutoscalerStatus(StatusModel):
    """The autoscaler's state: kept in the status so a new operator leader continues it."""

    mode: str | None = None
    verdict: str | None = None
    reason: str | None = None
    capacity: CapacityStatus | None = None
    recommendations: list[RecommendationStatus] = []
    last_action: ScaleActionStatus | None = None
    ineffective_since: float | None = None
    shortfall_since: float | None = None


class OperatorClaimStatus(StatusModel):
    """The operator release that serves this resource (decisions.ownership): others stand back."""

    name: str = Field(
        description="The serving release as <namespace>/<leader Lease name>; another release "
        "watching this namespace stands back while this claim is renewed."
    )
    renewed_at: datetime = Field(
        description="When the serving operator last renewed its claim (every few minutes)."
    )


class PlacementStatus(StatusModel):
    """Where the stream's Spark runs: ``local`` (inside its driver pod, no executor pods),
    ``executors`` (executor pods) or ``pooled`` (a member of the pool driver ``pool``), since
    when and why."""

    mode: Literal["local", "executors", "pooled"]
    pool: str | None = Field(
        default=None, description="The pool driver pod the stream runs in (mode pooled)."
    )
    since: datetime | None = None
    reason: str = ""
    message: str = ""
    wanted: Literal["pooled", "dedicated"] | None = Field(
        default=None,
        description="Where spec.placement auto wants the stream (it moves there after its "
        "batch; the pool keeper drops a member wanted on a driver of its own).",
    )
    pending_since: datetime | None = Field(
        default=None,
        description="Since when the measured load has asked for the other place (auto): the "
        "move comes once it has asked for long enough.",
    )
    decision: str | None = Field(
        default=None,
        description="Why spec.placement auto wants it where it is wanted: what was measured, "
        "or why a pool cannot run it.",
    )


class DeltaIngestionStatus(StatusModel):
    """What the operator reports: is my data flowing?"""

    observed_generation: int | None = None
    conditions: list[Condition] = []
    driver: DriverStatus = DriverStatus()
    executors: ExecutorStatus = ExecutorStatus()
    lag: LagStatus = LagStatus()
    freshness: FreshnessStatus = FreshnessStatus()
    cost: CostStatus = CostStatus()
    autoscaler: AutoscalerStatus = AutoscalerStatus()
    placement: PlacementStatus | None = None
    checkpoint_path: str | None = None
    dead_letter_table_path: str | None = None
    operator: OperatorClaimStatus | None = None


NAME_RULES = (
    Rule(
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
        message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the "
        f"{NAME_LIMITED_BY.names} is named <name>{NAME_LIMITED_BY.suffix} and may have at most "
        f"{NAME_LIMITED_BY.limit}",
        check=lambda v: len(str((v.get("metadata") or {}).get("name", ""))) <= MAX_NAME_LENGTH,
        field_path=".metadata.name",
    ),
    Rule(
        cel="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        message="metadata.name must be a DNS label (lowercase letters, digits, '-'; start with "
        "a letter): it names the driver pod, its Service and the CronJobs",
        check=lambda v: _is_dns_label(str((v.get("metadata") or {}).get("name", ""))),
        field_path=".metadata.name",
    ),
)


def _is_dns_label(name: str) -> bool:
    import re

    return re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None


class DeltaIngestion(ApiModel):
    """The whole resource, as read from a manifest file or from the API server."""

    model_config = ConfigDict(extra="ignore")  # apiVersion/kind/metadata carry more than we read
    api_version: Literal["deltaflow.io/v1alpha1"] = "deltaflow.io/v1alpha1"
    kind: Literal["DeltaIngestion"] = "DeltaIngestion"
    metadata: dict[str, Any]
    spec: DeltaIngestionSpec
    status: DeltaIngestionStatus | None = None
    rules = NAME_RULES

    @property
    def name(self) -> str:
        """metadata.name."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """metadata.namespace (``default`` when the manifest leaves it out)."""
        return str(self.metadata.get("namespace") or "default")
