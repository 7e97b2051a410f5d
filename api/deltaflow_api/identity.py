"""Names and paths derived from a DeltaIngestion, computed once for the operator and the runtime.

Both sides must agree on these exactly: the checkpoint the driver uses, the dead-letter table, the
Delta transaction id that makes writes idempotent, and the Kafka consumer group that makes lag
visible. A change here changes every running stream's identity: treat it as an API change.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_api.rules import canonical_path
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


def on_a_volume(path: str, mount_paths: list[str]) -> bool:
    """Whether ``path`` outlives a pod: an object store's, or a file path at or under one of
    ``mount_paths`` (a pod's own disk goes with the pod)."""
    if not path.startswith(("file:", "/")):
        return True
    folder = canonical_path(path)
    return any(folder.startswith(canonical_path(m)) for m in mount_paths)


def paths_off_volumes(ingestion: DeltaIngestion) -> list[str]:
    """The stream's file paths (table, dead-letter table, checkpoint) on no volume of
    spec.volumes, each naming its field and the fix: in a pod they would live in its scratch
    space, and after a replacement the stream would start again from startingOffsets."""
    spec, ident = ingestion.spec, identity(ingestion)
    mounts = [v.mount_path for v in spec.volumes]
    fields = [
        ("spec.sink.tablePath", ident.table_path),
        (
            "spec.deadLetter.tablePath"
            + ("" if spec.dead_letter.table_path else " (its default, beside the table)"),
            ident.dead_letter_table_path,
        ),
        (
            "spec.sink.checkpointPath"
            + ("" if spec.sink.checkpoint_path else " (its default, beside the table)"),
            ident.checkpoint_path,
        ),
    ]
    where = ", ".join(mounts) if mounts else "none"
    return [
        f"{field}: {path} is on no mounted volume (spec.volumes mounts: {where}), so it would "
        "live and die with the pod; mount a PersistentVolumeClaim at a folder holding it "
        "(spec.volumes) or use an object store (s3a://)"
        for field, path in fields
        if not on_a_volume(path, mounts)
    ]
