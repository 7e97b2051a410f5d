"""The data plane against a real Kafka broker and real Spark + Delta; tables read with deltalake.

One SparkSession (the session-wide ``spark`` fixture) runs every stream of this module in-process
through the same StreamRunner the driver pod runs.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
import urllib.request
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from crash_kit import LOCAL_MODE_DRIVER_ENV, Driver, TableWatch
from runtime_kit import (
    Sent,
    create_topic,
    duplicates,
    log_end_offsets,
    manifest,
    order,
    pipeline,
    produce,
    read_table,
    tpos,
    unique,
    wait_for,
)

from deltaflow_runtime.executors import ExecutorControl, LocalExecutors
from deltaflow_runtime.guard import CheckpointMismatchError
from deltaflow_runtime.offsets import DataLossError, KafkaAdmin
from deltaflow_runtime.stream import StreamOptions, StreamRunner, recover_checkpoint
from deltaflow_runtime.table import METADATA_KEY, PENDING_DEAD_LETTERS, RECOVERING_DEAD_LETTERS
from devstack.kafka import KafkaBroker
from devstack.process import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltaflow_api.identity import StreamIdentity

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def drain(spark: SparkSession, document: dict[str, Any], **options: Any) -> StreamRunner:
    """Run the stream until it has written everything Kafka holds now (availableNow)."""
    runner = StreamRunner(spark, pipeline(document), StreamOptions(available_now=True, **options))
    runner.start()
    runner.wait(timeout=600)
    return runner


def spark_tpos(spark: SparkSession, path: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row, read by Spark."""
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("_kafka_topic", "_kafka_partition", "_kafka_offset")
    )
    return [(r[0], int(r[1]), int(r[2])) for r in rows.collect()]


# --- mixed stream: every valid record once, every bad one dead-lettered with its reason ----------

MAX_BYTES = 8192
# Where each hostile or odd value lands is the README's table "What a JSON value must be".
BAD: list[tuple[str, bytes | None, bytes | None]] = [
    ("malformed_json", b"k", b'{"id": 1, "amount": '),  # truncated
    ("malformed_json", b"k", b"not json at all"),
    ("malformed_json", b"k", b"[1, 2, 3]"),  # JSON, but not an object
    ("malformed_json", b"k", b'"just a string"'),
    ("malformed_json", b"k", b"42"),
    ("malformed_json", b"k", b"null"),  # the JSON null, not a tombstone
    ("malformed_json", b"k", b""),  # empty value: PERMISSIVE gives a null struct
    ("malformed_json", b"k", b" \t\r\n "),  # whitespace only
    ("malformed_json", b"k", b'{"id": 5, "amount": 1.0} and trailing text'),
    ("malformed_json", b"k", b'{"id": 19} {"id": 20}'),  # two objects: Spark keeps the first
    ("malformed_json", b"k", b'{"id": 21}}'),
    ("malformed_json", b"k", b"{'id': 22}"),  # single quotes
    ("malformed_json", b"k", b"{id: 23}"),  # unquoted name
    ("malformed_json", b"k", b'{"id": 24, "amount": NaN}'),
    ("malformed_json", b"k", b'{"id": 25, "amount": -Infinity}'),
    ("malformed_json", b"k", b'{"id": 26, "id": 27}'),  # duplicate key: Spark keeps the last
    ("malformed_json", b"k", b'{"id": 28, "x": {"a": 1, "a": 2}}'),  # duplicate, nested
    # duplicates past the first eight keys of an object (the check's hash set), nested and not
    (
        "malformed_json",
        b"k",
        b'{"id": 48, "x": {%s, "k0": 1}}' % b", ".join(b'"k%d": 0' % i for i in range(9)),
    ),
    (
        "malformed_json",
        b"k",
        b'{%s, "id": 49, "k8": 1}' % b", ".join(b'"k%d": 0' % i for i in range(9)),
    ),
    ("malformed_json", b"k", b'{"id": 029}'),  # leading zero
    ("malformed_json", b"k", b'{"id": 30,}'),  # trailing comma
    ("malformed_json", b"k", b'{"id": 31 /* comment */}'),
    ("malformed_json", b"k", b'\xef\xbb\xbf{"id": 32}'),  # byte order mark
    ("malformed_json", b"k", '{"id": 37}'.encode("utf-16-le")),  # valid UTF-8 bytes, NULs
    ("malformed_json", b"k", '{"id": 38}'.encode("utf-16-be")),
    ("malformed_json", b"k", '{"id": 39}'.encode("utf-32-le")),
    ("malformed_json", b"k", b'{"id": 47, "country": "a\x00b"}'),  # a raw NUL in a string
    ("malformed_json", b"k", b'{"id": 33}\xc2\xa0'),  # no-break space is not JSON whitespace
    ("malformed_json", b"k", b'{"id": 34}\x0b'),  # nor is vertical tab
    ("malformed_json", b"k", b'{"id": 35, "country": "a\tb"}'),  # raw control character
    ("malformed_json", b"k", b'{"id": 36, "country": "\\ud800"}'),  # half a surrogate pair
    ("malformed_json", b"k", b'{"a": ' * 1001 + b"1" + b"}" * 1001),  # nested too deep
    ("schema_mismatch", b"k", b'{"id": "abc", "amount": 1.0, "country": "DE"}'),
    ("schema_mismatch", b"k", b'{"id": 7, "amount": "lots", "country": "DE"}'),
    ("schema_mismatch", b"k", b'{"id": 9999999999999999999999, "country": "DE"}'),
    ("schema_mismatch", b"k", b'{"id": "12"}'),  # a string for a number: not converted
    ("schema_mismatch", b"k", b'{"id": 40.5}'),  # no silent truncation
    ("schema_mismatch", b"k", b'{"id": 41, "amount": true}'),
    ("schema_mismatch", b"k", b'{"id": 42, "amount": 1e400}'),  # would be Infinity
    ("schema_mismatch", b"k", b'{"id": 43, "ts": 1700000000000}'),  # epoch ms: year 55,800
    ("schema_mismatch", b"k", b'{"id": 44, "ts": 1700000000}'),  # epoch s: ambiguous too
    ("schema_mismatch", b"k", b'{"id": 45, "ts": "yesterday"}'),
    ("schema_mismatch", b"k", b"{}"),  # none of the schema's fields
    ("schema_mismatch", b"k", b'{"ID": 46, "Country": "DE"}'),  # names are case-sensitive
    # Poison pills and silent reinterpretations: each is refused alone, the batch goes on.
    ("schema_mismatch", b"k", b'{"id": 50, "price": 100E+2147483647}'),  # BigDecimal overflow
    ("schema_mismatch", b"k", b'{"id": 51, "price": 1E-2147483647}'),
    ("schema_mismatch", b"k", b'{"id": 52, "price": 1.0E-2147483647}'),  # no BigDecimal at all
    ("schema_mismatch", b"k", b'{"id": 53, "price": "1.005"}'),  # a string Spark would round
    ("schema_mismatch", b"k", b'{"id": 54, "price": "1,000.5"}'),  # grouping, read loosely
    ("schema_mismatch", b"k", b'{"id": 55, "price": 1.005}'),
    ("schema_mismatch", b"k", b'{"id": 56, "price": 123456789.5}'),  # beyond DECIMAL(10,2)
    ("schema_mismatch", b"k", b'{"id": 57, "price": " 12"}'),
    ("schema_mismatch", b"k", b'{"id": 58, "price": "1e99999999999"}'),
    ("schema_mismatch", b"k", b'{"id": 59, "day": "2026-02-30"}'),  # no such day
    ("schema_mismatch", b"k", b'{"id": 60, "day": "2026-01-31T10:00"}'),  # time dropped
    ("schema_mismatch", b"k", b'{"id": 61, "day": "2026"}'),  # would be 2026-01-01
    ("schema_mismatch", b"k", b'{"id": 62, "ts": "2026-01"}'),
    ("schema_mismatch", b"k", b'{"id": 63, "ts": "2026-01-31T12:00:00+25:00"}'),  # no such offset
    ("schema_mismatch", b"k", b'{"id": 64, "ts": "2026-01-31T24:00:00Z"}'),
    ("schema_mismatch", b"k", b'{"id": 65, "ts": "2026-01-31T12:00:00.123456789Z"}'),  # nanos
    ("schema_mismatch", b"k", b'{"id": 66, "ratio": 1e-50}'),  # FLOAT underflow: 0
    ("schema_mismatch", b"k", b'{"id": 67, "amount": 1e-400}'),  # DOUBLE underflow: 0
    ("schema_mismatch", b"k", b'{"id": 68, "ratio": 3.5e38}'),  # FLOAT overflow: Infinity
    ("missing_required_field", b"k", b'{"amount": 1.0, "country": "DE"}'),
    ("missing_required_field", b"k", b'{"id": null, "amount": 1.0}'),
    ("tombstone", b"k", None),
    ("tombstone", None, None),  # a tombstone without key is still a tombstone first
    ("missing_key", None, order(424242)),
    ("invalid_utf8", b"k", b'{"id": 11, "country": "\xff\xfe"}'),
    ("invalid_utf8", b"k", b"\xc3\x28"),
    ("record_too_large", b"k", order(7) + b" " * (MAX_BYTES + 500)),
]


# Valid values at the edges, with what their row holds.
GOOD_ODD: list[tuple[bytes, dict[str, Any]]] = [
    (b' \t\r\n{"id": 900001, "country": "DE"} \n', {"country": "DE"}),  # RFC 8259 whitespace
    (b'{"id": 900002, "country": {"city": "Berlin"}}', {"country": '{"city":"Berlin"}'}),
    (b'{"id": 900003, "country": 12}', {"country": "12"}),  # STRING takes any value's JSON text
    (b'{"id": 900004, "extra": [1, 2], "country": "FR"}', {"country": "FR"}),  # extra: ignored
    (b'{"id": 900005, "ts": "2026-01-31T12:00:00Z"}', {"ts": "2026-01-31 12:00:00"}),
    (b'{"id": 900006, "ts": "2026-01-31T12:00:00"}', {"ts": "2026-01-31 12:00:00"}),  # UTC
    (b'{"id": 900007, "country": "\\ud83d\\ude00"}', {"country": "\U0001f600"}),  # a pair
    (b'{"id": 9223372036854775807}', {"amount": None}),  # BIGINT's maximum
    (b'{"id": 900008, "amount": null, "country": null}', {"amount": None, "country": None}),
    (b'{"id": 900009, "amount": 1E2}', {"amount": 100.0}),
    (b'{"id": 900010, "country": "\\u00e9t\xc3\xa9"}', {"country": "\u00e9t\u00e9"}),
    # DECIMAL, DATE, FLOAT values taken exactly as written
    (b'{"id": 900020, "price": "1.50"}', {"price": Decimal("1.50")}),
    (b'{"id": 900021, "price": 1e3}', {"price": Decimal("1000.00")}),
    (b'{"id": 900022, "price": 0.0100}', {"price": Decimal("0.01")}),  # zeros are no rounding
    (b'{"id": 900023, "price": "-0.5"}', {"price": Decimal("-0.50")}),
    (b'{"id": 900024, "price": 99999999.99}', {"price": Decimal("99999999.99")}),
    (b'{"id": 900025, "day": "2024-02-29"}', {"day": date(2024, 2, 29)}),
    (b'{"id": 900026, "ratio": 0e-50}', {"ratio": 0.0}),
    (b'{"id": 900027, "ts": "2026-01-31T12:00:00.1234560Z"}', {"ts": "2026-01-31 12:00:00"}),
    # more than eight keys, none twice; escapes other than \u, a backslash at each 8-byte phase
    (b'{%s, "id": 900011}' % b", ".join(b'"k%d": 0' % i for i in range(12)), {"amount": None}),
    *(
        (
            b'{"id": %d, "country": "%s\\n\\"x"}' % (900012 + n, b"a" * n),
            {"country": "a" * n + '\n"x'},
        )
        for n in range(8)
    ),
]


def test_mixed_stream_lands_every_record_exactly_once(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("mixed")
    create_topic(bootstrap, topic, partitions=4)
    countries = ["DE", "FR", "US", "JP"]
    n_valid = 100_000
    valid = [(str(i).encode(), order(i, countries[i % 4])) for i in range(n_valid)]
    # Every bad kind, three times over, spread through the valid records (so across partitions
    # and batches); the last records are valid (group offsets vs table max + 1).
    records: list[tuple[bytes | None, bytes | None]] = list(valid)
    bad = [(key, value) for _ in range(3) for _, key, value in BAD]
    step = n_valid // (len(bad) + 1)
    for n, rec in reversed(list(enumerate(bad, start=1))):
        records.insert(n * step, rec)
    for n, rec in enumerate(GOOD_ODD, start=1):
        records.insert(n * step + 1, (b"k", rec[0]))
    expected_reason = {value: reason for reason, _, value in BAD}
    valued = [value for _, _, value in BAD if value is not None]
    assert len(set(valued)) == len(valued), "BAD values must be distinct"
    sent = produce(bootstrap, topic, records)
    assert len(sent) == len(records)

    port = free_port()
    doc = manifest(
        unique("mixed"),
        topic,
        bootstrap,
        tmp_path,
        format_={
            "type": "json",
            "schema": "id BIGINT NOT NULL, amount DOUBLE, ts TIMESTAMP, country STRING, "
            "price DECIMAL(10,2), day DATE, ratio FLOAT",
            "keyRequired": True,
            "maxRecordBytes": MAX_BYTES,
        },
        source={"maxOffsetsPerTrigger": 30_000},
        sink={"partitionBy": ["country"]},
    )
    runner = drain(runtime_spark, doc, metrics_port=port)
    ident = runner.pipeline.identity

    table = read_table(ident.table_path)
    dead = read_table(ident.dead_letter_table_path)
    table_keys, dead_keys = tpos(table), tpos(dead)
    assert duplicates(table_keys) == []
    assert duplicates(dead_keys) == []

    is_bad = {s.tpo: s for s in sent if s.value in expected_reason}
    good = {s.tpo: s for s in sent if s.tpo not in is_bad}
    assert set(table_keys) == set(good), "the table must hold exactly the valid records"
    assert set(dead_keys) == set(is_bad), "the dead-letter table must hold exactly the bad ones"
    assert len(table_keys) + len(dead_keys) == len(sent)

    # Each valid record's content, and each bad record's reason and raw bytes.
    by_tpo = dict(zip(table_keys, table, strict=True))
    for key, s in good.items():
        assert by_tpo[key]["id"] == json.loads(s.value or b"")["id"]
    _check_odd_rows(by_tpo, list(good.values()))
    for row in dead:
        s = is_bad[(row["_kafka_topic"], row["_kafka_partition"], row["_kafka_offset"])]
        assert row["reason"] == expected_reason[s.value], (s, row["reason"], row["detail"])
        assert row["value"] == s.value
        assert row["key"] == s.key
        assert row["detail"], row
        assert row["_kafka_timestamp"] is not None
    reasons = {r["reason"] for r in dead}
    assert reasons == {r for r, _, _ in BAD}

    # Spark reads the same table (the two readers agree).
    assert sorted(spark_tpos(runtime_spark, ident.table_path)) == sorted(table_keys)

    # Protocol-simple tables: any Delta reader reads them.
    from deltalake import DeltaTable

    protocol = DeltaTable(ident.table_path).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)

    _check_consumer_group(bootstrap, topic, ident.consumer_group, table_keys)
    _check_metrics(runner, port, topic, good=len(good), sent=len(sent), dead=dead)


def _check_odd_rows(by_tpo: dict[tuple[str, int, int], dict[str, Any]], good: list[Sent]) -> None:
    """The valid values at the edges landed with what the README's table says they hold."""
    odd = dict(GOOD_ODD)
    landed = [s for s in good if s.value in odd]
    assert len(landed) == len(GOOD_ODD)
    for s in landed:
        row = by_tpo[s.tpo]
        for column, want in odd[s.value or b""].items():
            got = row[column]
            if column == "ts" and got is not None:
                got = str(got)[:19]
            assert got == want, (s.value, column, row[column])


def _check_consumer_group(
    bootstrap: str, topic: str, group_id: str, table_keys: list[tuple[str, int, int]]
) -> None:
    """The consumer group, read with a standard admin client, sits at table max + 1 = log end."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])
    committed = {
        tp.partition: tp.offset
        for tp in group[group_id].result().topic_partitions
        if tp.topic == topic
    }
    table_max: dict[int, int] = {}
    for _, p, o in table_keys:
        table_max[p] = max(table_max.get(p, -1), o)
    assert committed == {p: o + 1 for p, o in table_max.items()}
    assert committed == log_end_offsets(bootstrap, topic)


def _check_metrics(
    runner: StreamRunner, port: int, topic: str, *, good: int, sent: int, dead: list[dict[str, Any]]
) -> None:
    """The driver's /metrics, as Prometheus scrapes them."""
    runner.poll_kafka_once()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()

    def metric(name: str, labels: str = "") -> float:
        match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
        assert match, f"{name}{labels} missing from /metrics"
        return float(match.group(1))

    assert metric("deltaflow_rows_written_total") == good
    assert metric("deltaflow_input_rows_total") == sent
    for reason in {r["reason"] for r in dead}:
        n = sum(1 for r in dead if r["reason"] == reason)
        assert metric("deltaflow_dead_letter_rows_total", f'{{reason="{reason}"}}') == n
    assert metric("deltaflow_last_committed_batch_id") >= 3  # several batches (30k each)
    assert metric("deltaflow_dead_letters_pending") == 0  # committed at the stop at the latest
    # Every batch's progress report reached the metrics (a listener, not a poll that misses some)
    assert metric("deltaflow_batch_duration_seconds_count") == metric(
        "deltaflow_batches_total", '{outcome="committed"}'
    )
    assert metric("deltaflow_table_version") >= 3
    for p in range(4):
        labels = f'{{partition="{p}",topic="{topic}"}}'
        assert metric("deltaflow_kafka_lag_records", labels) == 0
        assert metric("deltaflow_kafka_retention_headroom_records", labels) > 0
    assert metric("deltaflow_processed_rows_per_second") > 0
    assert metric("deltaflow_batch_phase_seconds", '{phase="write_table"}') > 0
    assert metric("deltaflow_batch_duration_seconds_count") >= 3
    # The pinned trigger (runtime_kit's manifest: 1s), and the last batch's freshness.
    assert metric("deltaflow_trigger_interval_seconds") == 1.0
    oldest = metric("deltaflow_record_age_at_commit_seconds", '{record="oldest"}')
    assert oldest >= metric("deltaflow_record_age_at_commit_seconds", '{record="newest"}') >= 0


# --- avro and raw --------------------------------------------------------------------------------

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "country", "type": ["null", "string"], "default": None},
        ],
    }
)


def _varint(n: int) -> bytes:
    zigzag = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def avro_order(i: int, country: str | None) -> bytes:
    """Avro binary of the Order schema above, encoded by hand (independent of Spark)."""
    body = _varint(i)
    if country is None:
        return body + _varint(0)
    raw = country.encode()
    return body + _varint(1) + _varint(len(raw)) + raw


def test_avro_and_raw_formats(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("avro")
    create_topic(bootstrap, topic, partitions=2)
    good = [(b"k", avro_order(i, None if i % 3 == 0 else "DE")) for i in range(200)]
    bad = [(b"k", b"\x80"), (b"k", b""), (b"k", b"\xff" * 12), (b"k", None)]
    sent = produce(bootstrap, topic, good + bad)
    doc = manifest(
        unique("avro"), topic, bootstrap, tmp_path, format_={"type": "avro", "schema": AVRO_SCHEMA}
    )
    ident = drain(runtime_spark, doc).pipeline.identity
    table, dead = read_table(ident.table_path), read_table(ident.dead_letter_table_path)
    good_tpos = {s.tpo for s in sent if s.value is not None and (s.key, s.value) in good}
    assert set(tpos(table)) == good_tpos
    assert len(table) == len(good_tpos)
    ids = sorted(r["id"] for r in table)
    assert ids == list(range(200))
    assert {r["country"] for r in table if r["id"] % 3 == 0} == {None}
    assert sorted(r["reason"] for r in dead) == sorted(
        ["malformed_avro", "malformed_avro", "malformed_avro", "tombstone"]
    )

    # raw, read through a topic pattern
    raw_topic = unique("raw")
    create_topic(bootstrap, raw_topic, partitions=1)
    raw_sent = produce(bootstrap, raw_topic, [(b"a", b"line one"), (None, b"two"), (b"c", b"\xff")])
    doc = manifest(unique("raw"), raw_topic, bootstrap, tmp_path, format_={"type": "raw"})
    doc["spec"]["source"] = {"bootstrapServers": bootstrap, "topicPattern": f"{raw_topic[:-4]}.*"}
    ident = drain(runtime_spark, doc).pipeline.identity
    rows = read_table(ident.table_path)
    assert sorted(((r["key"], r["value"]) for r in rows), key=str) == sorted(
        [(b"a", "line one"), (None, "two")], key=str
    )
    dead = read_table(ident.dead_letter_table_path)
    assert [(r["reason"], r["value"]) for r in dead] == [("invalid_utf8", b"\xff")]
    assert len(rows) + len(dead) == len(raw_sent)


BASKET_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Basket",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "prices", "type": {"type": "map", "values": "long"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        ],
    }
)


def _avro_string(text: bytes) -> bytes:
    return _varint(len(text)) + text


def avro_basket(i: int, tags: list[bytes], prices: dict[bytes, int], kind: int = 0) -> bytes:
    """Avro binary of BASKET_SCHEMA, by hand: arrays and maps as one block and the 0 count."""
    body = _varint(i)
    if tags:
        body += _varint(len(tags)) + b"".join(_avro_string(t) for t in tags)
    body += _varint(0)
    if prices:
        body += _varint(len(prices))
        body += b"".join(_avro_string(k) + _varint(v) for k, v in prices.items())
    body += _varint(0)
    return body + _varint(kind)


def _confluent(schema_id: int, body: bytes) -> bytes:
    """A value in the Confluent wire format: magic byte 0, the schema id, the Avro record."""
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def test_avro_values_hold_exactly_one_record_in_the_framing_the_spec_names(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    # Plain framing: bytes after the record are refused, not ignored.
    plain_good = [avro_order(i, "DE") for i in range(1, 51)]
    plain_bad = {
        avro_order(300, "DE") + b"\x00\x01": "2 of",  # trailing bytes
        avro_order(301, "DE") + avro_order(302, "FR"): "bytes left after the record",
        # Confluent-framed, read as plain: it decoded as {id: 0, country: null} before.
        _confluent(7, avro_order(303, "DE")): "bytes left after the record",
        # Length prefixes the decoder would allocate before reading: refused, not an OOM.
        _varint(304) + _varint(1) + _varint(1 << 30): "declares 1073741824 bytes",
        _varint(305) + _varint(1) + _varint(1 << 62) + b"x": "declares 4611686018427387904",
        _varint(306) + _varint(1) + _varint(-3) + b"abc": "negative length",
        _varint(307) + _varint(2) + b"DE": "union index 2",
    }
    # Confluent framing with the ids the schema was registered under.
    framed_good = [_confluent(7, avro_order(i, "FR")) for i in range(1000, 1050)]
    framed_good.append(_confluent(9, avro_order(1050, None)))
    framed_bad = {
        _confluent(8, avro_order(400, "DE")): "framed with schema id 8",
        avro_order(401, "DE"): "not in the Confluent wire format",  # no header
        b"\x00\x00": "not in the Confluent wire format",  # too short for one
        b"\x01" + (7).to_bytes(4, "big") + avro_order(402, "DE"): "not in the Confluent",
        _confluent(7, avro_order(403, "DE") + b"\xff"): "bytes left after the record",
        _confluent(7, b"\x80"): "does not decode",  # a varint that never ends
    }
    # Arrays, maps and enums: counts bounded by the bytes that follow them.
    basket_good = [
        avro_basket(1, [b"a", b"b"], {b"x": 1}),
        avro_basket(2, [], {}, kind=1),
        avro_basket(3, [b""] * 40, {b"k%d" % n: n for n in range(20)}),
    ]
    basket_bad = {
        _varint(10) + _varint(1 << 30): "declares 1073741824 items",  # 2^30 tags, 5 bytes
        _varint(11) + _varint(0) + _varint(1 << 30) + b"x": "declares 1073741824 items",
        _varint(12) + _varint(-(1 << 30)) + _varint(4) + b"abcd": "declares 1073741824 items",
        _varint(13) + _varint(-1) + _varint(1 << 40): "block declares 1099511627776 bytes",
        _varint(14) + _varint(1) + _varint(1 << 30) + _varint(0) + _varint(0) + _varint(0): (
            "declares 1073741824 bytes"
        ),
        avro_basket(15, [b"a"], {}, kind=2): "enum Kind index 2",
        avro_basket(16, [b"a"], {})[:-2]: "the value ends inside",
    }
    cases = [
        ({"type": "avro", "schema": AVRO_SCHEMA}, plain_good, plain_bad),
        ({"type": "avro", "schema": BASKET_SCHEMA}, basket_good, basket_bad),
        (
            {
                "type": "avro",
                "schema": AVRO_SCHEMA,
                "avroWireFormat": "confluent",
                "schemaIds": [7, 9],
            },
            framed_good,
            framed_bad,
        ),
    ]
    for format_, good, bad in cases:
        topic = unique("avro-frame")
        create_topic(bootstrap, topic, partitions=2)
        sent = produce(bootstrap, topic, [(b"k", v) for v in [*good, *bad]])
        doc = manifest(unique("avro-frame"), topic, bootstrap, tmp_path, format_=format_)
        ident = drain(runtime_spark, doc).pipeline.identity
        table, dead = read_table(ident.table_path), read_table(ident.dead_letter_table_path)
        by_value = {s.tpo: s.value for s in sent}
        assert sorted(by_value[t] or b"" for t in tpos(table)) == sorted(good)
        assert len(table) + len(dead) == len(sent)
        for row in dead:
            assert row["reason"] == "malformed_avro", row
            assert bad[row["value"]] in row["detail"], (row["value"], row["detail"])
        assert sorted(r["value"] for r in dead) == sorted(bad)


# --- a backlog of refused records: one batch, no per-record state on the driver ------------------

BACKLOG = 1_100_000


def _produce_backlog(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce ``BACKLOG`` records cycling through ``values``, fast (no per-record callback)."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    for i in range(BACKLOG):
        while True:
            try:
                producer.produce(topic, key=b"k", value=values[i % len(values)])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise KafkaException("records left unsent after 120 s")


def test_a_batch_of_over_a_million_refused_records_goes_through(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """A backlog read from the start under a schema it does not fit: every record refused, in one
    batch, with the driver's default memory (1g): nothing per record is held on the driver."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    bootstrap = kafka.bootstrap_servers
    topic = unique("backlog")
    create_topic(bootstrap, topic, partitions=2)
    # id is BIGINT in the schema: a string id is schema_mismatch; one record in 100k is valid.
    _produce_backlog(bootstrap, topic, [b'{"id": "A-%d"}' % n for n in range(99_999)] + [order(7)])
    ends = log_end_offsets(bootstrap, topic)
    assert sum(ends.values()) == BACKLOG

    doc = manifest(
        unique("backlog"), topic, bootstrap, tmp_path, source={"maxOffsetsPerTrigger": 2_000_000}
    )
    runner = drain(runtime_spark, doc)
    report = runner.writer.last_report if runner.writer is not None else None
    assert report is not None
    assert report.batch_id == 0, "one batch held the whole backlog"
    assert report.dead_letters == {"schema_mismatch": BACKLOG - 11}
    assert report.written == 11

    ident = runner.pipeline.identity
    seen = []
    for path in (ident.table_path, ident.dead_letter_table_path):
        arrow = DeltaTable(path).to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset"])
        seen.append(arrow)
    for partition, end in ends.items():
        offsets = []
        for arrow in seen:
            mask = pc.equal(arrow["_kafka_partition"], partition)
            offsets.extend(arrow.filter(mask)["_kafka_offset"].to_pylist())
        # Every offset of the partition in exactly one of the two tables.
        assert len(offsets) == end, partition
        assert sorted(offsets) == list(range(end)), partition


# --- checkpoint loss: refused, nothing written, and an exact recovery ----------------------------


def _commits_by_batch(path: str) -> dict[int, tuple[int, int]]:
    """Each commit of a stream's local table: its batch (txnVersion) -> (its commitInfo
    timestamp in ms, its version in the log)."""
    log = Path(path.removeprefix("file://")) / "_delta_log"
    commits: dict[int, tuple[int, int]] = {}
    for file in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in file.read_text().splitlines()]
        at = next(int(a["commitInfo"]["timestamp"]) for a in actions if "commitInfo" in a)
        for action in actions:
            if "txn" in action:
                commits[int(action["txn"]["version"])] = (at, int(file.stem))
    return commits


def _assert_recovered_after_the_first_table_commit(
    ident: StreamIdentity, killed: int, recovered: list[int]
) -> None:
    """The restart after a kill at batch ``killed``: its first new batch's table commit came
    first, and says the ``recovered`` batches still waited (a crash then would find them);
    then the recovered dead letters (under ``killed``), then the dead letters of its own
    batches."""
    table = _commits_by_batch(ident.table_path)
    dead = _commits_by_batch(ident.dead_letter_table_path)
    assert table[killed + 1][0] <= dead[killed][0], (table, dead)
    assert all(log > dead[killed][1] for b, (_, log) in dead.items() if b > killed), dead
    first = Path(ident.table_path.removeprefix("file://")) / "_delta_log"
    first /= f"{table[killed + 1][1]:020d}.json"
    info = next(a for a in map(json.loads, first.read_text().splitlines()) if "commitInfo" in a)
    entry = json.loads(info["commitInfo"]["userMetadata"])[METADATA_KEY]
    assert entry[RECOVERING_DEAD_LETTERS] == killed, entry
    assert set(recovered) <= set(entry[PENDING_DEAD_LETTERS]), entry


def _versions(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).version()


def test_a_half_written_batch_is_finished_only_by_the_routing_that_started_it(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """The crash window between the table commit and the dead-letter commit, then a spec change:
    replaying the batch under the new routing could put a record in both tables or neither."""
    bootstrap = kafka.bootstrap_servers
    topic = unique("routing")
    create_topic(bootstrap, topic, partitions=2)
    big = order(5000, "DE") + b" " * 600  # valid, and over a maxRecordBytes of 512
    sent = produce(
        bootstrap, topic, [(b"%d" % i, order(i)) for i in range(300)] + [(b"k", b"x"), (b"k", big)]
    )
    doc = manifest(unique("routing"), topic, bootstrap, tmp_path)
    ident = drain(runtime_spark, doc).pipeline.identity
    table_version = _versions(ident.table_path)
    assert len(read_table(ident.dead_letter_table_path)) == 1  # b"x"

    # The state a crash right after the table's commit of the last batch leaves behind.
    checkpoint = Path(ident.checkpoint_path.removeprefix("file://"))
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    # (the local file system's checksum file too: a crash before commits/N leaves neither)
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    shutil.rmtree(ident.dead_letter_table_path.removeprefix("file://"))

    # A spec that routes differently (the big order would now be a dead letter): refused.
    changed = json.loads(json.dumps(doc))
    changed["spec"]["format"]["maxRecordBytes"] = 512
    with pytest.raises(Exception, match="RoutingChangedError") as refused:
        drain(runtime_spark, changed)
    message = str(refused.value)
    assert f"batch {last}" in message
    assert "run the previous spec and image until this one batch commits" in message
    assert not Path(ident.dead_letter_table_path.removeprefix("file://")).exists()
    assert _versions(ident.table_path) == table_version

    # The spec that started the batch finishes it: every record in exactly one table.
    drain(runtime_spark, doc)
    table, dead = read_table(ident.table_path), read_table(ident.dead_letter_table_path)
    assert sorted(tpos(table) + tpos(dead)) == sorted(s.tpo for s in sent)
    assert [r["value"] for r in dead] == [b"x"]
    assert _versions(ident.table_path) == table_version


def test_records_gone_from_kafka_before_a_replay_do_not_wedge_the_stream(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path, caplog: Any
) -> None:
    """The crash window between the table commit and the dead-letter commit, then records of
    that batch deleted from Kafka (retention, or compaction): the batch is read again for its
    dead letters and holds fewer records than its table commit. The dead letters still there
    are written, those gone are counted and logged, and the stream goes on (it stopped with
    BatchMismatch on every start before)."""
    from confluent_kafka import TopicPartition

    bootstrap = kafka.bootstrap_servers
    topic = unique("vanish")
    create_topic(bootstrap, topic, partitions=1)
    records = [(b"%d" % i, b"{" if i % 10 == 3 else order(i)) for i in range(200)]
    sent = produce(bootstrap, topic, records)
    doc = manifest(unique("vanish"), topic, bootstrap, tmp_path, source={"failOnDataLoss": False})
    ident = drain(runtime_spark, doc).pipeline.identity
    table_version = _versions(ident.table_path)
    table = read_table(ident.table_path)
    assert len(table) == 180

    checkpoint = Path(ident.checkpoint_path.removeprefix("file://"))
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    shutil.rmtree(ident.dead_letter_table_path.removeprefix("file://"))
    # The first 100 records go: 90 valid ones (in the table) and 10 refused ones.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 100)]).values():
        future.result(timeout=30)

    caplog.set_level(logging.WARNING, logger="deltaflow.sink")
    drain(runtime_spark, doc)
    dead = read_table(ident.dead_letter_table_path)
    assert sorted(r["_kafka_offset"] for r in dead) == [
        s.tpo[2] for s in sent if s.value == b"{" and s.tpo[2] >= 100
    ]
    assert _versions(ident.table_path) == table_version  # nothing written twice
    assert sorted(tpos(read_table(ident.table_path))) == sorted(tpos(table))
    vanished = [
        json.loads(r.getMessage()) for r in caplog.records if "records_vanished" in r.getMessage()
    ]
    assert [(v["valid"], v["refused"]) for v in vanished] == [(90, "unknown")]

    # The stream goes on past the batch.
    more = produce(bootstrap, topic, [(b"k", order(i)) for i in range(500, 520)] + [(b"k", b"{")])
    drain(runtime_spark, doc)
    assert {s.tpo for s in more} <= set(
        tpos(read_table(ident.table_path)) + tpos(read_table(ident.dead_letter_table_path))
    )


def test_dead_letters_of_many_batches_commit_together_and_survive_a_kill_before_their_commit(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path, caplog: Any
) -> None:
    """Dead letters collected inline wait in the driver and are committed together: fewer
    dead-letter commits than batches. A driver process SIGKILLed while some wait leaves them
    recorded in the table's commits; the next start reads those batches again from Kafka and
    commits them, each record exactly once."""
    bootstrap = kafka.bootstrap_servers
    topic = unique("waiting")
    create_topic(bootstrap, topic, partitions=2)
    records = [(b"%d" % i, b"{" if i % 50 == 7 else order(i)) for i in range(3600)]
    sent = produce(bootstrap, topic, records[:600])
    doc = manifest(
        unique("waiting"), topic, bootstrap, tmp_path, source={"maxOffsetsPerTrigger": 100}
    )
    ident = pipeline(doc).identity
    runner = drain(runtime_spark, doc)
    assert runner.writer is not None
    first_run = runner.writer.table_batch
    assert first_run >= 5
    dead = read_table(ident.dead_letter_table_path)
    table = read_table(ident.table_path)
    assert sorted(tpos(table) + tpos(dead)) == sorted(s.tpo for s in sent)
    assert sorted(r["value"] for r in dead) == [b"{"] * 12
    # Batch 0 of a new stream commits its own (where it started is not recorded); the five or
    # more after it wait and go in one commit at the end of the drain.
    assert _versions(ident.dead_letter_table_path) + 1 < first_run
    # One commit, each row with its own batch.
    assert len({r["batch_id"] for r in dead}) > 2
    assert max(r["batch_id"] for r in dead) <= first_run

    # A driver process reads a backlog and is SIGKILLed while dead letters of several of its
    # batches wait (a backlog is not caught up, so none is committed before a minute).
    more = produce(bootstrap, topic, records[600:])
    config = tmp_path / "waiting.yaml"
    config.write_text(json.dumps(doc))
    local = ident.table_path.removeprefix("file://")
    checkpoint = ident.checkpoint_path.removeprefix("file://")
    table_watch = TableWatch(local, checkpoint)
    dead_watch = TableWatch(local + "_dead_letter", checkpoint)
    driver = Driver(
        config, tmp_path / "driver-work", tmp_path / "driver.log", env=LOCAL_MODE_DRIVER_ENV
    )
    try:
        wait_for(
            lambda: table_watch.last_batch() >= max(dead_watch.last_batch(), first_run) + 3,
            300,
            "three batches' dead letters waiting",
            interval=0.05,
        )
    finally:
        driver.kill()
    killed_at = table_watch.last_batch()
    waiting_since = dead_watch.last_batch()
    assert waiting_since < killed_at, "the kill came after a dead-letter commit"

    # The next start finds them in the table's commits, reads them again and commits them
    # right after its first table commit (a backlog waits: the restart's first commit does not
    # wait for them), before any other dead-letter commit; it drains the rest in larger batches
    # (the batch size decides no record's route, and the batch Spark planned before the kill
    # replays with its own range).
    larger = json.loads(json.dumps(doc))
    larger["spec"]["source"]["maxOffsetsPerTrigger"] = 1000
    with caplog.at_level(logging.INFO, logger="deltaflow.sink"):
        drain(runtime_spark, larger)
    recovered = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith('{"event":"dead_letters_recovered"')
    ]
    assert len(recovered) == 1
    assert recovered[0]["txnVersion"] == killed_at
    assert all(waiting_since < b <= killed_at for b in recovered[0]["batches"])
    _assert_recovered_after_the_first_table_commit(ident, killed_at, recovered[0]["batches"])
    dead = read_table(ident.dead_letter_table_path)
    table = read_table(ident.table_path)
    assert duplicates(tpos(table) + tpos(dead)) == []
    assert sorted(tpos(table) + tpos(dead)) == sorted(s.tpo for s in sent + more)
    assert sorted(r["value"] for r in dead) == [b"{"] * 72


def test_lost_or_replaced_checkpoint_is_refused_and_recoverable(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("ckpt")
    create_topic(bootstrap, topic, partitions=2)
    first = produce(bootstrap, topic, [(b"%d" % i, order(i)) for i in range(1000)])
    doc = manifest(unique("ckpt"), topic, bootstrap, tmp_path, source={"maxOffsetsPerTrigger": 400})
    ident = drain(runtime_spark, doc).pipeline.identity
    checkpoint = Path(ident.checkpoint_path.removeprefix("file://"))
    backup = tmp_path / "checkpoint-backup"
    shutil.copytree(checkpoint, backup)

    # The one bad record comes last: the stream's last batch is the only one with a dead letter.
    second = produce(
        bootstrap, topic, [(b"%d" % i, order(i)) for i in range(1000, 1500)] + [(b"k", b"x")]
    )
    drain(runtime_spark, doc)
    version, dead_version = _versions(ident.table_path), _versions(ident.dead_letter_table_path)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert [r["batch_id"] for r in read_table(ident.dead_letter_table_path)] == [last]

    # 1. Checkpoint deleted while the table is intact: refused, nothing written.
    shutil.rmtree(checkpoint)
    third = produce(bootstrap, topic, [(b"%d" % i, order(i)) for i in range(1500, 1800)])
    runner = StreamRunner(runtime_spark, pipeline(doc), StreamOptions(available_now=True))
    with pytest.raises(CheckpointMismatchError) as refused:
        runner.start()
    assert refused.value.reason == "CheckpointLost"
    message = str(refused.value)
    assert "does not exist" in message
    assert "recover-checkpoint" in message
    assert "restore the checkpoint" in message
    assert ident.txn_app_id in message
    assert runner.query is None
    assert not checkpoint.exists(), "the refused start must not create a checkpoint"
    assert _versions(ident.table_path) == version
    assert _versions(ident.dead_letter_table_path) == dead_version

    # 2. An older copy put back: refused as well.
    shutil.copytree(backup, checkpoint)
    with pytest.raises(CheckpointMismatchError) as behind:
        StreamRunner(runtime_spark, pipeline(doc), StreamOptions(available_now=True)).start()
    assert behind.value.reason == "CheckpointBehind"
    assert _versions(ident.table_path) == version

    # 3. The documented recovery: rebuild from the offsets the table recorded, then resume. The
    # previous driver also died between the last batch's table and dead-letter commits (the
    # dead-letter table holds only that batch): the rebuilt checkpoint replays that batch.
    shutil.rmtree(checkpoint)
    shutil.rmtree(ident.dead_letter_table_path.removeprefix("file://"))
    recovered = recover_checkpoint(runtime_spark, pipeline(doc))
    ends = _max_per_partition(first + second)
    assert recovered.end_offsets == {topic: {p: ends[p] + 1 for p in (0, 1)}}
    assert recovered.batch == last
    assert recovered.replayed
    assert not list(tmp_path.rglob("*.rebuilding-*")), "the staging directory is renamed away"
    drain(runtime_spark, doc)
    assert [r["value"] for r in read_table(ident.dead_letter_table_path)] == [b"x"]
    table = tpos(read_table(ident.table_path))
    dead = tpos(read_table(ident.dead_letter_table_path))
    assert duplicates(table + dead) == []
    assert sorted(table + dead) == sorted(s.tpo for s in first + second + third)


def test_a_table_restored_under_its_checkpoint_is_refused(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """RESTORE TABLE to an older version keeps the stream's transaction id: resuming would skip
    the batches the restore took out, and rewriting them would be skipped by Delta. The guard
    refuses; undoing the restore, as it advises, resumes exactly once."""
    bootstrap = kafka.bootstrap_servers
    topic = unique("restore")
    create_topic(bootstrap, topic, partitions=2)
    sent = produce(bootstrap, topic, [(b"%d" % i, order(i)) for i in range(900)] + [(b"k", b"x")])
    doc = manifest(
        unique("restore"), topic, bootstrap, tmp_path, source={"maxOffsetsPerTrigger": 300}
    )
    ident = drain(runtime_spark, doc).pipeline.identity
    before_restore = _versions(ident.table_path)
    assert before_restore >= 3
    runtime_spark.sql(f"RESTORE TABLE delta.`{ident.table_path}` TO VERSION AS OF 1")
    assert 0 < len(read_table(ident.table_path)) < 900
    more = produce(bootstrap, topic, [(b"%d" % i, order(i)) for i in range(900, 1000)])

    with pytest.raises(CheckpointMismatchError) as refused:
        drain(runtime_spark, doc)
    assert refused.value.reason == "TableBehind"
    undo = f"RESTORE TABLE delta.`{ident.table_path}` TO VERSION AS OF {before_restore}"
    assert undo in str(refused.value)
    assert _versions(ident.table_path) == before_restore + 1, "a refused start writes nothing"

    runtime_spark.sql(undo)
    drain(runtime_spark, doc)
    table, dead = read_table(ident.table_path), read_table(ident.dead_letter_table_path)
    assert duplicates(tpos(table) + tpos(dead)) == []
    assert sorted(tpos(table) + tpos(dead)) == sorted(s.tpo for s in sent + more)


def _max_per_partition(sent: list[Sent]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in sent:
        out[s.tpo[1]] = max(out.get(s.tpo[1], -1), s.tpo[2])
    return out


# --- retention deleted unread records: a loud failure naming the partition and the gap ----------


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, before)])
    for future in futures.values():
        future.result(timeout=30)


def test_offsets_lost_to_retention_fail_loudly(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("loss")
    create_topic(bootstrap, topic, partitions=2)
    for p in (0, 1):
        produce(bootstrap, topic, [(b"k", order(i)) for i in range(200)], partition=p)
    doc = manifest(unique("loss"), topic, bootstrap, tmp_path)
    ident = drain(runtime_spark, doc).pipeline.identity
    version = _versions(ident.table_path)
    for p in (0, 1):
        produce(bootstrap, topic, [(b"k", order(i)) for i in range(200)], partition=p)
    # Retention (here: an explicit delete, the same log-start move) takes unread records 200..299.
    _delete_records(bootstrap, topic, 0, 300)

    with pytest.raises(DataLossError) as lost:
        StreamRunner(runtime_spark, pipeline(doc), StreamOptions(available_now=True)).start()
    message = str(lost.value)
    assert f"{topic} partition 0: the stream resumes at offset 200" in message
    assert "earliest retained offset is 300 (100 records lost)" in message
    assert "partition 1" not in message
    assert [(g.partition, g.missing) for g in lost.value.gaps] == [(0, 100)]
    assert _versions(ident.table_path) == version, "nothing may be written"

    # While running: retention takes records the stream has not fetched yet; the batch that needs
    # them fails in Spark, and the runtime says which partition lost how many.
    # The first batch takes all 10 records there are; the next trigger is 30 s later, so the
    # records produced meanwhile are deleted before any batch could fetch them (a 1 s trigger
    # once fetched them first on a loaded machine: nothing was lost, and the test waited in vain).
    topic2 = unique("loss-live")
    create_topic(bootstrap, topic2, partitions=1)
    produce(bootstrap, topic2, [(b"k", order(i)) for i in range(10)])
    doc2 = manifest(
        unique("loss-live"),
        topic2,
        bootstrap,
        tmp_path,
        source={"maxOffsetsPerTrigger": 10},
        spec={"trigger": {"interval": "30s"}},
    )
    runner = StreamRunner(runtime_spark, pipeline(doc2), StreamOptions())
    runner.start()
    writer = runner.writer
    assert writer is not None
    wait_for(lambda: writer.last_report is not None, 120, "the first batch")
    produce(bootstrap, topic2, [(b"k", order(i)) for i in range(10, 130)])
    _delete_records(bootstrap, topic2, 0, 80)
    with pytest.raises(DataLossError) as live:
        runner.wait(timeout=240)
    assert f"{topic2} partition 0: the stream resumes at offset 10" in str(live.value)
    assert "earliest retained offset is 80 (70 records lost)" in str(live.value)


# --- maintenance next to the running stream ------------------------------------------------------


def test_optimize_and_vacuum_while_the_stream_appends(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("maint")
    create_topic(bootstrap, topic, partitions=2)
    # With optimized writes: the stream's shuffle by country (parse.Router.by_table_partition)
    # under OPTIMIZE and VACUUM, still exactly once.
    sink = {"partitionBy": ["country"], "optimizeWrite": True}
    doc = manifest(unique("maint"), topic, bootstrap, tmp_path, sink=sink)
    runner = StreamRunner(runtime_spark, pipeline(doc), StreamOptions())
    runner.start()
    sent: list[Sent] = []
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set():
            chunk = [(b"k", order(i + j, ["DE", "FR", "US"][j % 3])) for j in range(100)]
            sent.extend(produce(bootstrap, topic, chunk))
            i += 100
            time.sleep(0.3)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    try:
        _optimize_and_vacuum(runtime_spark, bootstrap, runner, sent, stop)
    finally:
        stop.set()
        thread.join(60)
        if runner.query is not None and runner.query.isActive:
            runner.query.stop()


def _optimize_and_vacuum(
    runtime_spark: SparkSession,
    bootstrap: str,
    runner: StreamRunner,
    sent: list[Sent],
    stop: threading.Event,
) -> None:
    """OPTIMIZE while the stream appends; VACUUM refused under 168 h, fine at 168 h."""
    from deltalake import DeltaTable

    from deltaflow_runtime.maintenance import UnsafeRetentionError, optimize_table, vacuum_table

    path = runner.pipeline.identity.table_path
    wait_for(lambda: _versions_or(path) >= 5, 180, "five stream commits (small files)")
    # Optimized writes: each batch wrote one file per country it held, whatever the two Kafka
    # partitions its tasks read.
    appends = [h for h in DeltaTable(path).history() if h["operation"] == "WRITE"]
    assert appends
    assert all(int(h["operationMetrics"]["numFiles"]) <= 3 for h in appends), appends
    report = optimize_table(
        runtime_spark,
        path,
        partition_by=["country"],
        z_order_by=[],
        recent_partitions_only=False,
    )
    assert report.reason == "OptimizeCompleted"
    assert report.files_removed > report.files_added > 0
    assert report.bytes_removed > 0
    assert report.bytes_added > 0
    assert "compacted into" in report.message
    assert runner.query is not None
    assert runner.query.isActive
    # At the OPTIMIZE commit: same rows, fewer files (deltalake time travel).
    history = DeltaTable(path).history()
    opt_version = max(h["version"] for h in history if h["operation"] == "OPTIMIZE")
    before, after = (
        DeltaTable(path, version=opt_version - 1),
        DeltaTable(path, version=opt_version),
    )
    assert len(after.file_uris()) < len(before.file_uris())
    assert after.to_pyarrow_table().num_rows == before.to_pyarrow_table().num_rows

    # VACUUM under 168 h is refused without the override, and Delta's own check stays on.
    with pytest.raises(UnsafeRetentionError, match="allowUnsafeRetention"):
        vacuum_table(runtime_spark, path, retention_hours=1, allow_unsafe=False)
    from delta.tables import DeltaTable as SparkDeltaTable

    with pytest.raises(Exception, match="retention"):
        SparkDeltaTable.forPath(runtime_spark, path).vacuum(1)
    safe = vacuum_table(runtime_spark, path, retention_hours=168, allow_unsafe=False)
    assert safe.reason == "VacuumCompleted"
    assert safe.files_removed == 0
    assert runner.query.isActive
    stop.set()
    time.sleep(1)  # the producer's last chunk
    _vacuum_then_keep_streaming(runtime_spark, bootstrap, runner, sent, report.files_removed)


def _vacuum_then_keep_streaming(
    spark: SparkSession, bootstrap: str, runner: StreamRunner, sent: list[Sent], compacted: int
) -> None:
    """With the override (and the stream idle: nothing in flight) VACUUM removes the compacted
    files; the stream keeps running and both readers read the table correctly."""
    from deltaflow_runtime.maintenance import optimize_table, vacuum_table

    path = runner.pipeline.identity.table_path
    topic = runner.pipeline.ingestion.spec.source.topic
    assert topic is not None
    query = runner.query
    assert query is not None
    wait_for(lambda: _drained(bootstrap, runner), 120, "the stream to drain")
    wait_for(lambda: not query.status["isTriggerActive"], 60, "an idle trigger")
    # Even idle, a batch could start while VACUUM lists the table: 0 h is raised to a margin, so
    # the compacted files (removed seconds ago) stay.
    guarded = vacuum_table(spark, path, retention_hours=0, allow_unsafe=True)
    assert guarded.files_removed == 0
    assert "retention raised from 0 h to 1 h" in guarded.message
    # This test knows nothing can start (the topic is drained and nothing is produced): no margin.
    unsafe = vacuum_table(
        spark, path, retention_hours=0, allow_unsafe=True, in_flight_margin_hours=0
    )
    assert unsafe.files_removed >= compacted
    assert spark.conf.get("spark.databricks.delta.retentionDurationCheck.enabled") == "true"

    # Compact everything, then write one partition only (JP) for the recent-partitions OPTIMIZE.
    optimize_table(
        spark, path, partition_by=["country"], z_order_by=[], recent_partitions_only=False
    )
    sent.extend(produce(bootstrap, topic, [(b"k", order(10**6 + i, "JP")) for i in range(500)]))
    wait_for(lambda: _drained(bootstrap, runner), 120, "the stream to drain again")
    assert query.isActive
    query.stop()
    runner.wait()
    rows = tpos(read_table(path))
    assert duplicates(rows) == []
    assert sorted(rows) == sorted(s.tpo for s in sent)
    assert sorted(spark_tpos(spark, path)) == sorted(rows)

    # Only the partitions written since the last OPTIMIZE (JP), Z-ORDERed by id.
    recent = optimize_table(
        spark, path, partition_by=["country"], z_order_by=["id"], recent_partitions_only=True
    )
    assert recent.reason == "OptimizeCompleted"
    assert recent.details["scope"] == "1 partition(s) written since the last OPTIMIZE"
    assert "Z-ORDER by id" in recent.message
    assert sorted(tpos(read_table(path))) == sorted(rows)


def _versions_or(path: str) -> int:
    try:
        return _versions(path)
    except Exception:
        return -1


def _drained(bootstrap: str, runner: StreamRunner) -> bool:
    assert runner.writer is not None
    topic = runner.pipeline.ingestion.spec.source.topic
    assert topic is not None
    admin = KafkaAdmin({"bootstrap.servers": bootstrap})
    latest = admin.latest_offsets(admin.partitions([topic]))
    return runner.writer.committed_offsets == latest


def test_a_local_mode_driver_reports_its_task_threads_and_their_busy_time(
    runtime_spark: SparkSession,
) -> None:
    """What the scaling agent of a local-mode driver (minExecutors 0) reports: no executors,
    the driver's task threads as slots, and its tasks' time as busy time (the capacity the
    autoscaler rates a count of 0 by); a count asked for is not applied (a move is a new driver)."""
    assert not ExecutorControl(runtime_spark).supported()  # local mode: no executors to set
    control = LocalExecutors(runtime_spark)
    before = control.totals()
    runtime_spark.range(0, 3_000_000, numPartitions=4).selectExpr("sum(id * 2)").collect()
    after = control.totals()
    assert (after.registered, after.cores) == ([], runtime_spark.sparkContext.defaultParallelism)
    assert after.busy_core_seconds > before.busy_core_seconds
    # Idle, no task: no busy time (Spark's executorList() counts the driver's uptime instead).
    time.sleep(2)
    assert control.totals().busy_core_seconds == after.busy_core_seconds
    assert control.set_target(3) == []
    assert (control.target, control.released) == (0, 0)
