"""from_json over the value's bytes (io.deltaflow.json.FromJsonBytes) answers exactly what Spark's
from_json answers over the value as text, for every value the routing gives it (valid UTF-8, no
byte order mark, no leading NUL): the same rows, nulls and corrupt-record column, in the session's
time zone. Real Spark, a schema of every type a table takes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from runtime_kit import manifest, pipeline

from deltaflow_runtime.parse import CORRUPT, STRICT_JSON_OPTIONS, from_json_bytes, parse_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

SCHEMA = (
    "id BIGINT, small INT, tiny TINYINT, amount DOUBLE, ratio FLOAT, price DECIMAL(10,2), "
    "ok BOOLEAN, ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, name STRING, blob BINARY, "
    "tags ARRAY<STRING>, attrs MAP<STRING, INT>, nested STRUCT<a: INT, b: ARRAY<STRUCT<c: STRING>>>"
)

# Fine records, records from_json reads as corrupt or partly null, and shapes the strict check
# refuses before the parse (the parse must agree on them anyway).
VALUES: tuple[bytes, ...] = (
    b'{"id": 1, "small": 2, "tiny": 3, "amount": 1.5, "ratio": 0.25, "price": 12.34, "ok": true}',
    b'{"ts": "2026-01-31T12:00:00Z", "ntz": "2026-01-31T12:00:00", "day": "2026-01-31"}',
    b'{"ts": "2026-01-31 12:00:00", "day": "2026-1-3"}',
    b'{"ts": "2026-01-31T12:00:00.123456+02:00", "ntz": "2026-01-31 23:59:59.999"}',
    b'{"ts": "31/01/2026", "day": "yesterday"}',
    b'{"ts": 1767225600, "day": 20000}',
    b'{"name": "na\xc3\xafve \xe2\x82\xac \xf0\x9f\x98\x80", "tags": ["\xe6\x97\xa5\xe6\x9c\xac"]}',
    b'{"name": "\\u00e9\\u20ac\\ud83d\\ude00 \\" \\\\ \\/ \\b\\f\\n\\r\\t"}',
    b'{"name": "\\ud800 lone surrogate"}',
    b'{"blob": "AAEC/w==", "attrs": {"a": 1, "b": null, "c": 3}}',
    b'{"nested": {"a": 7, "b": [{"c": "x"}, {"c": null}, {}]}, "tags": []}',
    b'{"nested": {"a": "seven"}}',
    b'{"id": "not a number"}',
    b'{"id": "42", "small": 2.0, "tiny": 300, "ok": "true"}',
    b'{"id": 9223372036854775808, "small": 2147483648}',
    b'{"amount": 1e400, "ratio": 1e39, "price": 123456789012.5}',
    b'{"amount": "NaN", "ratio": "Infinity", "price": "1.005"}',
    b'{"amount": -0.0, "ratio": 1.0E-46, "price": -0.001}',
    b'{"id": 1, "id": 2}',
    b'{"name": 12, "tags": "one"}',
    b'{"name": {"x": [1, {"y": null}]}, "tags": [1, true, null, {"z": 1}]}',
    b'{"attrs": {"a": "one"}}',
    b'{"attrs": [1, 2]}',
    b'{"unknown": {"deep": [[[{"x": 1}]]]}, "id": 5}',
    b"{}",
    b'{"id": 1, "amount": ',
    b'{"id": 1} {"id": 2}',
    b'{"id": 1}\n\n',
    b'  \t{"id": 1}  ',
    b"[1, 2]",
    b'[{"id": 1}, {"id": 2}]',
    b'"a string"',
    b"123",
    b"null",
    b"",
    b"   ",
    b"{'id': 1}",
    b'{"id": 01}',
    b'{"amount": NaN}',
    b'{"id": 1, /* comment */ "small": 2}',
    b"{id: 1}",
    b'{"id": 1,}',
    b'{"name": "raw \x01 control"}',
    b'{"name": "' + b"x" * 5000 + b'"}',
)


@pytest.mark.parametrize("time_zone", ["UTC", "America/Sao_Paulo", "Asia/Kolkata"])
def test_from_json_over_bytes_answers_what_from_json_answers(
    runtime_spark: SparkSession, time_zone: str
) -> None:
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import DataType, StringType, StructField, StructType

    parsed = DataType.fromDDL(SCHEMA)
    assert isinstance(parsed, StructType)
    schema = StructType([*parsed.fields, StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **STRICT_JSON_OPTIONS}
    before = runtime_spark.conf.get("spark.sql.session.timeZone")
    runtime_spark.conf.set("spark.sql.session.timeZone", time_zone)
    try:
        values = runtime_spark.createDataFrame(
            [(i, v) for i, v in enumerate(VALUES)], "i INT, value BINARY"
        )
        both = values.select(
            "i",
            # to_json: rows compare as text (NaN is not equal to itself in a Row); null stays None
            F.to_json(F.from_json(F.col("value").cast("string"), schema, options)).alias("text"),
            F.to_json(from_json_bytes(schema, options, time_zone)).alias("bytes"),
        ).orderBy("i")
        rows = both.collect()
    finally:
        runtime_spark.conf.set("spark.sql.session.timeZone", before or "UTC")
    assert len(rows) == len(VALUES)
    differ = [(VALUES[r["i"]], r["text"], r["bytes"]) for r in rows if r["text"] != r["bytes"]]
    assert differ == []
    # The corpus does reach every outcome: parsed rows, partly-null rows with the corrupt record,
    # and no row at all.
    outcomes = [r["text"] for r in rows]
    assert any(o is not None and CORRUPT not in o for o in outcomes)
    assert any(o is not None and CORRUPT in o for o in outcomes)
    assert any(o is None or o == "{}" for o in outcomes)


def test_the_streams_own_session_time_zone_reaches_the_parse(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """A timestamp without an offset is read in the time zone of the stream's own session, as
    from_json reads it: in a stream pool a member's session, never the process's active one
    (here UTC throughout)."""
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    schema = StructType([StructField("ts", TimestampType()), StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    value = runtime_spark.createDataFrame([(b'{"ts": "2026-01-31 12:00:00"}',)], "value BINARY")
    document = manifest(
        "tz", "tz", "localhost:9092", tmp_path, format_={"type": "json", "schema": "ts TIMESTAMP"}
    )
    ingestion = pipeline(document).ingestion
    epochs = []
    for zone in ("UTC", "Asia/Kolkata"):
        session = runtime_spark.newSession()
        session.conf.set("spark.sql.session.timeZone", zone)
        spec = parse_spec(session, ingestion.spec.format, ingestion.spec.sink)
        assert spec.time_zone == zone
        row = (
            value.select(from_json_bytes(schema, options, spec.time_zone).alias("r"))
            .select("r.ts")
            .selectExpr("unix_seconds(ts) AS s")
            .first()
        )
        assert row is not None
        epochs.append(row["s"])
    assert epochs[0] - epochs[1] == 5 * 3600 + 30 * 60
