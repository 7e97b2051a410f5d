"""Names and paths derived from a DeltaIngestion, computed once for the operator and the runtime.

Both sides must agree on these exactly: the checkpoint the driver uses, the dead-letter table, the
Delta transaction id that makes writes idempotent, and the Kafka consumer group that makes lag
visible. A change here changes every running stream's identity: treat it as an API change.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_api.v1alpha1 import DeltaIngestion


@dataclass(frozen=True)
class StreamIdentity:
    """Everything that names one stream outside Kubernetes."""

    table_path: str
    checkpoint_path: str
    dead_letter_table_path: str
    txn_app_id: str  # Delta txnAppId: stable per stream, so a replayed batch is skipped
    consumer_group: str  # end offsets are committed here after each Delta commit


def _parent(path: str) -> str:
    trimmed = path.rstrip("/")
    parent, _, _ = trimmed.rpartition("/")
    return parent


def identity(ingestion: DeltaIngestion) -> StreamIdentity:
    """The stream identity of a DeltaIngestion, with the spec's defaults filled in.

    The default checkpoint sits beside the table (``<parent>/_checkpoints/<namespace>/<name>``),
    never inside it, so VACUUM and readers never touch it.
    """
    sink = ingestion.spec.sink
    table = sink.table_path.rstrip("/")
    ns, name = ingestion.namespace, ingestion.name
    checkpoint = sink.checkpoint_path or f"{_parent(table)}/_checkpoints/{ns}/{name}"
    dead_letter = ingestion.spec.dead_letter.table_path or f"{table}_dead_letter"
    return StreamIdentity(
        table_path=table,
        checkpoint_path=checkpoint.rstrip("/"),
        dead_letter_table_path=dead_letter.rstrip("/"),
        txn_app_id=f"deltaflow/{ns}/{name}",
        consumer_group=f"deltaflow.{ns}.{name}",
    )
