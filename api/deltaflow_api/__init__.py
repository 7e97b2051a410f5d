"""The DeltaIngestion API: pydantic models (the one source of truth) and the CRD made from them.

Imports nothing heavy: the runtime, the builders and the handlers all read these models.
"""

from deltaflow_api.v1alpha1 import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    DeltaIngestion,
    DeltaIngestionSpec,
    DeltaIngestionStatus,
)

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "DeltaIngestion",
    "DeltaIngestionSpec",
    "DeltaIngestionStatus",
]
