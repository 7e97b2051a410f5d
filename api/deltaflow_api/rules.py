"""Cross-field rules, each written once for both judges.

A rule carries its CEL expression (emitted into the CRD as ``x-kubernetes-validations``, so the API
server rejects a bad manifest) and a Python predicate over the same plain values (run by the
pydantic validators, so the operator and ``deltaflow run`` judge a manifest identically). The two
are side by side so a change to one is seen next to the other; a property test holds them together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One validation rule on an object of the API."""

    cel: str
    message: str
    check: Callable[[Mapping[str, Any]], bool]
    field_path: str | None = None  # where the API server points the error, e.g. ".maxExecutors"
    transition: bool = False  # compares with oldSelf: only on update, never in pydantic
    # The Python side's message naming the offending values (e.g. the refused keys); the API
    # server says ``message`` (a messageExpression over a map's keys exceeds CEL's cost budget).
    explain: Callable[[Mapping[str, Any]], str] | None = None

    def to_crd(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry for this rule."""
        entry = {"rule": self.cel, "message": self.message}
        # The API server accepts a fieldPath only into properties the schema declares; metadata
        # declares none, so rules on metadata.name carry the field in their message instead.
        if self.field_path and not self.field_path.startswith(".metadata"):
            entry["fieldPath"] = self.field_path
        return entry


def immutable(field: str, message: str) -> Rule:
    """A transition rule: once set, ``field`` keeps its value (set <-> unset also changes it)."""
    return Rule(
        cel=(
            f"has(self.{field}) == has(oldSelf.{field}) && "
            f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
        ),
        message=message,
        check=lambda _: True,
        field_path=f".{field}",
        transition=True,
    )


def memory_mib(value: str) -> int:
    """A memory amount ('512m', '2g', '2G', '512Mi', '2Gi': binary units) in MiB; the pattern
    on the field guarantees the form."""
    digits = len(value) - (2 if value.endswith("i") else 1)
    number, unit = int(value[:digits]), value[digits].lower()
    return number * 1024 if unit == "g" else number


def cpu_millicores(value: str) -> int:
    """A CPU quantity ('250m', '0.5', '2': the field's pattern guarantees the form) in
    millicores."""
    if value.endswith("m"):
        return int(value[:-1])
    whole, _, fraction = value.partition(".")
    return int(whole) * 1000 + int((fraction + "000")[:3])


def _cel_number(suffix: int) -> str:
    return f"int(self.memory.substring(0, size(self.memory) - {suffix}))"


# The same arithmetic in CEL, for the resource bounds rule.
MEMORY_MIB_CEL = (
    f"(self.memory.endsWith('Gi') ? {_cel_number(2)} * 1024 : "
    f"self.memory.endsWith('Mi') ? {_cel_number(2)} : "
    f"(self.memory.endsWith('g') || self.memory.endsWith('G')) ? {_cel_number(1)} * 1024 : "
    f"{_cel_number(1)})"
)


def unique_cel(items: str, field: str) -> str:
    """CEL: no two elements of the list ``items`` share ``field``."""
    return f"{items}.all(a, {items}.exists_one(b, b.{field} == a.{field}))"


# Volume names the pods already use for their own volumes (Spark's start with "spark-").
RESERVED_VOLUME_NAMES = (
    "config",
    "tmp",
    # Kafka's secrets (driver_pod.KAFKA_SECRET_FILES; a unit test holds the two lists together).
    "kafka-ca",
    "kafka-client-cert",
    "kafka-client-key",
    "kafka-key-password",
    "kafka-username",
    "kafka-password",
    "kafka-client-secret",
    "kafka-token-ca",
)
RESERVED_VOLUME_PREFIX = "spark-"


def volume_name_allowed(name: str) -> bool:
    """A user volume must not collide with the pods' own volumes."""
    return name not in RESERVED_VOLUME_NAMES and not name.startswith(RESERVED_VOLUME_PREFIX)


def volume_name_allowed_cel(name: str) -> str:
    """:func:`volume_name_allowed` in CEL, for the expression ``name``."""
    listed = ", ".join(f"'{n}'" for n in RESERVED_VOLUME_NAMES)
    return f"!({name} in [{listed}]) && !{name}.startsWith('{RESERVED_VOLUME_PREFIX}')"


# Where the pods keep their root, scratch space and config: no volume on them, above or below.
RESERVED_MOUNT_PATHS = ("/", "/tmp", "/etc/deltaflow")


def mount_path_allowed(path: str) -> bool:
    """False for a reserved path, a path under one (except under ``/``) or a directory above
    one (``/etc`` would hide ``/etc/deltaflow``). ``path`` is absolute without a trailing '/'."""
    for reserved in RESERVED_MOUNT_PATHS:
        if path == reserved:
            return False
        if reserved != "/" and (path.startswith(f"{reserved}/") or reserved.startswith(f"{path}/")):
            return False
    return True


def mount_path_allowed_cel(path: str) -> str:
    """:func:`mount_path_allowed` in CEL, for the expression ``path``."""
    blocked = []
    for reserved in RESERVED_MOUNT_PATHS:
        blocked.append(f"{path} == '{reserved}'")
        if reserved != "/":
            blocked.append(f"{path}.startsWith('{reserved}/')")
            blocked.append(f"'{reserved}'.startsWith({path} + '/')")
    return f"!({' || '.join(blocked)})"


class RuleViolationError(ValueError):
    """Rules an object breaks, each with its message; keeps each rule so errors can name the
    exact field."""

    def __init__(self, broken: list[tuple[Rule, str]]) -> None:
        super().__init__("; ".join(message for _, message in broken))
        self.broken = broken


def check_rules(rules: tuple[Rule, ...], values: Mapping[str, Any]) -> None:
    """Raise :class:`RuleViolationError` listing every non-transition rule ``values`` break."""
    broken = [
        (r, r.explain(values) if r.explain else r.message)
        for r in rules
        if not r.transition and not r.check(values)
    ]
    if broken:
        raise RuleViolationError(broken)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """CEL's ``lowerAscii()``: ASCII letters lowered, every other character kept (``str.lower``
    also folds non-ASCII letters, which CEL does not)."""
    return text.translate(_ASCII_LOWER)


# --- table and checkpoint paths ------------------------------------------------------------------

# What the runtime image can write: S3 through Hadoop S3A (s3:// is mapped to S3A too), and the
# pods' own file system (a volume from spec.volumes). The image has no gs://, abfss://, wasbs://
# or hdfs:// file system: those would be admitted and then fail at run time.
PATH_SCHEMES = ("s3a://", "s3://", "file:///", "/")
PATH_SCHEMES_TEXT = "s3a:// or s3:// (S3 and S3-compatible stores), file:/// or / (a volume)"


def path_scheme_supported(path: str) -> bool:
    """Whether the image can write ``path``'s scheme."""
    return path.startswith(PATH_SCHEMES)


def path_scheme_supported_cel(path: str) -> str:
    """:func:`path_scheme_supported` in CEL, for the string expression ``path``."""
    return "(" + " || ".join(f"{path}.startsWith('{s}')" for s in PATH_SCHEMES) + ")"


# A bucket or the file system itself, with any number of '/': no folder below it.
_PATH_ROOT = r"^(s3a?://[^/]*|file://)?/*$"


def path_is_root(path: str) -> bool:
    """Whether ``path`` is a bucket's root or the file system's: a table there has its derived
    paths (``<parent>/_checkpoints/...``, ``<table>_dead_letter``) outside the bucket, and its
    VACUUM would judge every other file in the bucket."""
    return re.fullmatch(_PATH_ROOT, path) is not None


def path_is_root_cel(path: str) -> str:
    """:func:`path_is_root` in CEL (``$`` is the end of the text in RE2, as fullmatch wants)."""
    return f"{path}.matches('{_PATH_ROOT}')"


# Matched against the path + '/', so that '$' is not needed (Python's '$' also matches before a
# final newline, RE2's does not): after the scheme (one of three, told apart by their first
# character, so none can be skipped) an empty or '.' or '..' first folder or bucket, or later an
# empty folder ('//' before more text: one trailing '/' is fine) or a '.' or '..' folder.
_PATH_ALIAS = r"^(s3a?://|file:///|/)(/|[.][.]?/|.*(//.|/[.][.]?/))"


def path_has_alias(path: str) -> bool:
    """Whether ``path`` spells a folder in a second way Hadoop would read as the same (repeated
    '/', '.' or '..' segments): one spelling per folder keeps the comparisons of paths exact."""
    return re.match(_PATH_ALIAS, path + "/") is not None


def path_has_alias_cel(path: str) -> str:
    """:func:`path_has_alias` in CEL."""
    return f"({path} + '/').matches('{_PATH_ALIAS}')"


def canonical_path(path: str) -> str:
    """A path as a folder prefix, for comparison: s3a:// = s3://, file:///x = /x, one trailing
    '/'. With :func:`path_has_alias` false this is the only other spelling Hadoop allows."""
    if path.startswith("s3a://"):
        plain = "s3://" + path[len("s3a://") :]
    elif path.startswith("file://"):
        plain = path[len("file://") :]
    else:
        plain = path
    return plain if plain.endswith("/") else plain + "/"


def canonical_path_cel(path: str) -> str:
    """:func:`canonical_path` in CEL, for the string expression ``path``."""
    plain = (
        f"({path}.startsWith('s3a://') ? 's3://' + {path}.substring(6) : "
        f"{path}.startsWith('file://') ? {path}.substring(7) : {path})"
    )
    # No cel.bind: the API server also compiles rules in an environment without it.
    return f"({plain}.endsWith('/') ? {plain} : {plain} + '/')"


def places_apart(a: str, b: str) -> bool:
    """Two canonical paths (:func:`canonical_path`) neither of which is or holds the other."""
    return not a.startswith(b) and not b.startswith(a)


def places_apart_cel(a: str, b: str) -> str:
    """:func:`places_apart` in CEL, for two canonical path expressions."""
    return f"(!{a}.startsWith({b}) && !{b}.startsWith({a}))"


def dead_letter_place(table: str, dead_letter: str | None) -> str:
    """The canonical place of the dead-letter table: ``deadLetter.tablePath``, else
    ``<tablePath>_dead_letter`` (as :func:`~deltaflow_api.identity.identity`)."""
    if dead_letter is not None:
        return canonical_path(dead_letter)
    return canonical_path(table)[:-1] + "_dead_letter/"


def dead_letter_place_cel(spec: str) -> str:
    """:func:`dead_letter_place` in CEL, for the spec expression ``spec``."""
    table = canonical_path_cel(f"{spec}.sink.tablePath")
    return (
        f"(has({spec}.deadLetter) && has({spec}.deadLetter.tablePath) ? "
        f"{canonical_path_cel(f'{spec}.deadLetter.tablePath')} : "
        f"{table}.substring(0, size({table}) - 1) + '_dead_letter/')"
    )


# --- keys the user may not set -------------------------------------------------------------------

# sparkConf lands in a ConfigMap (and in Spark's UI and event log): no secrets there. A key names
# a secret when a word of it does (spark.ssl.keyPassword, spark.authenticate.secret,
# ...fs.s3a.session.token, ...sasl.jaas.config, ...oauth2.credential) or one of its dot-separated
# parts is "key" or "sas" (fs.s3a.access.key, fs.s3a.secret.key, fs.azure.account.key.<account>,
# fs.azure.sas.<container>...); unless its last part says it only points at one or chooses how
# it is used (spark.authenticate.secret.file, fs.s3a.aws.credentials.provider,
# hadoop.security.credential.provider.path, spark.security.credentials.<service>.enabled, ...).
SECRET_WORDS = ("password", "passwd", "secret", "token", "credential", "jaas")
SECRET_PARTS = ("key", "sas")
NOT_SECRET_SUFFIXES = (".file", ".path", ".provider", ".binding", ".mechanism", ".enabled")


def secret_like_conf_key(key: str) -> bool:
    """Whether the sparkConf ``key`` looks like it holds a secret (compared in ASCII lowercase)."""
    lower = ascii_lower(key)
    named = any(w in lower for w in SECRET_WORDS) or any(
        part in SECRET_PARTS for part in lower.split(".")
    )
    return named and not lower.endswith(NOT_SECRET_SUFFIXES)


def secret_like_conf_key_cel(key: str) -> str:
    """:func:`secret_like_conf_key` in CEL, for the string expression ``key``."""
    words = ", ".join(f"'{w}'" for w in SECRET_WORDS)
    parts = ", ".join(f"'{p}'" for p in SECRET_PARTS)
    suffixes = ", ".join(f"'{s}'" for s in NOT_SECRET_SUFFIXES)
    lower = f"{key}.lowerAscii()"
    return (
        f"(([{words}].exists(w, {lower}.contains(w)) || "
        f"{lower}.split('.').exists(p, p in [{parts}])) && "
        f"![{suffixes}].exists(s, {lower}.endsWith(s)))"
    )


# The operator's own label and annotation keys (deltaflow.io/driver-spec-hash, and the scaling
# channel's deltaflow.io/executors-desired and deltaflow.io/driver-report on the driver pod).
RESERVED_KEY_DOMAIN = "deltaflow.io"
# The prefix (what comes before the first '/') is deltaflow.io or ends in .deltaflow.io.
_RESERVED_KEY = r"^([^/]*[.])?deltaflow[.]io/"


def reserved_key(key: str) -> bool:
    """Whether a label or annotation key has the prefix deltaflow.io/ or <sub>.deltaflow.io/
    (in any case: the API server would refuse upper case there anyway)."""
    return re.match(_RESERVED_KEY, ascii_lower(key)) is not None


def reserved_key_cel(key: str) -> str:
    """:func:`reserved_key` in CEL, for the string expression ``key``."""
    return f"{key}.lowerAscii().matches('{_RESERVED_KEY}')"


# --- topicPattern: one regex dialect -------------------------------------------------------------

# Spark's Kafka source compiles spec.source.topicPattern with java.util.regex and reads every
# topic the pattern is found in (Matcher.find, its default offset reader); the driver's lag
# measure searches it with Python's re. The two agree on this subset (checked against the JVM by
# tests/integration/runtime/test_topic_pattern_dialect.py), which admission holds patterns to:
# topic characters, '.', escapes \. \- \_ \d \D \w \W, classes of topic characters and
# alphanumeric ranges (optionally negated, '-' first or last), groups (...) or (?:...) one level
# deep, '|', the greedy quantifiers * + ? {n} {n,} {n,m}, '^' starting and '$' ending an
# alternative. Left out: what one of them reads differently or not at all (Java's \Q..\E, class
# intersections and nested classes, possessive and inline-flag syntax, Python's {,n}, a literal
# '{'), and what cannot match a topic name anyway.
_ESCAPE = r"\\[.\-_dDwW]"
_CLASS_ITEM = rf"([A-Za-z0-9]-[A-Za-z0-9]|[A-Za-z0-9._]|{_ESCAPE})"
_ATOM = rf"([A-Za-z0-9_-]|[.]|{_ESCAPE}|\[\^?-?{_CLASS_ITEM}+-?\])"
_QUANTIFIER = r"([*+?]|\{[0-9]{1,3}(,[0-9]{0,3})?\})"
_PIECE = rf"{_ATOM}{_QUANTIFIER}?"
_GROUP = rf"\((\?:)?({_PIECE})*(\|({_PIECE})*)*\){_QUANTIFIER}?"
_ALTERNATIVE = rf"\^?({_PIECE}|{_GROUP})*\$?"
TOPIC_PATTERN_DIALECT = rf"^{_ALTERNATIVE}(\|{_ALTERNATIVE})*$"


def topic_pattern_in_dialect(pattern: str) -> bool:
    """Whether ``pattern`` keeps to the regex subset Java and Python read alike."""
    return re.fullmatch(TOPIC_PATTERN_DIALECT, pattern) is not None


def topic_pattern_in_dialect_cel(pattern: str) -> str:
    """:func:`topic_pattern_in_dialect` in CEL (a raw string: the backslashes are the regex's)."""
    return f"{pattern}.matches(r'{TOPIC_PATTERN_DIALECT}')"


# --- source.options: Kafka consumer settings -----------------------------------------------------

# Spark hands every ``kafka.<setting>`` option to its Kafka consumers. Kafka spells its settings
# in lowercase, and Spark lowercases option keys, so a key in another case could silently
# shadow or be shadowed: only the lowercase spelling is admitted.
KAFKA_OPTION_KEY = r"^kafka[.][a-z0-9][a-z0-9._-]{0,126}$"
# Settings Deltaflow sets itself: the broker list and topic are the spec's; the group, offsets
# and commits are the checkpoint's (a commit group is written after each Delta commit); the
# deserializers are Spark's; the isolation level is spec.source.isolationLevel; the security
# settings come from spec.source.auth, with their secrets mounted from Secrets.
OWNED_KAFKA_OPTIONS = (
    "kafka.bootstrap.servers",
    "kafka.group.id",
    "kafka.group.instance.id",
    "kafka.group.protocol",
    "kafka.enable.auto.commit",
    "kafka.auto.commit.interval.ms",
    "kafka.auto.offset.reset",
    "kafka.key.deserializer",
    "kafka.value.deserializer",
    "kafka.interceptor.classes",
    "kafka.isolation.level",
    "kafka.security.protocol",
    "kafka.security.providers",
    "kafka.ssl.key.password",
    "kafka.ssl.engine.factory.class",
)
OWNED_KAFKA_OPTION_PREFIXES = (
    "kafka.ssl.keystore.",
    "kafka.ssl.truststore.",
    "kafka.config.providers",
    "kafka.sasl.",
)
# Tuning of the SASL login that spec.source.auth configures, left to the user.
FREE_SASL_OPTION_PREFIXES = (
    "kafka.sasl.login.refresh.",
    "kafka.sasl.login.connect.timeout.ms",
    "kafka.sasl.login.read.timeout.ms",
    "kafka.sasl.login.retry.backoff.",
    "kafka.sasl.oauthbearer.scope.claim.name",
    "kafka.sasl.oauthbearer.sub.claim.name",
    "kafka.sasl.oauthbearer.header.urlencode",
    "kafka.sasl.oauthbearer.clock.skew.seconds",
)


def kafka_option_spelled(key: str) -> bool:
    """Whether ``key`` is ``kafka.<setting>`` in Kafka's lowercase spelling."""
    return re.fullmatch(KAFKA_OPTION_KEY, key) is not None


def kafka_option_owned(key: str) -> bool:
    """Whether Deltaflow sets ``key`` itself (compared in ASCII lowercase)."""
    lower = ascii_lower(key)
    if lower in OWNED_KAFKA_OPTIONS:
        return True
    owned = lower.startswith(OWNED_KAFKA_OPTION_PREFIXES)
    return owned and not lower.startswith(FREE_SASL_OPTION_PREFIXES)


def kafka_option_spelled_cel(key: str) -> str:
    """:func:`kafka_option_spelled` in CEL."""
    return f"{key}.matches('{KAFKA_OPTION_KEY}')"


def kafka_option_owned_cel(key: str) -> str:
    """:func:`kafka_option_owned` in CEL."""
    lower = f"{key}.lowerAscii()"
    keys = ", ".join(f"'{k}'" for k in OWNED_KAFKA_OPTIONS)
    prefixes = ", ".join(f"'{p}'" for p in OWNED_KAFKA_OPTION_PREFIXES)
    free = ", ".join(f"'{p}'" for p in FREE_SASL_OPTION_PREFIXES)
    return (
        f"({lower} in [{keys}] || ([{prefixes}].exists(p, {lower}.startsWith(p)) && "
        f"![{free}].exists(p, {lower}.startsWith(p))))"
    )
