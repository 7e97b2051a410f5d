"""Spark settings for local runs: the cached Delta/Kafka jars via ``spark.jars``, no downloads."""

from __future__ import annotations

from pathlib import Path

from devstack.install import installed_path


def spark_jars() -> list[Path]:
    """The Delta and Kafka-connector jars resolved by ``stack/install/spark-jars.sh``."""
    return sorted(installed_path("spark-jars").glob("*.jar"))


def local_spark_conf(work_dir: Path, cores: int = 2) -> dict[str, str]:
    """Spark conf for a small local[N] session with Delta and the Kafka source on the classpath."""
    return {
        "spark.master": f"local[{cores}]",
        "spark.jars": ",".join(str(j) for j in spark_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # The runtime's own commit store for file:// tables (object_store.PINNED_COMMIT_CONF).
        "spark.delta.logStore.file.impl": "io.deltaflow.storage.LocalLinkLogStore",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.local.dir": str(work_dir / "spark-local"),
        "spark.sql.warehouse.dir": str(work_dir / "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work_dir / 'derby'}",
    }
