"""Schemas the API server admits but Delta or Spark cannot write: the start-time check refuses
exactly what Delta refuses to write, and the runtime refuses it before any batch, naming the
field to fix (a crash loop on the first batch otherwise). Real Spark and Delta, no Kafka."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from deltaflow_api.v1alpha1 import DeltaSink, Format
from deltaflow_runtime.parse import ParseSpec, Router, SchemaError, parse_spec
from deltaflow_runtime.table_schema import schema_problems

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark]

# (case, one row in SQL, partitionBy): what Delta refuses to write ...
REFUSED_BY_DELTA = [
    ("names-equal-but-for-case", "select 1 as id, 2 as ID", []),
    ("nested-names-equal-but-for-case", "select 1 as id, named_struct('a', 1, 'A', 2) as s", []),
    ("in-an-array-of-structs", "select 1 as id, array(named_struct('a', 1, 'A', 2)) as s", []),
    ("space-in-a-name", "select 1 as `my col`", []),
    ("comma-in-a-nested-name", "select 1 as id, named_struct('a,b', 1) as s", []),
    ("an-interval", "select 1 as id, interval 1 day as d", []),
    ("a-collated-string", "select 1 as id, 'x' collate utf8_lcase as c", []),
    ("partition-by-an-array", "select 1 as id, array(1) as p", ["p"]),
    ("partition-by-a-map", "select 1 as id, map('k', 1) as p", ["p"]),
    ("partition-by-a-struct", "select 1 as id, named_struct('x', 1) as p", ["p"]),
    ("partition-by-a-variant", "select 1 as id, parse_json('1') as p", ["p"]),
    ("partition-by-void", "select 1 as id, null as p", ["p"]),
    ("partition-by-every-column", "select 1 as id, 2 as p", ["id", "p"]),
]
# ... and look-alikes it writes.
WRITTEN_BY_DELTA = [
    ("dots-and-accents-in-names", "select 1 as id, 2 as `a.b`, 3 as `é`", []),
    ("nested-names-that-differ", "select 1 as id, named_struct('a', 1, 'b', 2) as s", []),
    ("variant-and-void-columns", "select 1 as id, parse_json('1') as v, null as n", []),
    ("partition-by-binary", "select 1 as id, cast('x' as binary) as p", ["p"]),
    ("partition-by-timestamp-ntz", "select 1 as id, timestamp_ntz'2026-01-01 00:00' as p", ["p"]),
]


@pytest.mark.parametrize(
    ("sql", "partition_by", "refused"),
    [
        *(pytest.param(sql, p, True, id=case) for case, sql, p in REFUSED_BY_DELTA),
        *(pytest.param(sql, p, False, id=case) for case, sql, p in WRITTEN_BY_DELTA),
    ],
)
def test_the_check_refuses_exactly_what_delta_refuses(
    runtime_spark: SparkSession, tmp_path: Path, sql: str, partition_by: list[str], refused: bool
) -> None:
    from pyspark.errors import PySparkException

    frame = runtime_spark.sql(sql)
    problems = schema_problems(
        frame.schema,
        field="spec.format.schema",
        metadata=(),
        partition_by=partition_by,
        nested_not_null=True,  # SQL's named_struct fields are NOT NULL, and hold values
    )
    writer = frame.write.format("delta").mode("append").partitionBy(*partition_by)
    if refused:
        assert problems
        with pytest.raises(PySparkException):
            writer.save(str(tmp_path / "table"))
    else:
        assert problems == []
        writer.save(str(tmp_path / "table"))
        assert runtime_spark.read.format("delta").load(str(tmp_path / "table")).count() == 1


def _json(schema: str) -> Format:
    return Format(type="json", schema=schema)


def _avro(*fields: dict[str, object]) -> Format:
    return Format(type="avro", schema=json.dumps({"type": "record", "name": "r", "fields": fields}))


_INT_RECORD = {"type": "record", "name": "n", "fields": [{"name": "a", "type": "int"}]}


@pytest.mark.parametrize(
    ("fmt", "sink", "says"),
    [
        (_json("id BIGINT, ID STRING"), {}, "spec.format.schema: id and ID are one name"),
        (_json("id BIGINT, c VARCHAR(10)"), {}, "spec.format.schema: c is of type VARCHAR(10)"),
        (_json("id BIGINT, t TIME"), {}, "spec.format.schema: t is of type TIME(6)"),
        (_json("id BIGINT, `my col` INT"), {}, "spec.format.schema: the name 'my col'"),
        (
            _json("id BIGINT, s STRUCT<a: INT NOT NULL, b: STRING>"),
            {},
            "spec.format.schema: s.a is NOT NULL inside a STRUCT",
        ),
        (_json("id BIGINT, _KAFKA_OFFSET BIGINT"), {}, "clash(es) with the Kafka metadata"),
        (
            _json("id BIGINT, country STRING"),
            {"partitionBy": ["Country"]},
            "spec.sink.partitionBy: Country is spelled country",
        ),
        (
            _json("id BIGINT, tags ARRAY<STRING>"),
            {"partitionBy": ["tags"]},
            "spec.sink.partitionBy: tags is of type ARRAY<STRING>",
        ),
        (
            _avro({"name": "id", "type": "long"}, {"name": "ID", "type": "long"}),
            {},
            "spec.format.schema: id and ID are one name",
        ),
        (
            _avro(
                {
                    "name": "s",
                    "type": {
                        "type": "record",
                        "name": "n",
                        "fields": [{"name": "a", "type": "int"}, {"name": "A", "type": "int"}],
                    },
                }
            ),
            {},
            "spec.format.schema: s.a and s.A are one name",
        ),
        (
            Format(type="raw"),
            {"partitionBy": ["key", "value"], "kafkaMetadataColumns": False},
            "spec.sink.partitionBy: names every column",
        ),
    ],
)
def test_the_runtime_refuses_it_at_start_naming_the_field(
    runtime_spark: SparkSession, fmt: Format, sink: dict[str, object], says: str
) -> None:
    with pytest.raises(SchemaError) as error:
        parse_spec(runtime_spark, fmt, DeltaSink.model_validate({"tablePath": "/t", **sink}))
    assert says in str(error.value), error.value


@pytest.mark.parametrize(
    "fmt",
    [
        _json("id BIGINT NOT NULL, s STRUCT<a: INT, b: STRING>, tags ARRAY<STRING>"),
        _avro({"name": "id", "type": "long"}, {"name": "s", "type": _INT_RECORD}),  # non-null a
        _avro({"name": "id", "type": "long"}, {"name": "s", "type": ["null", _INT_RECORD]}),
    ],
)
def test_what_every_record_can_hold_passes(runtime_spark: SparkSession, fmt: Format) -> None:
    parse_spec(runtime_spark, fmt, DeltaSink.model_validate({"tablePath": "/t"}))


def _kafka_rows(spark: SparkSession, values: list[str]) -> DataFrame:
    rows = [(None, v.encode(), "t", 0, i, datetime(2026, 1, 1)) for i, v in enumerate(values)]
    schema = (
        "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"
    )
    return spark.createDataFrame(rows, schema)


def test_json_not_null_inside_a_struct_is_not_enforced_so_it_is_refused(
    runtime_spark: SparkSession,
) -> None:
    """Why the check refuses it: routed without it, a record lacking s.a is not refused (the
    runtime's JSON parse fills in a made-up 0, where s.a is an INT)."""
    from pyspark.sql.types import DataType, StructType

    declared = DataType.fromDDL("id BIGINT, s STRUCT<a: INT NOT NULL>")
    assert isinstance(declared, StructType)
    columns = StructType.fromJson(declared.jsonValue())
    for column in columns.fields:
        column.nullable = True  # as parse_spec makes the top level
    router = Router(ParseSpec("json", columns, (), None, None, False, 1 << 20, True))
    split = router.split(_kafka_rows(runtime_spark, ['{"id": 1, "s": {}}']))
    (row,) = router.valid_rows(split).collect()  # in the table: NOT NULL did not refuse it
    assert row["id"] == 1
    assert row["s"]["a"] is not None  # and not null either: a value nobody sent
