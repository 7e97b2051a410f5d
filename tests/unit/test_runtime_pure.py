"""Pure helpers of the runtime: Avro schema facts, maintenance reports, Spark conf, metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from deltaflow_api import DeltaIngestion
from deltaflow_runtime.maintenance import (
    MaintenanceReport,
    UnsafeRetentionError,
    check_retention,
    human_bytes,
    partition_predicate,
    partitions_added,
    write_termination_message,
)
from deltaflow_runtime.metrics import RuntimeMetrics, progress_sample
from deltaflow_runtime.object_store import bucket_of, classify, probe_paths, storage_conf
from deltaflow_runtime.parse import (
    REASONS,
    ParseSpec,
    Reason,
    avro_all_null_encoding,
    avro_required_fields,
    routing_fingerprint,
)
from deltaflow_runtime.session import runtime_conf

AVRO = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "a", "type": ["null", "string"]},
            {"name": "b", "type": ["string", "null"]},
        ],
    }
)


def test_avro_required_fields_and_all_null_encoding() -> None:
    assert avro_required_fields(AVRO) == ("id",)
    assert avro_all_null_encoding(AVRO) is None  # id can never be null
    optional = json.dumps(
        {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "a", "type": ["null", "string"]},
                {"name": "b", "type": ["string", "null"]},
            ],
        }
    )
    assert avro_required_fields(optional) == ()
    # union branch index as zig-zag varint: null is branch 0 (-> 0x00), then branch 1 (-> 0x02)
    assert avro_all_null_encoding(optional) == b"\x00\x02"


def test_reasons_are_stable_identifiers() -> None:
    assert [r.value for r in REASONS] == [
        "tombstone",
        "record_too_large",
        "missing_key",
        "invalid_utf8",
        "malformed_json",
        "schema_mismatch",
        "missing_required_field",
        "malformed_avro",
    ]
    assert Reason("tombstone") is Reason.TOMBSTONE


def test_partition_predicate_is_exact_and_escaped() -> None:
    predicate = partition_predicate(
        [
            {"country": "DE", "day": "2026-11-22"},
            {"country": "O'B", "day": None},
            {"country": "DE", "day": "2026-11-22"},
        ]
    )
    assert predicate == (
        "(`country` = 'DE' AND `day` = '2026-11-22') OR (`country` = 'O\\'B' AND `day` IS NULL)"
    )


def test_partitions_added_by_a_commit() -> None:
    commit = "\n".join(
        [
            '{"commitInfo":{"operation":"WRITE"}}',
            '{"add":{"path":"a","partitionValues":{"country":"DE"},"dataChange":true}}',
            '{"add":{"path":"b","partitionValues":{"country":"FR"},"dataChange":false}}',
            '{"remove":{"path":"c","partitionValues":{"country":"US"}}}',
        ]
    )
    assert partitions_added(commit) == [{"country": "DE"}]


def test_vacuum_retention_floor() -> None:
    check_retention(168, allow_unsafe=False)
    check_retention(1, allow_unsafe=True)
    with pytest.raises(UnsafeRetentionError, match="allowUnsafeRetention: true"):
        check_retention(24, allow_unsafe=False)


def test_reports_are_events_for_the_operator(tmp_path: Path) -> None:
    report = MaintenanceReport(
        "optimize", "s3a://lake/t", "OptimizeCompleted", "m", files_added=2, files_removed=40
    )
    event = report.to_event()
    assert event["reason"] == "OptimizeCompleted"
    assert event["filesAdded"] == 2
    assert event["filesRemoved"] == 40
    assert event["durationSeconds"] == 0.0
    target = tmp_path / "termination-log"
    write_termination_message({"events": [event]}, {"DELTAFLOW_TERMINATION_LOG": str(target)})
    assert json.loads(target.read_text())["events"][0]["filesRemoved"] == 40
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(12) == "12 B"


def _ingestion(**spec: object) -> DeltaIngestion:
    return DeltaIngestion.model_validate(
        {
            "metadata": {"name": "orders", "namespace": "data"},
            "spec": {
                "source": {"bootstrapServers": "k:9092", "topic": "orders"},
                "format": {"type": "raw"},
                "sink": {"tablePath": "s3a://lake/orders"},
                **spec,
            },
        }
    )


def test_runtime_conf_keeps_what_correctness_needs() -> None:
    ingestion = _ingestion(
        sparkConf={
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            "spark.sql.shuffle.partitions": "16",
        }
    )
    conf = runtime_conf(ingestion, env={})
    assert conf["spark.databricks.delta.retentionDurationCheck.enabled"] == "true"
    # Delta 4.x would otherwise ignore VACUUM's retention argument (the spec's retentionHours).
    assert conf["spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "16"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.databricks.delta.properties.defaults.enableDeletionVectors"] == "false"
    assert conf["spark.app.name"] == "deltaflow-data-orders"
    assert "spark.master" not in conf  # on Kubernetes spark-defaults.conf says
    assert runtime_conf(ingestion, master="local[2]", env={})["spark.master"] == "local[2]"


def test_storage_conf_never_holds_the_keys_and_pins_the_conditional_logstore() -> None:
    ingestion = _ingestion(
        sink={
            "tablePath": "s3a://lake/orders",
            "storage": {
                "endpoint": "http://minio:9000",
                "pathStyleAccess": True,
                "accessKeyId": {"name": "lake", "key": "id"},
                "secretAccessKey": {"name": "lake", "key": "secret"},
            },
        }
    )
    conf = storage_conf(ingestion.spec.sink.storage)
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    # A custom endpoint needs a region; the keys are read from the environment by the SDK.
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "EnvironmentVariableCredentialsProvider"
    )
    env = {"AWS_ACCESS_KEY_ID": "AK-VALUE", "AWS_SECRET_ACCESS_KEY": "SK-VALUE"}
    full = runtime_conf(ingestion, env=env, extra={"spark.delta.logStore.s3a.impl": "x"})
    assert not [k for k, v in full.items() if "AK-VALUE" in v or "SK-VALUE" in v]
    # No sparkConf can swap the store that keeps two writers from overwriting a commit.
    assert full["spark.delta.logStore.s3a.impl"] == "io.deltaflow.storage.S3ConditionalLogStore"
    assert full["spark.hadoop.fs.s3a.create.conditional.enabled"] == "true"


def test_storage_conf_without_keys_uses_the_default_chain_for_workload_identity() -> None:
    ingestion = _ingestion(
        sink={"tablePath": "s3a://lake/orders", "storage": {"region": "eu-west-1"}}
    )
    conf = storage_conf(ingestion.spec.sink.storage)
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "DefaultCredentialsProvider"
    )
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert "spark.hadoop.fs.s3a.endpoint" not in conf
    https = _ingestion(
        sink={"tablePath": "s3a://lake/o", "storage": {"endpoint": "https://s3.example:443"}}
    )
    assert (
        storage_conf(https.spec.sink.storage)["spark.hadoop.fs.s3a.connection.ssl.enabled"]
        == "true"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "java.nio.file.AccessDeniedException: s3a://lake/x: getFileStatus",
            "ObjectStoreAccessDenied",
        ),
        ("org.apache.hadoop.fs.s3a.UnknownStoreException: s3a://nope/", "BucketNotFound"),
        ("...NoSuchBucket: The specified bucket does not exist", "BucketNotFound"),
        (
            "org.apache.hadoop.fs.s3a.auth.NoAuthWithAWSException: No AWS credentials",
            "ObjectStoreNoCredentials",
        ),
        (
            "InvalidAccessKeyId: The Access Key Id you provided does not exist",
            "ObjectStoreAccessDenied",
        ),
        ("SignatureDoesNotMatch: The request signature we calculated", "ObjectStoreAccessDenied"),
        ("java.net.ConnectException: Connection refused", "ObjectStoreUnreachable"),
        ("java.net.UnknownHostException: minio.data.svc", "ObjectStoreUnreachable"),
        ("something else entirely", "ObjectStoreError"),
    ],
)
def test_object_store_failures_get_a_reason_and_advice(text: str, reason: str) -> None:
    got, advice = classify(text)
    assert got == reason
    assert advice


def test_one_probe_per_bucket_only_for_object_store_paths() -> None:
    assert bucket_of("s3a://lake/orders") == "lake"
    assert bucket_of("s3://lake") == "lake"
    assert bucket_of("/data/orders") is None
    assert bucket_of("gs://lake/orders") is None
    assert probe_paths(
        ["s3a://lake/orders", "s3a://lake/orders_dead_letter", "s3a://ckpt/x", "/tmp/y"]
    ) == ["s3a://lake/orders", "s3a://ckpt/x"]


def test_progress_sample_from_a_spark_progress_report() -> None:
    sample = progress_sample(
        {
            "batchId": 7,
            "numInputRows": 1200,
            "inputRowsPerSecond": 600.0,
            "processedRowsPerSecond": 800.5,
            "durationMs": {"addBatch": 1200, "triggerExecution": 1500, "other": 3},
        }
    )
    assert sample.batch_id == 7
    assert sample.processed_rows_per_second == 800.5
    assert sample.durations_ms == {"addBatch": 1200, "triggerExecution": 1500}


def test_offset_metrics_lag_and_headroom() -> None:
    metrics = RuntimeMetrics()
    metrics.observe_offsets(
        committed={"t": {0: 150}},
        earliest={"t": {0: 100, 1: 5}},
        latest={"t": {0: 400, 1: 5}},
    )
    text = generate_latest(metrics.registry).decode()
    assert 'deltaflow_kafka_lag_records{partition="0",topic="t"} 250.0' in text
    assert 'deltaflow_kafka_retention_headroom_records{partition="0",topic="t"} 50.0' in text
    assert 'deltaflow_kafka_retention_headroom_ratio{partition="0",topic="t"} 0.1666' in text
    # an unread partition counts from the earliest retained offset
    assert 'deltaflow_kafka_lag_records{partition="1",topic="t"} 0.0' in text
    assert "deltaflow_kafka_lag_records_sum 250.0" in text
    assert 'deltaflow_dead_letter_rows_total{reason="malformed_json"} 0.0' in text


def test_offset_metrics_of_a_partition_no_longer_read_are_removed() -> None:
    metrics = RuntimeMetrics()
    both = {"a": {0: 10}, "b": {0: 10}}
    metrics.observe_offsets(committed=both, earliest={"a": {0: 0}, "b": {0: 0}}, latest=both)
    # topic b no longer matches spec.source.topicPattern (or was deleted)
    metrics.observe_offsets(committed=both, earliest={"a": {0: 0}}, latest={"a": {0: 12}})
    text = generate_latest(metrics.registry).decode()
    assert 'deltaflow_kafka_lag_records{partition="0",topic="a"} 2.0' in text
    assert 'topic="b"' not in text


def _json_spec(**changes: object) -> ParseSpec:
    from dataclasses import replace

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("country", StringType())])
    spec = ParseSpec("json", schema, ("id",), None, None, False, 1_048_576, True)
    return replace(spec, **changes)  # type: ignore[arg-type]


def test_the_routing_fingerprint_changes_with_what_decides_where_a_record_goes() -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    base = routing_fingerprint(_json_spec())
    assert routing_fingerprint(_json_spec()) == base  # stable across runs and processes
    assert len(base) == 16
    # Whether the table has Kafka metadata columns does not move records between tables.
    assert routing_fingerprint(_json_spec(metadata_columns=False)) == base
    changed = [
        _json_spec(max_record_bytes=512),
        _json_spec(key_required=True),
        _json_spec(required=()),
        _json_spec(value_schema=StructType([StructField("id", LongType())])),
        _json_spec(format="avro", avro_schema='{"type": "record"}'),
        _json_spec(avro_confluent=True),
        _json_spec(avro_schema_ids=(7,)),
    ]
    prints = [routing_fingerprint(spec) for spec in changed]
    assert base not in prints
    assert len(set(prints)) == len(prints)


HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("requested", "in_flight_for_hours", "expected"),
    [
        (168, 5.0, 168),  # safe retention: untouched, whatever is in flight
        (24, None, 24),  # unsafe but above the margin, nothing in flight
        (24, 2.0, 24),  # a two-hour batch is still younger than 24 h of retention
        (0, None, 1),  # 0 h: raised to the margin (a batch may start meanwhile), whole hours
        (1, 3.0, 4),  # a batch in flight for 3 h keeps its files: 3 h + the margin, rounded up
        (2.5, None, 3),  # Delta would round 2.5 h to 2: rounded up instead
    ],
)
def test_an_unsafe_vacuum_never_reaches_the_files_of_a_write_in_flight(
    requested: float, in_flight_for_hours: float | None, expected: float
) -> None:
    from deltaflow_runtime.maintenance import unsafe_vacuum_retention

    now = 1_800_000_000_000
    since = None if in_flight_for_hours is None else now - int(in_flight_for_hours * HOUR_MS)
    hours, why = unsafe_vacuum_retention(requested, since, now)
    assert hours == pytest.approx(expected)
    assert bool(why) == (hours > math.ceil(requested))


def test_when_a_batch_was_planned_is_read_from_its_offset_log_entry() -> None:
    from deltaflow_runtime.checkpoint import batch_timestamp_ms, offset_log_entry

    assert (
        batch_timestamp_ms(offset_log_entry({"t": {0: 5}}, 1_795_000_000_123)) == 1_795_000_000_123
    )
    assert batch_timestamp_ms("v1") is None


@pytest.mark.parametrize(
    ("planned", "read_tasks", "tasks"),
    [
        (25_000, 4, 1),  # steady 5k rec/s, 5 s trigger: one write task, one file per partition
        (250_000, 4, 3),
        (500_000, 4, None),  # catch-up: one task per Kafka partition, as Spark reads them
        (10, 1, None),
        (None, 4, None),  # where the batch starts is unknown (first batch after a start)
        (0, 4, 1),
        # Read by minPartitions' 24 tasks (3 Kafka partitions): the write still takes ~100k each
        (25_000, 24, 1),
        (1_000_000, 24, 10),
        (3_000_000, 24, None),
    ],
)
def test_small_batches_are_written_by_fewer_tasks(
    planned: int | None, read_tasks: int, tasks: int | None
) -> None:
    from deltaflow_runtime.sink import write_tasks

    assert write_tasks(planned, read_tasks) == tasks


@pytest.mark.parametrize("tasks", [1, 2, 4, 16, 64, 256, 10_000])
def test_the_inline_dead_letters_a_driver_can_receive_stay_bounded(tasks: int) -> None:
    """Whatever the tasks, all of them together send the driver at most INLINE_RESULT_BYTES of
    collected records; few tasks collect up to INLINE_ROWS_MAX, very many collect none."""
    from deltaflow_runtime.parse import (
        INLINE_RECORD_BYTES,
        INLINE_RESULT_BYTES,
        INLINE_ROW_OVERHEAD,
        INLINE_ROWS_MAX,
        inline_capacity,
    )

    rows = inline_capacity(tasks)
    assert 0 <= rows <= INLINE_ROWS_MAX
    assert tasks * rows * (INLINE_RECORD_BYTES + INLINE_ROW_OVERHEAD) <= INLINE_RESULT_BYTES
    if tasks <= 4:
        assert rows >= 1_000  # 0.2% of a 500k-record batch
    if tasks == 10_000:
        assert rows == 0


@pytest.mark.parametrize("tasks", [1, 4, 64])
def test_a_batch_after_one_with_more_refused_than_the_collect_holds_does_not_collect(
    tasks: int,
) -> None:
    """Refused records come in runs: after a batch whose refused records overflowed the inline
    collect, the next one goes straight to the second read; after a batch with few, it collects."""
    from deltaflow_runtime.parse import inline_capacity
    from deltaflow_runtime.sink import inline_rows

    capacity = inline_capacity(tasks)
    assert inline_rows(0, tasks) == capacity
    assert inline_rows(capacity, tasks) == capacity
    assert inline_rows(capacity + 1, tasks) == 0
    assert inline_rows(25_000, tasks) == 0  # 5% of a 500k-record batch


def test_dead_letters_come_inline_only_when_the_table_pass_collected_every_one() -> None:
    from deltaflow_runtime.sink import Counts

    assert Counts(rows=10, valid=8, reasons={}, refused_rows=("a", "b")).all_refused_inline
    assert not Counts(rows=10, valid=7, reasons={}, refused_rows=("a", "b")).all_refused_inline
    assert not Counts(rows=10, valid=10, reasons={}).all_refused_inline


def test_a_batch_starts_where_the_previous_one_ended_when_every_partition_is_known() -> None:
    from deltaflow_runtime.sink import batch_start

    previous = {"a": {0: 10, 1: 20}, "b": {0: 5}}
    assert batch_start(previous, {"a": {0: 15, 1: 20}}) == {"a": {0: 10, 1: 20}}
    assert batch_start(previous, {"a": {0: 15, 2: 3}}) is None  # partition 2 is new
    assert batch_start(previous, {"c": {0: 1}}) is None
    assert batch_start({}, {"a": {0: 15}}) is None  # a new stream's first batch
    assert batch_start(previous, None) is None


def test_a_batch_read_takes_exactly_the_recorded_range_with_the_stream_s_connection() -> None:
    from deltaflow_runtime.source import batch_read_options

    stream = {
        "kafka.bootstrap.servers": "k:9092",
        "kafka.security.protocol": "SASL_SSL",
        "subscribePattern": "orders.*",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "1000",
        "minPartitions": "8",
        "failOnDataLoss": "true",
    }
    options = batch_read_options(stream, {"o1": {0: 5, 1: 7}, "x": {0: 1}}, {"o1": {1: 9, 0: 6}})
    assert json.loads(options["assign"]) == {"o1": [0, 1]}
    assert json.loads(options["startingOffsets"]) == {"o1": {"0": 5, "1": 7}}
    assert json.loads(options["endingOffsets"]) == {"o1": {"0": 6, "1": 9}}
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["failOnDataLoss"] == "true"
    for streaming in ("subscribePattern", "maxOffsetsPerTrigger", "minPartitions"):
        assert streaming not in options


def test_a_range_holds_at_most_one_record_per_offset() -> None:
    from deltaflow_runtime.sink import records_between

    start = {"a": {0: 10, 1: 20}}
    assert records_between(start, {"a": {0: 15, 1: 20}}) == 5
    assert records_between(start, {"a": {0: 15, 1: 27}}) == 12
    assert records_between(start, {"a": {0: 10}}) == 0
    assert records_between(start, {"a": {2: 9}}) == 0  # no start known: nothing counted


def test_a_stream_has_caught_up_when_no_partition_holds_unread_records() -> None:
    from deltaflow_runtime.stream import unread_records

    latest = {"a": {0: 10, 1: 0}}
    assert unread_records({"a": {0: 10}}, latest) == 0  # partition 1 is empty
    assert unread_records({"a": {0: 7}}, latest) == 3
    assert unread_records({}, {"a": {0: 4}, "b": {2: 5}}) == 9  # nothing read yet
    assert unread_records({"a": {0: 12}}, latest) == 0  # committed past a truncated log


def test_each_batch_s_progress_is_reported_once_and_the_memory_of_it_stays_bounded() -> None:
    from deltaflow_runtime.stream import SEEN_BATCHES_KEPT, first_report

    seen: set[int] = set()
    assert first_report(seen, 0)
    assert not first_report(seen, 0)  # the listener delivered it twice
    for batch in range(1, 100_000):
        assert first_report(seen, batch)
        assert len(seen) <= SEEN_BATCHES_KEPT
    # A late duplicate of a recent batch is still recognized.
    assert not first_report(seen, 99_990)
