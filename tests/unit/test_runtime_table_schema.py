"""Schemas the API server admits but Delta or Spark cannot write are refused at start, naming the
field (pure: pyspark's types need no JVM; tests/integration/runtime/test_table_schema.py shows
Delta refusing each)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    CalendarIntervalType,
    CharType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
    VarcharType,
    VariantType,
    YearMonthIntervalType,
)

from deltaflow_runtime.parse import METADATA_COLUMNS
from deltaflow_runtime.table_schema import schema_problems

FIELD = "spec.format.schema"


def struct(*fields: tuple[str, DataType] | tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(f[0], f[1], f[2] if len(f) == 3 else True) for f in fields])


def problems(
    columns: StructType,
    partition_by: Sequence[str] = (),
    *,
    metadata: bool = True,
    nested_not_null: bool = False,
) -> list[str]:
    return schema_problems(
        columns,
        field=FIELD,
        metadata=METADATA_COLUMNS if metadata else (),
        partition_by=partition_by,
        nested_not_null=nested_not_null,
    )


ORDERS = struct(("id", LongType()), ("amount", DoubleType()), ("country", StringType()))


def test_an_ordinary_schema_has_no_problem() -> None:
    assert problems(ORDERS, ["country"]) == []
    assert problems(ORDERS, ["_kafka_topic", "country"]) == []


@pytest.mark.parametrize(
    ("columns", "says"),
    [
        (struct(("id", LongType()), ("ID", StringType())), "id and ID are one name"),
        (struct(("id", LongType()), ("id", StringType())), "id and id are one name"),
        (
            struct(("s", struct(("a", IntegerType()), ("A", IntegerType())))),
            "s.a and s.A are one name",
        ),
        (
            struct(("s", ArrayType(struct(("a", IntegerType()), ("A", IntegerType()))))),
            "s.element.a and s.element.A",
        ),
        (
            struct(("m", MapType(StringType(), struct(("x", LongType()), ("X", LongType()))))),
            "m.value.x and m.value.X",
        ),
    ],
)
def test_names_equal_but_for_case_are_refused_at_any_depth(columns: StructType, says: str) -> None:
    (problem,) = problems(columns)
    assert problem.startswith(f"{FIELD}: "), problem
    assert says in problem, problem
    assert "case-insensitive" in problem


def test_a_field_named_like_a_kafka_metadata_column_clashes_in_any_case() -> None:
    (problem,) = problems(struct(("id", LongType()), ("_Kafka_Topic", StringType())))
    assert problem.startswith(f"{FIELD}: _Kafka_Topic clash(es) with the Kafka metadata")
    assert "_kafka_topic" in problem
    assert "kafkaMetadataColumns: false" in problem
    assert (
        problems(struct(("id", LongType()), ("_Kafka_Topic", StringType())), metadata=False) == []
    )


def test_the_runtime_s_own_column_prefix_is_reserved_in_any_case() -> None:
    (problem,) = problems(struct(("__DeltaFlow_corrupt_record", StringType())))
    assert "reserved" in problem


@pytest.mark.parametrize("name", ["my col", "a,b", "f(x)", "a=b", "x;y", "t\tab", "{x}"])
def test_characters_delta_refuses_in_names_are_refused(name: str) -> None:
    for columns in (struct((name, LongType())), struct(("s", struct((name, LongType()))))):
        (problem,) = problems(columns)
        assert problem.startswith(f"{FIELD}: the name ")
        assert "rename it" in problem


@pytest.mark.parametrize("name", ["a.b", "é", "_x", "X1", ""])
def test_other_characters_are_fine(name: str) -> None:
    assert problems(struct(("id", LongType()), (name, LongType()))) == []


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        (TimeType(), "TIME(6)"),
        (DayTimeIntervalType(), "INTERVAL DAY TO SECOND"),
        (YearMonthIntervalType(), "INTERVAL YEAR TO MONTH"),
        (CalendarIntervalType(), "INTERVAL"),
        (VarcharType(3), "use STRING"),
        (CharType(3), "use STRING"),
        (StringType("UTF8_LCASE"), "drop the COLLATE clause"),
    ],
)
def test_types_a_delta_table_cannot_hold_are_refused_at_any_depth(
    kind: DataType, hint: str
) -> None:
    for columns, path in (
        (struct(("id", LongType()), ("x", kind)), "x"),
        (struct(("s", ArrayType(struct(("x", kind))))), "s.element.x"),
        (struct(("m", MapType(StringType(), kind))), "m.value"),
    ):
        (problem,) = problems(columns)
        assert problem.startswith(f"{FIELD}: {path} is of type "), problem
        assert hint in problem
        assert "cannot hold" in problem


def test_types_delta_holds_are_fine() -> None:
    kinds = [
        LongType(),
        DecimalType(38, 18),
        BinaryType(),
        DateType(),
        TimestampType(),
        TimestampNTZType(),
        VariantType(),
        NullType(),
        ArrayType(MapType(StringType(), struct(("d", DoubleType())))),
    ]
    assert problems(struct(*((f"c{i}", k) for i, k in enumerate(kinds)))) == []


def test_not_null_inside_a_struct_is_refused_for_json_and_kept_for_avro() -> None:
    columns = struct(
        ("id", LongType(), False),  # top level: enforced by the runtime
        ("s", struct(("a", IntegerType(), False), ("b", StringType()))),
        ("xs", ArrayType(struct(("q", StringType(), False)))),
    )
    refused = problems(columns, nested_not_null=False)
    assert [p.split(" is NOT NULL")[0] for p in refused] == [
        f"{FIELD}: s.a",
        f"{FIELD}: xs.element.q",
    ]
    assert all("drop NOT NULL there" in p for p in refused)
    assert problems(columns, nested_not_null=True) == []  # Avro: every decoded record has them


def test_partition_by_a_column_spelled_otherwise_names_the_spelling() -> None:
    (problem,) = problems(ORDERS, ["Country"])
    assert problem.startswith("spec.sink.partitionBy: Country is spelled country in ")
    (problem,) = problems(ORDERS, ["_KAFKA_TOPIC"])
    assert "is spelled _kafka_topic" in problem


def test_partition_by_an_unknown_column_lists_the_columns() -> None:
    (problem,) = problems(ORDERS, ["day"])
    assert problem.startswith("spec.sink.partitionBy: day is not a column of the table")
    assert "country" in problem
    assert "_kafka_offset" in problem


@pytest.mark.parametrize(
    "kind",
    [
        ArrayType(StringType()),
        MapType(StringType(), StringType()),
        struct(("a", StringType())),
        VariantType(),
        NullType(),
    ],
)
def test_partition_by_a_column_of_a_type_delta_does_not_partition_by(kind: DataType) -> None:
    (problem,) = problems(struct(("id", LongType()), ("p", kind)), ["p"])
    assert problem.startswith("spec.sink.partitionBy: p is of type ")
    assert "simple types only" in problem


@pytest.mark.parametrize("kind", [BinaryType(), DoubleType(), TimestampType(), DateType()])
def test_partition_by_a_simple_column_is_fine(kind: DataType) -> None:
    assert problems(struct(("id", LongType()), ("p", kind)), ["p"]) == []


def test_partition_by_every_column_is_refused() -> None:
    raw = struct(("key", BinaryType()), ("value", BinaryType()))
    (problem,) = problems(raw, ["key", "value"], metadata=False)
    assert "names every column of the table" in problem
    assert problems(raw, ["key", "value"]) == []  # the Kafka metadata columns stay data columns
