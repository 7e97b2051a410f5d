"""The minimal hand-written Structured Streaming Kafka -> Delta job the runtime is measured against.

Same Spark settings as ``deltaflow stream`` (the runtime's conf for the same manifest plus the same
command-line conf), same Kafka options, same parse (from_json with the manifest's schema), same
Kafka metadata columns and partitioning; Delta's own streaming sink. No dead letters, no
validation, no guards, no consumer-group commits, no metrics: what a first version usually is.

With ``--validate`` it also routes every record through the runtime's own validity checks
(``deltaflow_runtime.parse``) and writes only the valid ones, still with Delta's streaming sink:
the difference between that and the runtime is the cost of the runtime's own machinery
(exactly-once writes, dead-letter table, guards, consumer-group commits, metrics).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deltaflow_api.cadence import plan_trigger
from deltaflow_runtime import session
from deltaflow_runtime.config import Pipeline, load_ingestion
from deltaflow_runtime.kafka_auth import KafkaMaterial
from deltaflow_runtime.source import spark_kafka_options


def main() -> int:
    """Run the baseline job on a DeltaIngestion config."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--validate", action="store_true", help="apply the runtime's checks")
    parser.add_argument("--interval", type=float, default=None, help="trigger seconds (pin)")
    args = parser.parse_args()
    pipeline = Pipeline.of(load_ingestion(args.config))
    spec = pipeline.ingestion.spec
    extra = dict(c.split("=", 1) for c in args.conf)
    jars = session.find_local_jars()
    if jars:
        extra["spark.jars"] = ",".join(jars)
    spark = session.build_session(
        session.runtime_conf(pipeline.ingestion, master=args.master, extra=extra)
    )
    from pyspark.sql import functions as F  # noqa: N812

    options = spark_kafka_options(
        spec.source, KafkaMaterial({}), min_partitions=spec.tasks_per_batch(scaled_executors=False)
    )
    records = spark.readStream.format("kafka").options(**options).load()
    if args.validate:
        from deltaflow_runtime.parse import (
            parse_spec,
            route,
            split,
            table_pass_columns,
            valid_rows,
        )

        parse = parse_spec(spark, spec.format, spec.sink)
        rows = valid_rows(
            split(route(records, parse), parse).observe("valid", *table_pass_columns()), parse
        )
    else:
        rows = records.select(
            F.from_json(F.col("value").cast("string"), str(spec.format.schema_)).alias("r"),
            F.col("topic").alias("_kafka_topic"),
            F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"),
            F.col("timestamp").alias("_kafka_timestamp"),
        ).select("r.*", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")
    writer = (
        rows.writeStream.format("delta")
        .option("checkpointLocation", pipeline.identity.checkpoint_path + "_baseline")
        .partitionBy(*spec.sink.partition_by)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        # The manifest's pinned interval, or the one its freshness target plans before measuring
        # (or --interval: the one Deltaflow's driver moved to, for a like-for-like cadence).
        interval = args.interval or spec.trigger.pinned_seconds
        if interval is None:
            interval = plan_trigger(spec.freshness.target_seconds, None).interval_seconds
        writer = writer.trigger(processingTime=f"{interval} seconds")
    query = writer.start(pipeline.identity.table_path + "_baseline")
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
