"""Parsing and routing: every Kafka record is either a table row or a dead letter with a reason.

All transforms here are pure DataFrame -> DataFrame functions. :func:`route` adds two internal
columns to the Kafka rows: the parsed value and the machine-readable reason a record is refused
(null when valid). Routing is on that reason, never on "the parsed row looks fine": in PERMISSIVE
mode Spark turns a corrupt JSON record into a row of nulls (and an empty value into a null struct),
and a corrupt Avro record into a struct of nulls, which would otherwise land in the table.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from deltaflow_api.v1alpha1 import DeltaSink, Format
from deltaflow_runtime.errors import InvalidSpecError
from deltaflow_runtime.jvm import column as _column
from deltaflow_runtime.jvm import expression as _expr
from deltaflow_runtime.jvm import java_udf as _java_udf
from deltaflow_runtime.jvm import jvm as _jvm

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType


class Reason(StrEnum):
    """Why a record went to the dead-letter table (stable, machine-readable)."""

    TOMBSTONE = "tombstone"  # null value
    RECORD_TOO_LARGE = "record_too_large"  # value over spec.format.maxRecordBytes
    MISSING_KEY = "missing_key"  # null key with spec.format.keyRequired
    INVALID_UTF8 = "invalid_utf8"  # json/raw value that is not UTF-8
    MALFORMED_JSON = "malformed_json"  # not one JSON object
    SCHEMA_MISMATCH = "schema_mismatch"  # a JSON field does not fit its type in the schema
    MISSING_REQUIRED_FIELD = "missing_required_field"  # a NOT NULL field is absent or null
    MALFORMED_AVRO = "malformed_avro"  # does not decode with the Avro schema


# Priority: the first reason that applies is the one recorded.
REASONS: tuple[Reason, ...] = tuple(Reason)

METADATA_COLUMNS: tuple[str, ...] = (
    "_kafka_topic",
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
)
DEAD_LETTER_COLUMNS: tuple[str, ...] = (
    *METADATA_COLUMNS,
    "key",
    "value",
    "reason",
    "detail",
    "batch_id",
    "dead_lettered_at",
)

# Internal columns of a routed DataFrame; never written.
PARSED = "__deltaflow_parsed"
REASON = "__deltaflow_reason"
TEXT = "__deltaflow_text"
PRE_REASON = "__deltaflow_pre_reason"
CORRUPT = "__deltaflow_corrupt_record"
DETAIL = "__deltaflow_detail"
CHECK = "__deltaflow_check"  # StrictJson's refusal, "<reason>\t<detail>"; null when fine

# Spark's own JSON options, as strict as the check (belt and braces: the check runs first).
STRICT_JSON_OPTIONS = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
# Confluent's wire format: magic byte 0, the schema id (4 bytes, big-endian), the Avro record.
CONFLUENT_HEADER_BYTES = 5


# Bumped whenever the runtime routes the same value under the same spec differently (2: the
# strict JSON and Avro body checks): a batch half written by the old routing must not be
# finished by the new one (see routing_fingerprint).
ROUTING_VERSION = 3


def routing_fingerprint(spec: ParseSpec) -> str:
    """What decides where a record goes, hashed: recorded with every commit, so a batch replayed
    after a crash is finished only by the routing that started it (a record can then never land
    in both tables, or in neither)."""
    decided_by = {
        "routing": ROUTING_VERSION,
        "format": spec.format,
        "schema": spec.value_schema.json() if spec.value_schema is not None else None,
        "required": list(spec.required),
        "avroSchema": spec.avro_schema,
        "keyRequired": spec.key_required,
        "maxRecordBytes": spec.max_record_bytes,
        "avroConfluent": spec.avro_confluent,
        "avroSchemaIds": list(spec.avro_schema_ids),
    }
    text = json.dumps(decided_by, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SchemaError(InvalidSpecError):
    """The spec's schema (or partitioning) cannot work; the message names the field."""


@dataclass(frozen=True)
class ParseSpec:
    """What routing needs to know, resolved once from the spec at start."""

    format: Literal["json", "avro", "raw"]
    value_schema: StructType | None  # the table's value columns (json/avro), all nullable
    required: tuple[str, ...]  # top-level fields that must be present and non-null
    avro_schema: str | None
    avro_all_null: bytes | None  # the encoding of a valid record whose fields are all null
    key_required: bool
    max_record_bytes: int
    metadata_columns: bool
    avro_confluent: bool = False  # values framed as magic byte 0 + 4-byte schema id + record
    avro_schema_ids: tuple[int, ...] = ()  # accepted schema ids (confluent); empty: any
    # The stream's session time zone, which from_json reads zone-less timestamps in: its own
    # session's (in a stream pool not the process's active session).
    time_zone: str = "UTC"


def avro_required_fields(avro_schema: str) -> tuple[str, ...]:
    """Top-level fields of an Avro record schema that cannot be null (not a union with null)."""
    record = json.loads(avro_schema)
    if not isinstance(record, dict) or record.get("type") != "record":
        raise SchemaError("spec.format.schema: the Avro schema must be a record")
    required = []
    for field in record.get("fields", []):
        kind = field["type"]
        nullable = kind == "null" or (isinstance(kind, list) and "null" in kind)
        if not nullable:
            required.append(str(field["name"]))
    return tuple(required)


def avro_all_null_encoding(avro_schema: str) -> bytes | None:
    """Avro binary of a record whose fields are all null, or None if some field cannot be null.

    Each nullable field is a union; null is written as the zig-zag varint index of its branch.
    """
    record = json.loads(avro_schema)
    out = bytearray()
    for field in record.get("fields", []):
        kind = field["type"]
        if kind == "null":
            continue  # the null type takes no bytes
        if not (isinstance(kind, list) and "null" in kind):
            return None
        index = kind.index("null")
        out.append((index << 1) & 0x7F)  # unions never have 64 branches: one byte
    return bytes(out)


def _check_columns(
    columns: StructType, sink: DeltaSink, source_field: str, *, nested_not_null: bool = True
) -> None:
    """Refuse a table Delta cannot write (see :mod:`deltaflow_runtime.table_schema`)."""
    from deltaflow_runtime.table_schema import schema_problems

    problems = schema_problems(
        columns,
        field=source_field,
        metadata=METADATA_COLUMNS if sink.kafka_metadata_columns else (),
        partition_by=sink.partition_by,
        nested_not_null=nested_not_null,
    )
    if problems:
        raise SchemaError("; ".join(problems))


def output_columns(spec: ParseSpec) -> list[str]:
    """The table's columns, in order."""
    if spec.format == "raw":
        value_columns = ["key", "value"]
    else:
        assert spec.value_schema is not None
        value_columns = list(spec.value_schema.fieldNames())
    return value_columns + (list(METADATA_COLUMNS) if spec.metadata_columns else [])


def parse_spec(spark: SparkSession, fmt: Format, sink: DeltaSink) -> ParseSpec:
    """Resolve the spec's format into a :class:`ParseSpec`; raise SchemaError naming the field."""
    from pyspark.errors import PySparkException
    from pyspark.sql.types import BinaryType, DataType, StructField, StructType

    common: dict[str, Any] = {
        "key_required": fmt.key_required,
        "max_record_bytes": fmt.max_record_bytes,
        "metadata_columns": sink.kafka_metadata_columns,
        "time_zone": spark.conf.get("spark.sql.session.timeZone") or "UTC",
    }
    if fmt.type == "raw":
        spec = ParseSpec("raw", None, (), None, None, **common)
        raw = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
        _check_columns(raw, sink, "spec.format.type")
        return spec
    if fmt.type == "json":
        try:
            parsed = DataType.fromDDL(str(fmt.schema_))
        except PySparkException as error:
            message = str(error).splitlines()[0]
            raise SchemaError(f"spec.format.schema: not a Spark DDL schema: {message}") from None
        if not isinstance(parsed, StructType):
            raise SchemaError("spec.format.schema: must list fields, e.g. 'id BIGINT, name STRING'")
        required = tuple(f.name for f in parsed.fields if not f.nullable)
        nullable = StructType.fromJson(parsed.jsonValue())
        for field in nullable.fields:
            field.nullable = True
        # The JSON parse does not enforce NOT NULL below the top level (see table_schema).
        _check_columns(parsed, sink, "spec.format.schema", nested_not_null=False)
        return ParseSpec("json", nullable, required, None, None, **common)
    avro_schema = str(fmt.schema_)
    try:
        required = avro_required_fields(avro_schema)
        all_null = avro_all_null_encoding(avro_schema)
        value_schema = _avro_struct(spark, avro_schema)
    except (ValueError, KeyError, TypeError) as error:
        raise SchemaError(f"spec.format.schema: not an Avro record schema: {error}") from None
    except PySparkException as error:
        message = str(error).splitlines()[0]
        raise SchemaError(f"spec.format.schema: not a valid Avro schema: {message}") from None
    _check_columns(value_schema, sink, "spec.format.schema")
    return ParseSpec(
        "avro",
        value_schema,
        required,
        avro_schema,
        all_null,
        **common,
        avro_confluent=fmt.avro_wire_format == "confluent",
        avro_schema_ids=tuple(fmt.schema_ids),
    )


def _avro_struct(spark: SparkSession, avro_schema: str) -> StructType:
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import StructType

    empty = spark.createDataFrame([], "value BINARY")
    decoded = empty.select(from_avro("value", avro_schema).alias("r")).schema["r"].dataType
    if not isinstance(decoded, StructType):
        raise SchemaError("spec.format.schema: the Avro schema must be a record")
    return StructType.fromJson(decoded.jsonValue())


def _lit_reason(reason: Reason) -> Column:
    from pyspark.sql import functions as F  # noqa: N812

    return F.lit(reason.value)


def _pre_reason(spec: ParseSpec, check_utf8: bool) -> Column:
    """Checks that need no parsing, in priority order (null when all pass)."""
    from pyspark.sql import functions as F  # noqa: N812

    value = F.col("value")
    reason = F.when(value.isNull(), _lit_reason(Reason.TOMBSTONE)).when(
        F.octet_length(value) > F.lit(spec.max_record_bytes), _lit_reason(Reason.RECORD_TOO_LARGE)
    )
    if spec.key_required:
        reason = reason.when(F.col("key").isNull(), _lit_reason(Reason.MISSING_KEY))
    if check_utf8:
        reason = reason.when(~F.is_valid_utf8(F.col(TEXT)), _lit_reason(Reason.INVALID_UTF8))
    return reason


def _field(name: str) -> Column:
    from pyspark.sql import functions as F  # noqa: N812

    return F.col(PARSED).getField(name)


KAFKA_COLUMNS: tuple[str, ...] = ("key", "value", "topic", "partition", "offset", "timestamp")


def route(records: DataFrame, spec: ParseSpec) -> DataFrame:
    """Kafka rows -> the same rows plus the parsed value and the refusal reason (null if valid).

    Parsing runs once per record, in its own projection, and only on records that passed the
    cheap checks (null value, size, key; then UTF-8, the strict check's first question for JSON):
    an oversized record is never parsed.
    """
    return _apply(records, _route_stages(spec))


def _apply(records: DataFrame, stages: Sequence[tuple[str, Column]]) -> DataFrame:
    """The Kafka rows with each stage's column added in order (a later stage may use, or
    replace, an earlier one's)."""
    staged = records.select(*KAFKA_COLUMNS)
    for name, column in stages:
        staged = staged.withColumn(name, column)
    return staged


def _route_stages(spec: ParseSpec) -> list[tuple[str, Column]]:
    """The columns :func:`route` adds, in order: they depend on the spec alone."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import StringType, StructField, StructType

    stages: list[tuple[str, Column]] = []
    if spec.format == "raw":
        stages.append((TEXT, F.col("value").cast("string")))
        stages.append((REASON, _pre_reason(spec, check_utf8=True)))
        stages.append((PARSED, F.lit(None)))
        return stages
    assert spec.value_schema is not None
    if spec.format == "json":
        stages.append((TEXT, F.col("value").cast("string")))
        # UTF-8 validity is the strict check's first question (it answers faster than Spark's
        # is_valid_utf8), still in the same priority: after the cheap checks, before the rest.
        stages.append((PRE_REASON, _pre_reason(spec, check_utf8=False)))
        # The strict check first (trailing data, duplicate keys, numbers for timestamps, ...:
        # what from_json would read differently from what was sent), from_json only on what
        # it accepted.
        check = strict_json(spec.value_schema)
        stages.append((CHECK, F.when(F.col(PRE_REASON).isNull(), check)))
        with_corrupt = StructType([*spec.value_schema.fields, StructField(CORRUPT, StringType())])
        options = {
            "mode": "PERMISSIVE",
            "columnNameOfCorruptRecord": CORRUPT,
            **STRICT_JSON_OPTIONS,
        }
        # from_json's own parser over the bytes: it reads them as from_json does once the checks
        # above accepted them (valid UTF-8, no byte order mark, no leading NUL).
        parsed = F.when(
            F.col(PRE_REASON).isNull() & F.col(CHECK).isNull(),
            from_json_bytes(with_corrupt, options, spec.time_zone),
        )
        stages.append((PARSED, parsed))
        reason = (
            F.when(F.col(PRE_REASON).isNotNull(), F.col(PRE_REASON))
            .when(F.col(CHECK).isNotNull(), F.substring_index(F.col(CHECK), "\t", 1))
            # The check accepted it, so from_json cannot fail to parse it; if it ever did, the
            # record is refused, never landed as a row of nulls.
            .when(F.col(PARSED).isNull(), _lit_reason(Reason.MALFORMED_JSON))
            .when(_field(CORRUPT).isNotNull(), _lit_reason(Reason.SCHEMA_MISMATCH))
        )
    else:
        stages.append((PRE_REASON, _pre_reason(spec, check_utf8=False)))
        body, frame = _avro_body(spec)
        # CHECK holds "malformed_avro\t<detail>": the framing problem, else why the body is not
        # exactly one record with every length bounded by its bytes. from_avro decodes only
        # bodies that passed: its decoder allocates what a length prefix declares (a 5-byte value
        # can ask for gigabytes) and ignores bytes after the record.
        body_problem = F.concat(
            F.lit(f"{Reason.MALFORMED_AVRO.value}\t"), avro_body_check(str(spec.avro_schema), body)
        )
        stages.append((CHECK, F.when(F.col(PRE_REASON).isNull(), F.coalesce(frame, body_problem))))
        decoded = from_avro(body, str(spec.avro_schema), {"mode": "PERMISSIVE"})
        stages.append((PARSED, F.when(F.col(PRE_REASON).isNull() & F.col(CHECK).isNull(), decoded)))
        names = spec.value_schema.fieldNames()
        all_null = F.lit(True)
        for name in names:
            all_null = all_null & _field(name).isNull()
        # PERMISSIVE decoding yields a struct of nulls for a record it cannot decode (the walk
        # checks the layout, not every value): tell it from a valid all-null record by its exact
        # encoding.
        all_null_valid = (
            body == F.lit(spec.avro_all_null) if spec.avro_all_null is not None else F.lit(False)
        )
        malformed = F.col(PARSED).isNull() | (all_null & ~all_null_valid)
        for name in spec.required:
            malformed = malformed | _field(name).isNull()
        reason = (
            F.when(F.col(PRE_REASON).isNotNull(), F.col(PRE_REASON))
            .when(F.col(CHECK).isNotNull(), _lit_reason(Reason.MALFORMED_AVRO))
            .when(malformed, _lit_reason(Reason.MALFORMED_AVRO))
        )
    if spec.format == "json" and spec.required:
        missing = F.lit(False)
        for name in spec.required:
            missing = missing | _field(name).isNull()
        reason = reason.when(missing, _lit_reason(Reason.MISSING_REQUIRED_FIELD))
    stages.append((REASON, reason))
    return stages


def strict_json(schema: StructType) -> Column:
    """The strict check's verdict on the raw value (spark_runtime/jvm's
    ``io.deltaflow.json.StrictJson``): null when it is valid UTF-8 holding one strict JSON
    object that fits ``schema``, else "<reason>\t<detail>"."""
    from pyspark.sql import functions as F  # noqa: N812

    check = _jvm().io.deltaflow.json.StrictJson(schema.json())
    return _java_udf(check, "deltaflow_strict_json", F.col("value"))


def avro_body_check(avro_schema: str, body: Column) -> Column:
    """Null when ``body`` is exactly one record of ``avro_schema`` with every length and count
    bounded by the bytes that remain, else why not (spark_runtime/jvm's
    ``io.deltaflow.avro.AvroBody``): run before from_avro, whose decoder allocates what a length
    prefix declares, and which ignores bytes after the record."""
    check = _jvm().io.deltaflow.avro.AvroBody(avro_schema)
    return _java_udf(check, "deltaflow_avro_body", body)


def from_json_bytes(schema: StructType, options: dict[str, str], time_zone: str) -> Column:
    """``from_json(value cast as string, schema, options)`` (PERMISSIVE), reading the value's
    bytes as UTF-8 directly (spark_runtime/jvm's ``io.deltaflow.json.FromJsonBytes``): the same
    parser, options and session time zone, without Jackson's slower character path. Only for
    values that are valid UTF-8 with no byte order mark and no NUL in their first four bytes
    (what the cheap checks and :func:`strict_json` accept): on others the two read different
    characters."""
    from pyspark.sql import functions as F  # noqa: N812

    jvm: Any = _jvm()
    java_options = jvm.java.util.HashMap()
    for name, value in options.items():
        java_options.put(name, value)
    schema_json = schema.json()
    parser = jvm.io.deltaflow.json.FromJsonBytes(schema_json, java_options, time_zone)
    expressions = jvm.org.apache.spark.sql.catalyst.expressions
    types = jvm.org.apache.spark.sql.types
    target = expressions.Literal(parser, types.ObjectType(parser.getClass()))
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    arguments = converters.asScala(jvm.java.util.List.of(_expr(F.col("value")))).toList()
    no_casts = converters.asScala(jvm.java.util.ArrayList()).toList()
    data_type = types.DataType.fromJson(schema_json)
    # Invoke(target, method, type, arguments, input types, propagateNull, returnNullable,
    # deterministic): a null value is null without a call.
    invoke = expressions.objects.Invoke(
        target, "parse", data_type, arguments, no_casts, True, True, True
    )
    return _column(invoke)


def _avro_body(spec: ParseSpec) -> tuple[Column, Column]:
    """The Avro record's bytes, and why the value's framing is wrong ("malformed_avro\t..."; null
    when it is fine). Plain values are the record; Confluent-framed ones carry a 5-byte header."""
    from pyspark.sql import functions as F  # noqa: N812

    value = F.col("value")
    if not spec.avro_confluent:
        return value, F.lit(None).cast("string")
    prefix = f"{Reason.MALFORMED_AVRO.value}\t"
    framed = (F.octet_length(value) >= CONFLUENT_HEADER_BYTES) & (
        F.hex(F.substring(value, 1, 1)) == F.lit("00")
    )
    problem = F.when(
        ~framed,
        F.lit(
            f"{prefix}not in the Confluent wire format (magic byte 0, a 4-byte schema id, the "
            "record), as spec.format.avroWireFormat says"
        ),
    )
    if spec.avro_schema_ids:
        schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10)
        ids = ", ".join(str(i) for i in spec.avro_schema_ids)
        problem = problem.when(
            ~schema_id.cast("bigint").isin(list(spec.avro_schema_ids)),
            F.concat(
                F.lit(f"{prefix}framed with schema id "),
                schema_id,
                F.lit(
                    f", not one of spec.format.schemaIds ({ids}): read with spec.format.schema "
                    "it would be misread"
                ),
            ),
        )
    body = F.substring(value, CONFLUENT_HEADER_BYTES + 1, 1 << 30)
    return body, problem


def _metadata() -> list[Column]:
    from pyspark.sql import functions as F  # noqa: N812

    return [
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
    ]


def split(routed: DataFrame, spec: ParseSpec) -> DataFrame:
    """A routed frame narrowed to what the two writes take: the reason, the Kafka metadata, the
    parsed value (valid rows only), and the raw bytes and the detail (refused rows only). The
    table pass observes and filters it; the dead-letter pass caches its refused rows for a
    count and the write.
    """
    return routed.select(*_split_columns(spec))


def _split_columns(spec: ParseSpec) -> list[Column]:
    """The columns of :func:`split`."""
    from pyspark.sql import functions as F  # noqa: N812

    refused = F.col(REASON).isNotNull()
    columns = [
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp"),
        F.col(REASON),
        # A raw table keeps the key; otherwise only a dead letter needs it.
        F.col("key") if spec.format == "raw" else F.when(refused, F.col("key")).alias("key"),
        F.when(refused, F.col("value")).alias("value"),
        F.when(refused, _detail(spec)).alias(DETAIL),
    ]
    if spec.format == "raw":
        columns.append(F.when(~refused, F.col(TEXT)).alias(TEXT))
    else:
        assert spec.value_schema is not None
        columns.extend(
            F.when(~refused, _field(name)).alias(_value_column(i))
            for i, name in enumerate(spec.value_schema.fieldNames())
        )
    return columns


def _value_column(index: int) -> str:
    """The split frame's column holding the value's field number ``index`` (by position: a
    field name may hold any character)."""
    return f"__deltaflow_value_{index}"


def valid_rows(split_rows: DataFrame, spec: ParseSpec) -> DataFrame:
    """The table rows of a :func:`split` frame: value columns then the Kafka metadata columns."""
    from pyspark.sql import functions as F  # noqa: N812

    return split_rows.where(F.col(REASON).isNull()).select(*_valid_columns(spec))


def _valid_columns(spec: ParseSpec) -> list[Column]:
    """The columns of :func:`valid_rows`."""
    from pyspark.sql import functions as F  # noqa: N812

    if spec.format == "raw":
        columns = [F.col("key"), F.col(TEXT).alias("value")]
    else:
        assert spec.value_schema is not None
        columns = [
            F.col(_value_column(i)).alias(name)
            for i, name in enumerate(spec.value_schema.fieldNames())
        ]
    return [*columns, *(_metadata() if spec.metadata_columns else [])]


def _table_column_sources(spec: ParseSpec) -> dict[str, str]:
    """Each table column's name -> the split frame's column it is written from."""
    if spec.format == "raw":
        sources = {"key": "key", "value": TEXT}
    else:
        assert spec.value_schema is not None
        sources = {n: _value_column(i) for i, n in enumerate(spec.value_schema.fieldNames())}
    if spec.metadata_columns:
        sources.update(
            _kafka_topic="topic",
            _kafka_partition="partition",
            _kafka_offset="offset",
            _kafka_timestamp="timestamp",
        )
    return sources


def _detail(spec: ParseSpec) -> Column:
    """A human-readable explanation next to the machine-readable reason."""
    from pyspark.sql import functions as F  # noqa: N812

    reason = F.col(REASON)
    detail = (
        F.when(reason == Reason.TOMBSTONE.value, F.lit("value is null (a tombstone)"))
        .when(
            reason == Reason.RECORD_TOO_LARGE.value,
            F.format_string(
                "value is %d bytes, over spec.format.maxRecordBytes (%d)",
                F.octet_length("value"),
                F.lit(spec.max_record_bytes),
            ),
        )
        .when(
            reason == Reason.MISSING_KEY.value,
            F.lit("key is null and spec.format.keyRequired is true"),
        )
        .when(reason == Reason.INVALID_UTF8.value, F.lit("value is not valid UTF-8"))
        .when(reason == Reason.MALFORMED_JSON.value, F.lit("value is not one JSON object"))
        .when(
            reason == Reason.MALFORMED_AVRO.value,
            F.lit("value does not decode with the Avro schema in spec.format.schema"),
        )
    )
    if spec.format == "avro":
        check = F.col(CHECK)
        detail = F.when(
            check.isNotNull(), F.substr(check, F.instr(check, "\t") + F.lit(1))
        ).otherwise(detail)
    if spec.format == "json" and spec.value_schema is not None:
        check = F.col(CHECK)
        keys = F.json_object_keys(F.col(TEXT))
        mismatched = [
            F.when(
                F.array_contains(keys, F.lit(f.name)) & _field(f.name).isNull(),
                F.lit(f"{f.name} ({f.dataType.simpleString()})"),
            )
            for f in spec.value_schema.fields
        ]
        # The strict check's own words first, when it refused the record.
        json_detail = F.when(
            check.isNotNull(), F.substr(check, F.instr(check, "\t") + F.lit(1))
        ).when(
            reason == Reason.SCHEMA_MISMATCH.value,
            F.concat(F.lit("fields that do not fit the schema: "), F.concat_ws(", ", *mismatched)),
        )
        if spec.required:
            missing = [F.when(_field(n).isNull(), F.lit(n)) for n in spec.required]
            json_detail = json_detail.when(
                reason == Reason.MISSING_REQUIRED_FIELD.value,
                F.concat(F.lit("required fields missing or null: "), F.concat_ws(", ", *missing)),
            )
        detail = json_detail.otherwise(detail)
    return detail


def dead_letter_rows(split_rows: DataFrame, batch_id: int | Column) -> DataFrame:
    """The dead-letter rows of a :func:`split` frame: where each refused record came from, its raw
    bytes and why; ``batch_id`` is the batch's id, or a column holding each row's."""
    from pyspark.sql import functions as F  # noqa: N812

    batch = F.lit(batch_id) if isinstance(batch_id, int) else batch_id

    dead = split_rows.where(F.col(REASON).isNotNull())
    return dead.select(
        *_metadata(),
        F.col("key"),
        F.col("value"),
        F.col(REASON).alias("reason"),
        F.col(DETAIL).alias("detail"),
        batch.cast("bigint").alias("batch_id"),
        F.current_timestamp().alias("dead_lettered_at"),
    )


# The table pass's observed Bloom filter of its refused records' keys (see table_pass_columns).
REFUSED_KEYS = "refused_keys"
# Its size bounds: sized for between this few and this many refused records (8 bits each: ~2%
# false positives at capacity). More refused records than it is sized for only raise the false
# positives, which the dead-letter pass routes again and drops. The filter travels to the driver
# and back into the dead-letter pass's plan as a literal, so it is kept small when few records
# are refused.
REFUSED_KEYS_MIN = 10_000
REFUSED_KEYS_MAX = 1_000_000


def _record_key() -> Column:
    """A record's identity as one long: (topic, partition, offset), hashed."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.xxhash64(F.col("topic"), F.col("partition"), F.col("offset"))


def _filter_capacity(expected_refused: int) -> int:
    """The refused records the table pass's Bloom filter is sized for."""
    return max(REFUSED_KEYS_MIN, min(expected_refused, REFUSED_KEYS_MAX))


OLDEST_MS = "oldest_timestamp_ms"
NEWEST_MS = "newest_timestamp_ms"


def table_pass_columns(expected_refused: int = 0, inline_rows: int = 0) -> list[Column]:
    """Aggregates for ``DataFrame.observe`` on the table pass, kept to what it needs on every row:
    ``rows``, ``valid``, the oldest and newest Kafka timestamps (epoch ms: the batch's
    freshness at its commit), and a Bloom filter of the refused records' keys (``refused_keys``,
    null when none was refused) by which the dead-letter pass finds them again without routing the
    whole batch a second time (:func:`possibly_refused`), sized for about ``expected_refused``
    records and bounded whatever their number. The counts per reason come from the dead-letter
    pass, which sees only refused records (ten per-reason counts on every row cost about 10% CPU
    per record).

    With ``inline_rows`` (see :func:`inline_capacity`), also up to that many refused records
    themselves (``refused_rows``, those of :data:`INLINE_RECORD_BYTES` or less): when that is
    all of them, the dead letters need no second read of Kafka."""
    from pyspark.sql import functions as F  # noqa: N812

    capacity = _filter_capacity(expected_refused)
    jvm: Any = _jvm()
    keys = F.when(F.col(REASON).isNotNull(), _record_key())
    aggregate = jvm.org.apache.spark.sql.catalyst.expressions.aggregate.BloomFilterAggregate(
        _expr(keys), _expr(F.lit(capacity).cast("bigint"))
    ).toAggregateExpression()
    columns = [
        F.count(F.lit(1)).alias("rows"),
        F.count_if(F.col(REASON).isNull()).alias("valid"),
        _column(aggregate).alias(REFUSED_KEYS),
        # The batch's oldest and newest record: its freshness at the commit (freshness.py).
        F.unix_millis(F.min(F.col("timestamp"))).alias(OLDEST_MS),
        F.unix_millis(F.max(F.col("timestamp"))).alias(NEWEST_MS),
    ]
    if inline_rows > 0:
        size = sum(F.coalesce(F.length(F.col(c)), F.lit(0)) for c in ("key", "value", DETAIL))
        small_refused = F.when(
            F.col(REASON).isNotNull() & (size <= INLINE_RECORD_BYTES),
            F.struct(*(F.col(c) for c in INLINE_COLUMNS)),
        )
        # Spark's bounded collect (a priority queue of at most inline_rows rows per task and
        # after the merge; nulls, i.e. valid or large records, are not collected): the driver
        # receives at most tasks x inline_rows x INLINE_RECORD_BYTES, whatever the batch holds.
        top = jvm.org.apache.spark.sql.catalyst.expressions.aggregate.CollectTopK(
            _expr(small_refused), inline_rows, False, 0, 0
        ).toAggregateExpression()
        columns.append(_column(top).alias(REFUSED_ROWS))
    return columns


# The table pass's refused records themselves, when few and small (see table_pass_columns).
REFUSED_ROWS = "refused_rows"
# The columns of a split frame a dead letter is made of (see dead_letter_rows).
INLINE_COLUMNS = ("topic", "partition", "offset", "timestamp", REASON, "key", "value", DETAIL)
# A refused record is collected inline if its key, value and detail hold this many bytes or
# fewer; a larger one sends the batch's dead letters through the second read.
INLINE_RECORD_BYTES = 4096
# What the collected records of all a batch's tasks may weigh together (each task sends its own
# to the driver), and a bound on the rows whatever the tasks.
INLINE_RESULT_BYTES = 32 * 1024 * 1024
INLINE_ROW_OVERHEAD = 512  # topic, reason and the row's own layout
INLINE_ROWS_MAX = 10_000


def inline_capacity(tasks: int) -> int:
    """How many refused records the table pass collects inline when ``tasks`` tasks run it: as
    many as keep every task's share within :data:`INLINE_RESULT_BYTES` together."""
    per_task = INLINE_RESULT_BYTES // (max(1, tasks) * (INLINE_RECORD_BYTES + INLINE_ROW_OVERHEAD))
    return max(0, min(INLINE_ROWS_MAX, per_task))


def inline_schema(split_rows: DataFrame) -> StructType:
    """The schema of the records the table pass collects inline (``refused_rows``' elements)."""
    return split_rows.select(*INLINE_COLUMNS).schema


# The batch id of each row of a frame holding the dead letters of several batches.
BATCH = "__deltaflow_batch"


def inline_dead_letters(
    spark: SparkSession, schema: StructType, batches: Sequence[tuple[int, Sequence[Any]]]
) -> DataFrame:
    """The refused records table passes collected (``refused_rows``, of :func:`inline_schema`),
    for each (batch id, records), as one frame shaped like a split frame's refused rows plus
    each row's batch id in :data:`BATCH`, for :func:`dead_letter_rows`: local data, no Kafka
    read."""
    from pyspark.sql.types import LongType, StructField
    from pyspark.sql.types import StructType as Struct

    with_batch = Struct([*schema.fields, StructField(BATCH, LongType(), False)])
    data = [(*record, batch) for batch, records in batches for record in records]
    return spark.createDataFrame(data, with_batch)


def possibly_refused(records: DataFrame, refused_keys: bytes) -> DataFrame:
    """The Kafka rows of a batch whose key is in the table pass's Bloom filter of refused keys:
    every refused record and a few valid ones (false positives; routing them again drops them),
    found at the cost of a hash a record instead of a second parse."""
    from pyspark.sql import functions as F  # noqa: N812

    jvm: Any = _jvm()
    might_contain = jvm.org.apache.spark.sql.catalyst.expressions.BloomFilterMightContain(
        _expr(F.lit(bytearray(refused_keys))), _expr(_record_key())
    )
    return records.where(_column(might_contain))


def refused(split_rows: DataFrame) -> DataFrame:
    """The refused rows of a :func:`split` frame (observe them for the per-reason counts)."""
    from pyspark.sql import functions as F  # noqa: N812

    return split_rows.where(F.col(REASON).isNotNull())


def count_columns() -> list[Column]:
    """Aggregates over a routed DataFrame: all rows, valid rows and rows per reason (named
    ``rows``, ``valid`` and each reason's value), for ``DataFrame.observe``."""
    from pyspark.sql import functions as F  # noqa: N812

    reason = F.col(REASON)
    return [
        F.count(F.lit(1)).alias("rows"),
        F.count_if(reason.isNull()).alias("valid"),
        *(F.count_if(reason == F.lit(r.value)).alias(r.value) for r in REASONS),
    ]


class Router:
    """One spec's routing with its column expressions built once, for a stream's every batch.

    Each expression of a plan is a py4j round trip from Python to the JVM (hundreds for a schema
    of a few fields: the route, the split with its detail, the valid rows, the table pass's
    aggregates). Rebuilt for every batch they were ~40% of the driver's Python CPU at 500k
    records a batch (bench/README); they depend on the spec alone, so a stream builds them once
    (in its SparkContext: a Router outlives no session) and each batch only applies them.
    """

    def __init__(self, spec: ParseSpec) -> None:
        from pyspark.sql import functions as F  # noqa: N812

        self.spec = spec  # what the columns were built from
        self._stages = _route_stages(spec)
        self._split = _split_columns(spec)
        self._valid = _valid_columns(spec)
        self._is_valid = F.col(REASON).isNull()
        self._is_refused = F.col(REASON).isNotNull()
        # The table pass's aggregates of the last (expected refused, inline rows) asked for:
        # the same from batch to batch while a stream's mix of refused records holds.
        self._table_pass: tuple[tuple[int, int], list[Column]] | None = None

    def split(self, records: DataFrame) -> DataFrame:
        """Kafka rows routed and split: ``split(route(records, spec), spec)``."""
        return _apply(records, self._stages).select(*self._split)

    def valid_rows(self, split_rows: DataFrame) -> DataFrame:
        """The table rows of a split frame (:func:`valid_rows`)."""
        return split_rows.where(self._is_valid).select(*self._valid)

    def refused(self, split_rows: DataFrame) -> DataFrame:
        """The refused rows of a split frame (:func:`refused`)."""
        return split_rows.where(self._is_refused)

    def by_table_partition(
        self, split_rows: DataFrame, partition_by: list[str], tasks: int
    ) -> DataFrame:
        """``sink.optimizeWrite``: a split frame shuffled so each of the table's partitions is
        written by one of ``tasks`` tasks (one file per table partition per batch; an
        unpartitioned table: ``tasks`` files).

        The shuffle is the stream's own, *below* the table pass's observation, not Delta's
        optimized write (which shuffles the frame it is given, observation included): Spark
        applies a shuffle-map task's accumulator updates once per successful attempt, so a map
        task run again (its executor lost, its output fetched in vain) would count its rows and
        collect its refused records twice; a result task's, once per partition of the job
        (DAGScheduler.handleTaskCompletion). Above this shuffle the observation runs in the
        write's own tasks."""
        from pyspark.sql import functions as F  # noqa: N812

        sources = {n.lower(): c for n, c in _table_column_sources(self.spec).items()}
        columns = [F.col(sources[name.lower()]) for name in partition_by]
        return split_rows.repartition(max(1, tasks), *columns)

    def table_pass_columns(self, expected_refused: int, inline_rows: int) -> list[Column]:
        """:func:`table_pass_columns`, built again only when its sizes change."""
        capacity = _filter_capacity(expected_refused)
        key = (capacity, inline_rows)
        if self._table_pass is None or self._table_pass[0] != key:
            self._table_pass = (key, table_pass_columns(capacity, inline_rows))
        return self._table_pass[1]
