"""What building one batch's table-pass plan costs the driver, before any record is read.

A batch's plan is the routing (cheap checks, the strict check, the parse, the reason), the split,
the table pass's observed aggregates and the valid rows. Every column expression is a py4j round
trip from the Python driver to the JVM. Two ways of building it, on the same frame and spec, in
one process (local[1], no Kafka, no Delta, nothing executed):

- ``per batch``: the module functions, as the writer called them for every batch before
  (``valid_rows(split(route(batch, spec), spec).observe(...), spec)``): every expression built
  again;
- ``router``: ``deltaflow_runtime.parse.Router``, as the writer builds it once per stream and
  applies it to each batch.

Prints, per batch: py4j round trips, wall milliseconds, and CPU milliseconds of the Python driver
and of the JVM (from /proc), and the ratios router / per batch. ``--fields`` sets the schema's
width (the cost grows with it).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from common import json_parse_spec, local_session, processes


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every process below it (the JVM is the driver's child)."""
    table = processes()

    def below(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = table[pid].ppid if pid in table else 0
        return False

    return sum(p.seconds for pid, p in table.items() if below(pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--fields", type=int, default=4, help="columns in the value schema")
    args = parser.parse_args()

    import py4j.clientserver
    from pyspark.sql import DataFrame, Observation

    from deltaflow_runtime.parse import (
        Router,
        inline_capacity,
        route,
        split,
        table_pass_columns,
        valid_rows,
    )

    spark = local_session(1, {"spark.sql.session.timeZone": "UTC"})
    schema = ", ".join(
        ["id BIGINT NOT NULL", "amount DOUBLE", "ts TIMESTAMP", "country STRING"][: args.fields]
        + [f"extra_{i} STRING" for i in range(max(0, args.fields - 4))]
    )
    spec = json_parse_spec(spark, schema)
    kafka = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    kafka += "timestamp TIMESTAMP"
    batch = spark.createDataFrame([], kafka)
    inline = inline_capacity(4)

    calls = 0
    connection = py4j.clientserver.ClientServerConnection
    send = connection.send_command

    def counting(self: Any, command: str) -> Any:
        nonlocal calls
        calls += 1
        return send(self, command)

    connection.send_command = counting

    def per_batch() -> DataFrame:
        observed = split(route(batch, spec), spec).observe(
            Observation(), *table_pass_columns(0, inline)
        )
        return valid_rows(observed, spec)

    router = Router(spec)

    def with_router() -> DataFrame:
        observed = router.split(batch).observe(Observation(), *router.table_pass_columns(0, inline))
        return router.valid_rows(observed)

    builds: dict[str, Callable[[], DataFrame]] = {"per batch": per_batch, "router": with_router}
    assert per_batch().schema == with_router().schema, "the two ways build the same table rows"
    figures: dict[str, dict[str, float]] = {}
    for name, build in builds.items():
        for _ in range(20):  # warm-up: JIT, py4j's connection pool
            build()
        calls = 0
        total = _tree_cpu_seconds(os.getpid())
        wall, python = time.perf_counter(), time.process_time()
        for _ in range(args.batches):
            build()
        wall = time.perf_counter() - wall
        python = time.process_time() - python
        total = _tree_cpu_seconds(os.getpid()) - total
        n = args.batches
        figures[name] = {
            "calls": calls / n,
            "wall": 1000 * wall / n,
            "python": 1000 * python / n,
            "jvm": 1000 * max(0.0, total - python) / n,
        }
        f = figures[name]
        print(
            f"{name:9s} {f['calls']:6.0f} py4j calls  {f['wall']:7.1f} ms wall  "
            f"{f['python']:6.1f} ms Python CPU  {f['jvm']:6.1f} ms JVM CPU  per batch",
            flush=True,
        )
    old, new = figures["per batch"], figures["router"]
    print(
        f"\nschema of {args.fields} fields, {args.batches} batches each, local[1]\n"
        + "router / per batch: "
        + ", ".join(
            f"{k} {new[k] / old[k]:.2f}" if old[k] else f"{k} -"
            for k in ("calls", "wall", "python", "jvm")
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
