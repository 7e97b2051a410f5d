"""Tables, dead letters and checkpoints on s3a:// against a real S3-compatible server (MinIO, built
and started by the stack), read back with the independent ``deltalake`` reader from the bucket.

Two writers (the stream and a maintenance job, in two processes) commit to the same table through
``S3ConditionalLogStore``: one conditional PUT per commit, so a version is created once or the
writer is told it lost the race. The first tests show that on the store itself, with writers in
separate JVMs; OPTIMIZE and VACUUM jobs committing while the stream appends on the bucket run as
pods in tests/e2e/test_running_pods.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from crash_kit import write_config
from runtime_kit import (
    create_topic,
    duplicates,
    example_on_topic,
    log_end_offsets,
    order,
    produce,
    read_table,
    run_cli,
    tpos,
    unique,
    wait_for,
)

from deltaflow_api.failures import FailureReason
from deltaflow_runtime.maintenance import ENV_TERMINATION_LOG
from deltaflow_runtime.session import CHECKPOINT_FILE_MANAGER, PINNED_CONF
from devstack.demo import BROKEN
from devstack.kafka import KafkaBroker
from devstack.minio import REGION, ObjectStore, start_s3proxy
from devstack.process import record_pid
from devstack.spark import spark_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "orders.yaml"
RACE_SOURCE = Path(__file__).resolve().parent / "java" / "LogStoreRace.java"


def _s3a_conf(store: ObjectStore) -> dict[str, str]:
    """Hadoop settings for S3A on this store, with conditional creates (the log store's)."""
    return {
        "fs.s3a.endpoint": store.endpoint,
        "fs.s3a.endpoint.region": REGION,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": store.access_key,  # test-only: the product uses the env
        "fs.s3a.secret.key": store.secret_key,
        "fs.s3a.create.conditional.enabled": "true",
    }


def test_the_logstore_lets_exactly_one_of_many_writers_create_a_version(
    object_store: ObjectStore, runtime_spark: SparkSession
) -> None:
    from py4j.protocol import Py4JJavaError

    sc = runtime_spark.sparkContext
    jvm: Any = sc._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(sc._jsc.hadoopConfiguration())
    for key, value in _s3a_conf(object_store).items():
        conf.set(key, value)
    store = jvm.io.deltaflow.storage.S3ConditionalLogStore(conf)
    commit = f"s3a://lake/race-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000000.json"
    path = jvm.org.apache.hadoop.fs.Path(commit)

    def write(line: str, overwrite: bool = False) -> str:
        lines = jvm.java.util.ArrayList()
        lines.add(line)
        try:
            store.write(path, lines.iterator(), overwrite, conf)
        except Py4JJavaError as error:
            return str(error.java_exception.getClass().getName())
        return "created"

    # (The race of many writers for one version: the next test, in separate processes.)
    winner = 0
    assert write(json.dumps({"commitInfo": {"writer": winner}})) == "created"
    # A retry of the winner's own PUT (its answer lost) is not a conflict; anyone else's is.
    assert write(json.dumps({"commitInfo": {"writer": winner}})) == "created"
    assert write(json.dumps({"commitInfo": {"writer": -1}})).endswith("FileAlreadyExistsException")
    # Files Delta may replace (overwrite=true) are replaced.
    assert write(json.dumps({"commitInfo": {"writer": -2}}), overwrite=True) == "created"

    # A commit larger than S3A's multipart size (a big OPTIMIZE's) is conditional too.
    conf.set("fs.s3a.multipart.size", "5M")
    conf.set("fs.s3a.multipart.threshold", "5M")
    store = jvm.io.deltaflow.storage.S3ConditionalLogStore(conf)
    commit = f"s3a://lake/race-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000001.json"
    path = jvm.org.apache.hadoop.fs.Path(commit)
    big = json.dumps({"commitInfo": {"padding": "x" * (7 << 20)}})
    assert write(big) == "created"
    assert write(big.replace("x", "y")).endswith("FileAlreadyExistsException")
    with object_store.filesystem().open_input_stream(commit.removeprefix("s3a://")) as stored:
        assert stored.read().decode().rstrip("\n") == big

    # The start-up probe finds that this store honours If-None-Match, and leaves no object
    # (S3A may keep the table folder's own marker: the table is about to be created there).
    table = jvm.org.apache.hadoop.fs.Path(f"s3a://lake/probe-{uuid.uuid4().hex[:8]}")
    fs = table.getFileSystem(conf)
    probe = jvm.io.deltaflow.storage.S3ConditionalLogStore.probeConditionalCreate
    assert probe(fs, table) is None
    # Processes that start together (the stream, its OPTIMIZE and VACUUM jobs) probe the same
    # table at once: none may take another's probe away (a CI run's VACUUM job failed so, on
    # NoSuchKey reading its probe back after the OPTIMIZE job had deleted the shared folder).
    with ThreadPoolExecutor(max_workers=4) as pool:
        said = list(pool.map(lambda _: probe(fs, table), range(24)))
    assert said == [None] * 24, said
    left = [str(s.getPath().getName()) for s in fs.listStatus(table)] if fs.exists(table) else []
    assert [name for name in left if name.startswith("_deltaflow_probe")] == [], left


def test_restarting_a_stream_on_the_object_store_leaves_no_threads_behind(
    object_store: ObjectStore, runtime_spark: SparkSession
) -> None:
    """A query's start (a trigger re-plan, a pool member's restart, a move) must not leave AWS
    SDK threads behind: with Spark's default checkpoint file manager each start built two
    uncached S3A instances (ten sdk-ScheduledExecutor threads), and a pool JVM was OOM-killed
    holding 300 of them."""
    sc = runtime_spark.sparkContext
    jvm: Any = sc._jvm
    bucket = unique("restarts")
    object_store.create_bucket(bucket)
    hadoop = sc._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in _s3a_conf(object_store).items():  # this bucket's only
        hadoop.set(key.replace("fs.s3a.", f"fs.s3a.bucket.{bucket}.", 1), value)
    runtime_spark.conf.set(CHECKPOINT_FILE_MANAGER, PINNED_CONF[CHECKPOINT_FILE_MANAGER])

    def sdk_threads() -> int:
        threads = jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
        return sum(1 for t in threads if str(t.getName()).startswith("sdk-ScheduledExecutor"))

    def run_once() -> None:
        query = (
            runtime_spark.readStream.format("rate").option("rowsPerSecond", 5).load()
            .writeStream.format("delta")
            .option("checkpointLocation", f"s3a://{bucket}/_checkpoints/rate")
            .trigger(processingTime="1 second")
            .start(f"s3a://{bucket}/rate")
        )  # fmt: skip
        try:
            wait_for(lambda: query.lastProgress, 60, "a batch of the query")
        finally:
            query.stop()

    run_once()
    after_first = sdk_threads()
    for _ in range(3):
        run_once()
    assert sdk_threads() == after_first


def test_four_writer_processes_race_for_one_version_and_exactly_one_creates_it(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    # Each writer its own JVM (java/LogStoreRace.java, run from source), as the stream's driver
    # and its OPTIMIZE and VACUUM jobs are: all connected first, then released together. Four
    # (eight took 27-37 s of the suite on 2 cores, JVM starts mostly); the probe test races 24.
    import pyspark

    classpath = ":".join(
        [str(Path(pyspark.__file__).parent / "jars" / "*"), *(str(j) for j in spark_jars())]
    )
    conf = _s3a_conf(object_store)
    env = {**os.environ, "RACE_CONF": "\n".join(f"{k}={v}" for k, v in conf.items())}
    commit = f"s3a://lake/race-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000000.json"
    go = tmp_path / "go"
    # Compiled once (javac), so each writer's JVM only starts, rather than compiling it again.
    classes = tmp_path / "classes"
    subprocess.run(
        ["javac", "-cp", classpath, "-d", str(classes), str(RACE_SOURCE)], check=True, timeout=120
    )
    classpath = f"{classes}:{classpath}"
    writers = []
    for i in range(4):
        argv = ["java", "-cp", classpath, "LogStoreRace", commit, str(i), str(go)]
        writers.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env))
        record_pid(writers[-1].pid)
    try:
        for writer in writers:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "ready"
        go.touch()
        outcomes = {i: w.communicate(timeout=120)[0].strip() for i, w in enumerate(writers)}
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
    assert Counter(outcomes.values()) == {"created": 1, "exists": 3}, outcomes
    (winner,) = (i for i, outcome in outcomes.items() if outcome == "created")
    with object_store.filesystem().open_input_stream(commit.removeprefix("s3a://")) as stored:
        assert json.loads(stored.read()) == {"commitInfo": {"writer": winner}}


def test_run_the_example_manifest_on_the_object_store_lands_good_and_bad_records_exactly_once(
    kafka: KafkaBroker, object_store: ObjectStore, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("orders")
    create_topic(bootstrap, topic, partitions=3)
    good = produce(bootstrap, topic, [(str(i).encode(), order(i, "FR")) for i in range(3000)])
    bad = produce(bootstrap, topic, BROKEN)
    ends = log_end_offsets(bootstrap, topic)
    example = example_on_topic(EXAMPLE, topic, tmp_path)

    # The manifest unchanged but for the endpoint, the broker and the topic: s3a://lake/orders
    # on MinIO.
    result = run_cli(
        [
            "run", "-f", str(example),
            "--bootstrap-servers", bootstrap,
            "--storage-endpoint", object_store.endpoint,
            "--available-now", "--metrics-port", "0", "--cores", "2",
        ],
        cwd=tmp_path,
        timeout=600,
        env=object_store.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "table:       s3a://lake/orders" in result.stdout
    assert "checkpoint:  s3a://lake/_checkpoints/data/orders" in result.stdout
    assert not (tmp_path / "deltaflow-local" / "lake").exists()  # nothing went to local disk

    options = object_store.storage_options()
    rows = tpos(read_table("s3a://lake/orders", options))
    dead = tpos(read_table("s3a://lake/orders_dead_letter", options))
    everything = [(topic, p, o) for p, end in ends.items() for o in range(end)]
    assert duplicates(rows + dead) == []
    assert sorted(rows + dead) == sorted(everything)
    assert sorted(dead) == sorted(s.tpo for s in bad)
    assert {s.tpo for s in good} <= set(rows)
    # The checkpoint is on the object store too: a second run finds nothing new to do.
    again = run_cli(
        [
            "run", "-f", str(example), "--bootstrap-servers", bootstrap,
            "--storage-endpoint", object_store.endpoint, "--available-now", "--metrics-port", "0",
        ],
        cwd=tmp_path,
        timeout=600,
        env=object_store.env(),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-4000:]
    assert sorted(tpos(read_table("s3a://lake/orders", options))) == sorted(rows)


def test_wrong_credentials_a_missing_bucket_no_endpoint_or_a_store_ignoring_conditions_fail(
    kafka: KafkaBroker, object_store: ObjectStore, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("s3-errors")
    create_topic(bootstrap, topic, partitions=1)
    wrong_secret = "wrong-" + uuid.uuid4().hex
    # A real server that answers 200 to a second `If-None-Match: *` PUT and replaces the object.
    lax = start_s3proxy(tmp_path / "s3proxy")
    lax.create_bucket("lax")
    cases = [
        # (what, where the tables go, endpoint, env, words the error must hold, failure reason)
        (
            "wrong secret key",
            "s3a://lake/errors",
            object_store.endpoint,
            {**object_store.env(), "AWS_SECRET_ACCESS_KEY": wrong_secret},
            ["bucket 'lake'", object_store.endpoint, "secretAccessKey"],
            FailureReason.OBJECT_STORE_ACCESS_DENIED,
        ),
        (
            "missing bucket",
            "s3a://no-such-bucket",
            object_store.endpoint,
            object_store.env(),
            ["bucket 'no-such-bucket'", "does not exist"],
            FailureReason.BUCKET_NOT_FOUND,
        ),
        (
            "nothing listening at the endpoint",
            "s3a://lake/errors",
            "http://127.0.0.1:9",
            object_store.env(),
            ["bucket 'lake'", "http://127.0.0.1:9", "does not answer"],
            FailureReason.OBJECT_STORE_UNREACHABLE,
        ),
        (
            "store ignoring If-None-Match",
            "s3a://lax/orders",
            lax.endpoint,
            lax.env(),
            ["bucket 'lax'", "If-None-Match", "Nothing was written"],
            FailureReason.CONDITIONAL_PUT_IGNORED,
        ),
    ]
    try:
        secrets = [wrong_secret, object_store.secret_key, lax.secret_key]
        _fail_each(
            cases, kafka, topic, tmp_path, storage=object_store.storage_spec(), secrets=secrets
        )
        # Refused before the first commit: no table, checkpoint or probe object on the store's
        # disk (S3Proxy keeps each object as a file under its data folder).
        assert [p for p in (tmp_path / "s3proxy" / "data").rglob("*") if p.is_file()] == []
    finally:
        lax.stop()


def _fail_each(
    cases: list[tuple[str, str, str, dict[str, str], list[str], FailureReason]],
    kafka: KafkaBroker,
    topic: str,
    tmp_path: Path,
    *,
    storage: dict[str, object],
    secrets: list[str],
) -> None:
    """Run the driver once per case: each exits non-zero, naming what to fix, with the reason in
    the termination message the operator reads, leaking no secret, and within seconds."""
    bootstrap = kafka.bootstrap_servers
    for what, root, endpoint, env, words, reason in cases:
        name = what.replace(" ", "-")
        termination = tmp_path / f"{name}.termination"
        config, _, _ = write_config(
            tmp_path / f"{name}.yaml", "orders", topic, bootstrap, root,
            max_offsets=100,
            storage={**storage, "endpoint": endpoint},
        )  # fmt: skip
        started = time.monotonic()
        result = run_cli(
            ["stream", "--config", str(config), "--master", "local[1]", "--available-now",
             "--metrics-port", "0"],
            cwd=tmp_path,
            timeout=300,
            env={**env, ENV_TERMINATION_LOG: str(termination)},
        )  # fmt: skip
        took = time.monotonic() - started
        output = result.stdout + result.stderr
        print(f"{what} ({took:.0f}s, exit {result.returncode}): {result.stderr.strip()[-600:]}")
        assert result.returncode != 0, f"{what}: {output[-2000:]}"
        message = next(
            (line for line in result.stderr.splitlines() if line.startswith("deltaflow: ")), ""
        )
        for word in words:
            assert word in message, f"{what}: {word!r} not in {message!r}"
        assert json.loads(termination.read_text())["reason"] == reason.value, what
        for secret in secrets:
            assert secret not in output
        # S3A's own retries would take minutes: the probe gives up after one attempt.
        assert took < 120, f"{what}: {took:.0f}s to fail"
