"""What the JSON routing costs per record, in Spark itself, without Kafka or Delta.

Projections over the same cached ~300-byte orders (``common.record_value``), each written to
Spark's ``noop`` sink in local[1], best of ``--repeat`` runs, in nanoseconds per record:

- ``read``: the cached values only (the floor);
- ``from_json``: what the hand-written job does (``from_json`` with the schema);
- ``from_json bytes``: the same parser over the value's bytes, as the runtime runs it
  (``io.deltaflow.json.FromJsonBytes``, with the runtime's options and corrupt-record column);
- ``strict check``: ``io.deltaflow.json.StrictJson`` alone (the Java UDF over the raw bytes the
  runtime applies);
- ``java_method``: ``java.util.Objects.toString(value, "x")`` through ``java_method``: what any
  per-record JVM call that way costs (reflection, the value decoded to a Java String);
- ``+ schema arg``: the same with the schema's JSON as the second argument, as the strict check
  passed it before it became a UDF: a literal is converted to a Java String again for every
  record;
- ``table pass``: the runtime's table pass as it runs (``deltaflow_runtime.parse.route`` +
  ``split``: cheap checks, the strict check, ``from_json``, the reason; observed with
  ``table_pass_columns``, then ``valid_rows``). The observation keeps Spark from pushing the
  filter on the reason below the parse (which substitutes the reason's expression into it and
  runs ``from_json`` four times a record: 11 us against 4.5 us).

The ratios against ``from_json`` say how much the runtime's checks add to the parse. The
throughput benchmark measures the whole job (Kafka, Delta, commits), where these per-record costs
are a small part; its run-to-run spread (+-5%) hides differences under a microsecond a record.
"""

from __future__ import annotations

import argparse
import time

from common import json_parse_spec, local_session, record_value

SCHEMA = "id BIGINT NOT NULL, amount DOUBLE, ts TIMESTAMP, country STRING"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import Column
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import StringType, StructField, StructType

    from deltaflow_runtime.parse import (
        CORRUPT,
        STRICT_JSON_OPTIONS,
        from_json_bytes,
        route,
        split,
        strict_json,
        table_pass_columns,
        valid_rows,
    )

    spark = local_session(1, {"spark.sql.session.timeZone": "UTC"})
    spec = json_parse_spec(spark, SCHEMA)
    assert spec.value_schema is not None
    values = [(record_value(i),) for i in range(10_000)]
    records = (
        spark.createDataFrame(values, "value BINARY")
        .crossJoin(spark.range(args.records // len(values)).withColumnRenamed("id", "n"))
        .select(
            F.lit(None).cast("binary").alias("key"),
            "value",
            F.lit("t").alias("topic"),
            F.lit(0).alias("partition"),
            F.col("n").alias("offset"),
            F.current_timestamp().alias("timestamp"),
        )
        .cache()
    )
    count = records.count()
    text = F.col("value").cast("string")
    check = strict_json(spec.value_schema)

    def call(second: str) -> Column:
        return F.call_function(
            "java_method", F.lit("java.util.Objects"), F.lit("toString"), text, F.lit(second)
        )

    with_corrupt = StructType([*spec.value_schema.fields, StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **STRICT_JSON_OPTIONS}
    jobs = {
        "read": records.select(F.col("value")),
        "from_json": records.select(F.from_json(text, spec.value_schema).alias("v")),
        "from_json bytes": records.select(
            from_json_bytes(with_corrupt, options, spec.time_zone).alias("v")
        ),
        "strict check": records.select(check.alias("c")),
        "java_method": records.select(call("x").alias("c")),
        "+ schema arg": records.select(call(spec.value_schema.json()).alias("c")),
        "table pass": valid_rows(
            split(route(records, spec), spec).observe("table", *table_pass_columns()), spec
        ),
    }
    cost: dict[str, float] = {}
    for name, frame in jobs.items():
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            best = min(best, time.perf_counter() - start)
        cost[name] = best * 1e9 / count
        print(f"{name:15s} {cost[name]:7.0f} ns per record", flush=True)
    parse = cost["from_json"] - cost["read"]
    check_cost = cost["strict check"] - cost["read"]
    route_cost = cost["table pass"] - cost["read"]
    print(f"\n{count:,} records of ~300 B, local[1], best of {args.repeat}")
    calls = {name: cost[name] - cost["read"] for name in ("java_method", "+ schema arg")}
    bytes_cost = cost["from_json bytes"] - cost["read"]
    pairs = (
        ("from_json bytes", bytes_cost),
        ("strict check", check_cost),
        ("table pass", route_cost),
        *calls.items(),
    )
    for name, extra in pairs:
        print(f"{name} / from_json: {extra / parse:.2f} ({extra:.0f} vs {parse:.0f} ns)")
    spark.stop()


if __name__ == "__main__":
    main()
