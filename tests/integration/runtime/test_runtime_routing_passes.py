"""The two passes of a batch on real Spark: the table pass parses each value once and collects few,
small refused records inline; otherwise the dead-letter pass finds every refused record again
through the table pass's Bloom filter without routing the whole batch a second time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from deltaflow_runtime.parse import (
    INLINE_RECORD_BYTES,
    REASON,
    REFUSED_KEYS,
    REFUSED_ROWS,
    ParseSpec,
    Router,
    dead_letter_rows,
    inline_dead_letters,
    inline_schema,
    possibly_refused,
    refused,
    route,
    split,
    valid_rows,
)
from deltaflow_runtime.table import SNAPSHOT_PARTITIONS, known_files, table_state

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark]

ROWS = 20_000


def _spec() -> ParseSpec:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("country", StringType())])
    return ParseSpec("json", schema, ("id",), None, None, False, 8192, True)


def _kafka_rows(spark: SparkSession, bad_every: int) -> DataFrame:
    """Rows shaped like the Kafka source's, over two partitions; every ``bad_every``-th value is
    refused (alternately malformed and missing its required field)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
        ]
    )
    now = datetime.now(UTC)
    rows = []
    for n in range(ROWS):
        if n % bad_every == 0:
            value = b'{"id": 1, "country": ' if n % (2 * bad_every) else b'{"country": "DE"}'
        else:
            value = b'{"id": %d, "country": "DE"}' % n
        rows.append((b"k", value, "orders", n % 2, n // 2, now))
    return spark.createDataFrame(rows, schema).repartition(2)


def _table_pass(
    rows: DataFrame, spec: ParseSpec, inline_rows: int = 0, router: Router | None = None
) -> tuple[DataFrame, Any]:
    """The writer's table pass: a stream's Router (built once) applied to one batch."""
    from pyspark.sql import Observation

    router = router or Router(spec)
    observation = Observation()
    observed = router.split(rows).observe(observation, *router.table_pass_columns(0, inline_rows))
    return router.valid_rows(observed), observation


def _parse_calls(frame: DataFrame) -> int:
    """How many times the plan parses the value (from_json over its bytes)."""
    return _calls(frame, "deltaflow_from_json_bytes")


def _calls(frame: DataFrame, function: str) -> int:
    """How many times ``function`` appears in the frame's optimized plan."""
    plan: str = frame._jdf.queryExecution().optimizedPlan().toString()
    return plan.count(function)


def _identities(frame: DataFrame) -> set[tuple[str, int, int]]:
    picked = frame.select("topic", "partition", "offset").collect()
    return {(r[0], int(r[1]), int(r[2])) for r in picked}


def test_the_table_pass_parses_and_checks_each_value_once(runtime_spark: SparkSession) -> None:
    """The observation keeps Spark from pushing the table's filter below the parse; the strict
    check, read by the reason, the parse's guard and the detail, is not repeated for each."""
    spec = _spec()
    rows = _kafka_rows(runtime_spark, bad_every=100)
    table, _ = _table_pass(rows, spec)
    assert _parse_calls(table) == 1
    assert _calls(table, "deltaflow_strict_json(") == 1

    # Without the observation in between, the filter on the reason is pushed below the parse and
    # the reason's expression substituted into it: the value is parsed several times a record.
    unobserved = valid_rows(split(route(rows, spec), spec), spec)
    assert _parse_calls(unobserved) > 1


@pytest.mark.parametrize(
    "bad_every",
    [
        500,  # 40 refused: the filter at its smallest (10,000 keys) lets almost nothing else by
        3,  # 6,667 refused
        1,  # 20,000 refused, twice what the filter is sized for: more false positives, no miss
    ],
)
def test_the_dead_letter_pass_finds_exactly_the_refused_records(
    runtime_spark: SparkSession, bad_every: int
) -> None:
    """Every record the table pass refused is among the candidates; routing the candidates again
    gives exactly those records with the same reasons; with few refused records the candidates
    are few (the second pass parses them, not the batch)."""
    from pyspark.sql import functions as F  # noqa: N812

    spec = _spec()
    rows = _kafka_rows(runtime_spark, bad_every=bad_every)
    table, observation = _table_pass(rows, spec)
    table.write.format("noop").mode("overwrite").save()
    observed = observation.get
    refused_count = ROWS - int(observed["valid"])
    assert int(observed["rows"]) == ROWS
    assert refused_count == len(range(0, ROWS, bad_every))

    everything = split(route(rows, spec), spec)
    expected = {
        (r[0], int(r[1]), int(r[2]), r[3])
        for r in refused(everything).select("topic", "partition", "offset", REASON).collect()
    }
    candidates = possibly_refused(rows, bytes(observed[REFUSED_KEYS]))
    found = refused(split(route(candidates, spec), spec))
    got = {
        (r[0], int(r[1]), int(r[2]), r[3])
        for r in found.select("topic", "partition", "offset", REASON).collect()
    }
    assert got == expected
    assert {e[:3] for e in expected} <= _identities(candidates)
    if refused_count < 100:
        # Far below its capacity, the filter lets through almost nothing else.
        assert candidates.count() < refused_count + 20
    assert found.where(F.col(REASON).isNull()).count() == 0


def _dead_letters(frame: DataFrame) -> list[tuple[Any, ...]]:
    picked = dead_letter_rows(frame, 7).drop("dead_lettered_at").collect()
    return sorted(tuple(r) for r in picked)


def test_few_small_refused_records_are_collected_by_the_table_pass_itself(
    runtime_spark: SparkSession,
) -> None:
    """The inline dead letters are the very rows a second read would give: same records, same
    bytes, same reasons and details."""
    spec = _spec()
    rows = _kafka_rows(runtime_spark, bad_every=500)  # 40 refused
    table, observation = _table_pass(rows, spec, inline_rows=100)
    table.write.format("noop").mode("overwrite").save()
    collected = observation.get[REFUSED_ROWS]
    assert len(collected) == ROWS - int(observation.get["valid"]) == 40

    everything = split(route(rows, spec), spec)
    inline = inline_dead_letters(runtime_spark, inline_schema(everything), [(7, collected)])
    assert _dead_letters(inline) == _dead_letters(refused(everything))


def test_the_inline_collect_stays_bounded_and_leaves_out_large_records(
    runtime_spark: SparkSession,
) -> None:
    """More refused records than it holds: it keeps its bound and the writer falls back to the
    second read (the count tells). A refused record over INLINE_RECORD_BYTES is never collected."""
    spec = _spec()
    many = _kafka_rows(runtime_spark, bad_every=3)  # 6,667 refused
    table, observation = _table_pass(many, spec, inline_rows=100)
    table.write.format("noop").mode("overwrite").save()
    assert len(observation.get[REFUSED_ROWS]) == 100
    assert ROWS - int(observation.get["valid"]) == 6667

    big = b'{"id": "' + b"x" * INLINE_RECORD_BYTES + b'"'  # malformed, and too large to collect
    now = datetime.now(UTC)
    rows = runtime_spark.createDataFrame(
        [(b"k", big, "orders", 0, 0, now), (b"k", b"{", "orders", 0, 1, now)],
        many.schema,
    )
    table, observation = _table_pass(rows, spec, inline_rows=100)
    table.write.format("noop").mode("overwrite").save()
    assert [int(r["offset"]) for r in observation.get[REFUSED_ROWS]] == [1]
    assert int(observation.get["valid"]) == 0


def test_a_batch_with_nothing_refused_observes_no_keys(runtime_spark: SparkSession) -> None:
    spec = _spec()
    rows = _kafka_rows(runtime_spark, bad_every=ROWS + 1).where("offset > 0")
    table, observation = _table_pass(rows, spec)
    table.write.format("noop").mode("overwrite").save()
    assert int(observation.get["valid"]) == int(observation.get["rows"])
    assert observation.get[REFUSED_KEYS] is None


def _landed(table: DataFrame) -> set[tuple[str, int, int]]:
    picked = table.select("_kafka_topic", "_kafka_partition", "_kafka_offset").collect()
    return {(r[0], int(r[1]), int(r[2])) for r in picked}


def test_one_router_serves_every_batch_of_a_stream(runtime_spark: SparkSession) -> None:
    """A stream builds its routing's columns once and applies them to each batch: every batch,
    whatever its mix, gets its own rows, counts and inline dead letters, the same as a plan
    built for that batch alone."""
    spec = _spec()
    router = Router(spec)
    for bad_every in (500, 3, ROWS + 1, 500):
        rows = _kafka_rows(runtime_spark, bad_every=bad_every)
        table, observation = _table_pass(rows, spec, inline_rows=100, router=router)
        landed = _landed(table)
        observed = observation.get
        refused_count = len(range(0, ROWS, bad_every))
        assert int(observed["rows"]) == ROWS
        assert int(observed["valid"]) == len(landed) == ROWS - refused_count
        assert len(observed[REFUSED_ROWS] or []) == min(refused_count, 100)

        alone = split(route(rows, spec), spec)
        assert landed == _landed(valid_rows(alone, spec))
        if refused_count <= 100:
            collected = observed[REFUSED_ROWS] or []
            inline = inline_dead_letters(runtime_spark, inline_schema(alone), [(7, collected)])
            assert _dead_letters(inline) == _dead_letters(refused(alone))


def test_the_writer_knows_a_table_s_file_count_without_replaying_its_log(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    # Each batch's commit sizes Delta's state reconstruction by this count: it must be the
    # table's real one after this JVM's own commits and after a fresh load, and 0 before the
    # table exists (the first commit of a new dead-letter table).
    from pyspark.sql import functions as F  # noqa: N812

    path = str(tmp_path / "table")
    assert known_files(runtime_spark, path) == 0
    for batch in range(3):
        (
            runtime_spark.range(40)
            .withColumn("country", F.when(F.col("id") % 2 == 0, "DE").otherwise("FR"))
            .repartition(3)
            .write.format("delta")
            .mode("append")
            .partitionBy("country")
            .option("txnAppId", "s")
            .option("txnVersion", str(batch))
            .save(path)
        )
    files = len(runtime_spark.read.format("delta").load(path).inputFiles())
    assert files >= 6
    assert known_files(runtime_spark, path) == files
    runtime_spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[union-attr]
    # A driver's start: the log replay is sized from the checksum of a fresh load (one task
    # for a small table, not the unknown size's eight).
    unknown = runtime_spark.conf.get(SNAPSHOT_PARTITIONS)
    try:
        runtime_spark.conf.set(SNAPSHOT_PARTITIONS, "8")
        assert table_state(runtime_spark, path, "s", sized=True).stream_batch == 2
        assert runtime_spark.conf.get(SNAPSHOT_PARTITIONS) == "1"
    finally:
        runtime_spark.conf.set(SNAPSHOT_PARTITIONS, unknown)
    assert known_files(runtime_spark, path) == files


def test_optimize_write_shuffles_below_the_observation_and_writes_a_file_per_partition(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """sink.optimizeWrite: the table pass's observation runs in the write's own (result) tasks,
    above the stream's shuffle by the table's partition columns, where Spark applies each task's
    counts and collected records once (a shuffle-map task's would be applied again for every
    successful re-run); each table partition gets one file per batch, and the counts are exact."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812

    spec = _spec()
    router = Router(spec)
    countries = ("DE", "FR", "NL")
    rows = _kafka_rows(runtime_spark, bad_every=500).withColumn(
        "value",
        F.regexp_replace(
            F.col("value").cast("string"),
            '"DE"',
            F.concat(F.lit('"'), F.element_at(F.array(*map(F.lit, countries)),
                                              (F.col("offset") % 3 + 1).cast("int")), F.lit('"')),
        ).cast("binary"),
    ).repartition(4)  # fmt: skip
    shuffled = router.by_table_partition(router.split(rows), ["country"], tasks=4)
    observation = Observation()
    observed = shuffled.observe(observation, *router.table_pass_columns(0, 100))
    table = router.valid_rows(observed)

    plan = str(table._jdf.queryExecution().executedPlan().toString())
    assert "Exchange hashpartitioning" in plan
    assert plan.index("CollectMetrics") < plan.index("Exchange"), plan  # the observation above

    path = str(tmp_path / "optimized")
    table.write.format("delta").option("optimizeWrite", "false").partitionBy("country").save(path)
    refused_count = len(range(0, ROWS, 500))
    assert int(observation.get["rows"]) == ROWS
    assert int(observation.get["valid"]) == ROWS - refused_count
    assert len(observation.get[REFUSED_ROWS]) == refused_count
    files = sorted(p.parent.name for p in (tmp_path / "optimized").glob("*/*.parquet"))
    assert files == [f"country={c}" for c in countries]
    landed = runtime_spark.read.format("delta").load(path)
    assert landed.count() == ROWS - refused_count
