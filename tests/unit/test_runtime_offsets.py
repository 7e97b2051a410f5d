"""Offsets: the checkpoint's files, the table's commit metadata, data-loss gaps, lag."""

from __future__ import annotations

import pytest

from deltaflow_runtime.checkpoint import (
    CheckpointFormatError,
    kafka_offsets,
    offset_log_entry,
    parse_offset_log,
    render_offsets,
)
from deltaflow_runtime.offsets import data_loss_gaps, describe_gaps
from deltaflow_runtime.table import (
    commit_info,
    commit_metadata,
    commit_user_metadata,
    parse_commit_metadata,
    snapshot_partitions,
)

SPARK_OFFSET_LOG = (
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795372861106,"conf":'
    '{"spark.sql.shuffle.partitions":"2"}}\n{"orders":{"0":648,"1":663,"2":689}}'
)


def test_reads_the_offset_log_spark_writes() -> None:
    (source,) = parse_offset_log(SPARK_OFFSET_LOG)
    assert source is not None
    assert kafka_offsets(source) == {"orders": {0: 648, 1: 663, 2: 689}}


def test_writes_an_offset_log_spark_reads_back() -> None:
    offsets = {"orders": {2: 5, 0: 7}, "clicks": {0: 1}}
    entry = offset_log_entry(offsets, 1_700_000_000_000)
    lines = entry.splitlines()
    assert lines[0] == "v1"
    assert parse_offset_log(entry) == [render_offsets(offsets)]
    assert kafka_offsets(render_offsets(offsets)) == offsets
    assert render_offsets(offsets) == '{"clicks":{"0":1},"orders":{"0":7,"2":5}}'


def test_rejects_what_is_not_an_offset_log() -> None:
    with pytest.raises(CheckpointFormatError):
        parse_offset_log("garbage")


def test_commit_metadata_round_trip() -> None:
    text = commit_metadata("deltaflow/data/orders", 12, {"orders": {0: 100, 1: 7}})
    assert parse_commit_metadata(text) == ("deltaflow/data/orders", 12, {"orders": {0: 100, 1: 7}})
    assert parse_commit_metadata(None) is None
    assert parse_commit_metadata('{"other": 1}') is None
    assert parse_commit_metadata("not json") is None


def test_reads_user_metadata_from_a_commit_file() -> None:
    meta = commit_metadata("a", 1, None)
    commit = (
        '{"add":{"path":"x.parquet","partitionValues":{},"size":1,"dataChange":true}}\n'
        '{"commitInfo":{"operation":"WRITE","userMetadata":' + _json_str(meta) + "}}\n"
    )
    assert commit_user_metadata(commit) == meta
    assert commit_user_metadata('{"commitInfo":{"operation":"OPTIMIZE"}}') is None


def test_reads_the_rows_a_commit_wrote_from_its_commit_info() -> None:
    # What a replay compares its valid records with (Delta writes the metrics as strings).
    commit = (
        '{"txn":{"appId":"a","version":3}}\n'
        '{"commitInfo":{"operation":"WRITE","operationMetrics":{"numFiles":"2",'
        '"numOutputRows":"1234"}}}\n'
    )
    assert commit_info(commit)["operationMetrics"]["numOutputRows"] == "1234"
    assert commit_info('{"txn":{"appId":"a","version":3}}') == {}


def _json_str(text: str) -> str:
    import json

    return json.dumps(text)


@pytest.mark.parametrize(
    ("files", "tasks"),
    [(0, 1), (1, 1), (25_000, 1), (25_001, 2), (50_000, 2), (200_000, 8), (10**8, 50)],
)
def test_state_reconstruction_tasks_grow_with_the_table(files: int, tasks: int) -> None:
    # A stream's table of a few thousand files commits in one task; a large one splits, up to
    # Delta's own default.
    assert snapshot_partitions(files) == tasks


def test_a_table_of_unknown_size_keeps_the_runtime_default() -> None:
    assert snapshot_partitions(None) == 8


def test_data_loss_gaps_name_partition_and_size() -> None:
    resume = {"orders": {0: 200, 1: 500, 2: 10}}
    earliest = {"orders": {0: 300, 1: 100, 2: 10}}
    gaps = data_loss_gaps(resume, earliest)
    assert [(g.topic, g.partition, g.next_offset, g.earliest_offset, g.missing) for g in gaps] == [
        ("orders", 0, 200, 300, 100)
    ]
    loud = describe_gaps(gaps, fail_on_data_loss=True)
    assert "orders partition 0: the stream resumes at offset 200" in loud
    assert "earliest retained offset is 300 (100 records lost)" in loud
    assert "failOnDataLoss: false" in loud
    assert "continuing" in describe_gaps(gaps, fail_on_data_loss=False)


def test_no_gap_for_unknown_or_new_partitions() -> None:
    assert data_loss_gaps({"orders": {0: 5}}, {"orders": {1: 50}}) == []
    assert data_loss_gaps({}, {"orders": {0: 5}}) == []


def test_only_the_kafka_source_s_data_loss_failure_is_explained_as_data_loss() -> None:
    from deltaflow_runtime.stream import mentions_data_loss

    spark_says = (
        "[STREAM_FAILED] Query terminated with exception: [KAFKA_DATA_LOSS.START_OFFSET_RESET] "
        "Some data may have been lost because they are not available in Kafka any more"
    )
    assert mentions_data_loss(spark_says)
    assert not mentions_data_loss("[STREAM_FAILED] java.lang.OutOfMemoryError: Java heap space")
    assert not mentions_data_loss("RoutingChangedError: batch 3 of deltaflow/data/orders ...")


def test_a_commit_records_where_its_batch_started_and_which_dead_letters_wait() -> None:
    import json as _json

    from deltaflow_runtime.table import (
        METADATA_KEY,
        PENDING_DEAD_LETTERS,
        START_OFFSETS,
        commit_metadata,
        entry_offsets,
    )

    text = commit_metadata(
        "app",
        9,
        {"t": {0: 12, 1: 30}},
        "r1",
        start_offsets={"t": {0: 10, 1: 25}},
        pending_dead_letters=[8, 6],
    )
    entry = _json.loads(text)[METADATA_KEY]
    assert entry_offsets(entry, START_OFFSETS) == {"t": {0: 10, 1: 25}}
    assert entry_offsets(entry, "endOffsets") == {"t": {0: 12, 1: 30}}
    assert entry[PENDING_DEAD_LETTERS] == [6, 8]
    plain = _json.loads(commit_metadata("app", 9, None))[METADATA_KEY]
    assert entry_offsets(plain, START_OFFSETS) is None
    assert PENDING_DEAD_LETTERS not in plain
    assert entry_offsets({START_OFFSETS: {"t": {"0": "x"}}}, START_OFFSETS) is None
