"""What a Delta table can hold, judged on the spec's schema before the stream starts.

The API server cannot read a Spark DDL string or an Avro schema, so a schema Delta or Spark
cannot write is found here, at start, with the field and the fix named (``parse_spec`` raises it
as a SchemaError, which the driver reports as InvalidSpec): otherwise the first batch fails, on
every restart, or worse, lands changed values. Each case was tried against delta-spark 4.4 on
Spark 4.2 (tests/integration/runtime/test_table_schema.py writes them):

- names equal but for case, among the columns, against the Kafka metadata columns and among a
  struct's fields at any depth: Delta's names are case-insensitive (DELTA_DUPLICATE_COLUMNS_FOUND;
  at the top level Spark already fails to route the batch, AMBIGUOUS_REFERENCE_TO_FIELDS);
- the characters ' ,;{}()\\n\\t=' in a name, which Delta refuses without column mapping;
- types Delta cannot store (intervals, TIME, collated strings, ...) and CHAR/VARCHAR, for which
  Spark cannot build the rows: an allow-list, so a type Spark adds later is refused until tried;
- partitionBy: a column spelled as in the schema, of a simple type (not ARRAY, MAP, STRUCT,
  VARIANT or VOID: DELTA_INVALID_PARTITION_COLUMN_TYPE; BINARY is fine), and not every column
  (DELTA_CANNOT_USE_ALL_COLUMNS_FOR_PARTITION);
- JSON only: NOT NULL inside a STRUCT. Spark's JSON reader does not enforce it there: a record
  without the field is stored with a made-up value (0 for an INT) or kills the task (a STRING).
  Top-level NOT NULL is enforced by the runtime (missing_required_field). An Avro schema's
  non-null nested fields are fine: every record that decodes has them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    VariantType,
)

# Characters Delta refuses in column names unless the table uses column mapping.
INVALID_NAME_CHARACTERS = " ,;{}()\n\t="
# What a Delta table holds besides ARRAY, MAP and STRUCT of it (STRING: of the default collation).
_WRITABLE_TYPES = (
    StringType,
    VariantType,
    NullType,
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    BinaryType,
    DateType,
    TimestampType,
    TimestampNTZType,
)
_DELTA_TYPES = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL, STRING, BINARY, DATE, "
    "TIMESTAMP, TIMESTAMP_NTZ, VARIANT, VOID, and ARRAY, MAP and STRUCT of them"
)
RESERVED_PREFIX = "__deltaflow"  # the runtime's internal columns


def schema_problems(
    columns: StructType,
    *,
    field: str,
    metadata: Sequence[str],
    partition_by: Sequence[str],
    nested_not_null: bool,
) -> list[str]:
    """What keeps a table of ``columns`` (the value's columns, from the spec field ``field``)
    plus the Kafka ``metadata`` columns from being written, partitioned by ``partition_by``;
    each line starts with the field to fix. ``nested_not_null``: whether NOT NULL inside a
    STRUCT holds for every record the format lets through (Avro: yes; JSON: no)."""
    problems: list[str] = []
    names = columns.fieldNames()
    by_lower = {m.lower(): m for m in metadata}
    clashes = [n for n in names if n.lower() in by_lower]
    if clashes:
        problems.append(
            f"{field}: {_listed(clashes)} clash(es) with the Kafka metadata column(s) "
            f"{_listed([by_lower[n.lower()] for n in clashes])} (Delta's column names are "
            "case-insensitive); rename them or set spec.sink.kafkaMetadataColumns: false"
        )
    internal = [n for n in names if n.lower().startswith(RESERVED_PREFIX)]
    if internal:
        problems.append(f"{field}: names starting with {RESERVED_PREFIX} are reserved")
    problems += _struct_problems(columns, "", field, nested=False, not_null_ok=nested_not_null)
    problems += _partition_problems(columns, metadata, partition_by, field)
    return problems


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names)


def _struct_problems(
    struct: StructType, prefix: str, field: str, *, nested: bool, not_null_ok: bool
) -> list[str]:
    problems: list[str] = []
    spellings: dict[str, list[str]] = {}
    for child in struct.fields:
        path = f"{prefix}{child.name}"
        spellings.setdefault(child.name.lower(), []).append(path)
        if any(c in child.name for c in INVALID_NAME_CHARACTERS):
            problems.append(
                f"{field}: the name {path!r} holds one of ' ,;{{}}()\\n\\t=', which Delta refuses "
                "in column names: rename it"
            )
        if nested and not child.nullable and not not_null_ok:
            problems.append(
                f"{field}: {path} is NOT NULL inside a STRUCT, which Spark's JSON reader does "
                "not enforce (a record without it would be stored with a made-up value such as "
                "0, or fail the batch): drop NOT NULL there (a top-level NOT NULL column is "
                "enforced: records without it go to the dead-letter table)"
            )
        problems += _type_problems(child.dataType, path, field, not_null_ok=not_null_ok)
    for paths in spellings.values():
        if len(paths) > 1:
            problems.append(
                f"{field}: {' and '.join(paths)} are one name to Delta (its column names are "
                "case-insensitive): rename all but one"
            )
    return problems


def _type_problems(kind: DataType, path: str, field: str, *, not_null_ok: bool) -> list[str]:
    if isinstance(kind, StructType):
        return _struct_problems(kind, f"{path}.", field, nested=True, not_null_ok=not_null_ok)
    if isinstance(kind, ArrayType):
        return _type_problems(kind.elementType, f"{path}.element", field, not_null_ok=not_null_ok)
    if isinstance(kind, MapType):
        return _type_problems(
            kind.keyType, f"{path}.key", field, not_null_ok=not_null_ok
        ) + _type_problems(kind.valueType, f"{path}.value", field, not_null_ok=not_null_ok)
    name = kind.simpleString().upper()
    if isinstance(kind, CharType | VarcharType):
        hint = ": use STRING (Spark cannot build rows of it)"
    elif isinstance(kind, StringType) and kind.collation != "UTF8_BINARY":
        hint = ": drop the COLLATE clause"
    elif isinstance(kind, _WRITABLE_TYPES):
        return []
    else:
        hint = f" (it holds {_DELTA_TYPES})"
    return [f"{field}: {path} is of type {name}, which a Delta table cannot hold{hint}"]


def _partition_problems(
    columns: StructType, metadata: Sequence[str], partition_by: Sequence[str], field: str
) -> list[str]:
    kinds: dict[str, DataType] = {f.name: f.dataType for f in columns.fields}
    kinds.update({m: StringType() for m in metadata})  # all of a simple type: their kind is moot
    spelled = {n.lower(): n for n in kinds}
    problems: list[str] = []
    for name in partition_by:
        kind = kinds.get(name)
        if kind is None and name.lower() in spelled:
            problems.append(
                f"spec.sink.partitionBy: {name} is spelled {spelled[name.lower()]} in {field}: "
                "write it so in partitionBy (a new DeltaIngestion: partitionBy cannot change)"
            )
        elif kind is None:
            problems.append(
                f"spec.sink.partitionBy: {name} is not a column of the table (columns: "
                f"{', '.join(sorted(kinds))})"
            )
        elif isinstance(kind, ArrayType | MapType | StructType | VariantType | NullType):
            problems.append(
                f"spec.sink.partitionBy: {name} is of type {kind.simpleString().upper()}; Delta "
                "partitions by columns of simple types only (numbers, strings, dates, "
                "timestamps, booleans, binary): choose another column"
            )
    if partition_by and set(kinds) <= set(partition_by):
        problems.append(
            "spec.sink.partitionBy: names every column of the table; Delta needs at least one "
            "column that is not a partition column"
        )
    return problems
