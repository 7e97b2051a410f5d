"""Where a stream's tables and checkpoint live decides whether they outlive its pod: a file path
must sit on a mounted volume (``deltaflow_api.identity.paths_off_volumes``)."""

from __future__ import annotations

from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_api.identity import on_a_volume, paths_off_volumes
from support.manifests import set_field, valid_manifest

LAKE = [{"name": "lake", "claimName": "lake", "mountPath": "/lake"}]

# (case, path, the volumes' mount paths, whether it outlives the pod)
PATHS = [
    ("an object store", "s3a://bucket/orders", [], True),
    ("s3", "s3://bucket/orders", [], True),
    ("file:// with no volume", "file:///lake/orders", [], False),
    ("a bare path with no volume", "/lake/orders", [], False),
    ("under the mount", "file:///lake/orders", ["/lake"], True),
    ("a bare path under the mount", "/lake/orders", ["/lake"], True),
    ("the mount itself", "/lake", ["/lake"], True),
    ("beside the mount, sharing its prefix", "/lakehouse/orders", ["/lake"], False),
    ("above the mount", "/data", ["/data/lake"], False),
    ("under the second mount", "/b/t", ["/a", "/b"], True),
]


@pytest.mark.parametrize(
    ("path", "mounts", "outlives"), [c[1:] for c in PATHS], ids=[c[0] for c in PATHS]
)
def test_a_path_outlives_its_pod_on_an_object_store_or_a_volume(
    path: str, mounts: list[str], outlives: bool
) -> None:
    assert on_a_volume(path, mounts) is outlives


def _ingestion(**fields: Any) -> DeltaIngestion:
    manifest = valid_manifest()
    for path, value in fields.items():
        set_field(manifest, path.replace("__", "."), value)
    return DeltaIngestion.model_validate(manifest)


def test_each_path_off_a_volume_is_named_by_its_field_with_the_fix() -> None:
    local = _ingestion(
        **{"spec__sink__tablePath": "file:///lake/orders", "spec__sink__storage": None,
           "spec__deadLetter__tablePath": None}
    )  # fmt: skip
    problems = paths_off_volumes(local)
    assert [p.split(":")[0] for p in problems] == [
        "spec.sink.tablePath",
        "spec.deadLetter.tablePath (its default, beside the table)",
        "spec.sink.checkpointPath (its default, beside the table)",
    ]
    assert all("mount a PersistentVolumeClaim" in p for p in problems)
    mounted = _ingestion(
        **{"spec__sink__tablePath": "file:///lake/orders", "spec__sink__storage": None,
           "spec__deadLetter__tablePath": None, "spec__volumes": LAKE}
    )  # fmt: skip
    assert paths_off_volumes(mounted) == []
    # A checkpoint set elsewhere than the volume is named alone.
    apart = _ingestion(
        **{
            "spec__sink__tablePath": "file:///lake/orders",
            "spec__sink__checkpointPath": "file:///scratch/orders",
            "spec__sink__storage": None,
            "spec__deadLetter__tablePath": None,
            "spec__volumes": LAKE,
        }
    )
    assert [p.split(":")[0] for p in paths_off_volumes(apart)] == ["spec.sink.checkpointPath"]
    assert paths_off_volumes(_ingestion()) == []  # the object store's
