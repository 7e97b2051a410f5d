"""Which fields of a spec changed, and whether the running driver can take the change in place."""

from __future__ import annotations

from typing import Any

# Applied without touching the driver: scaling bounds, maintenance schedules, suspend, placement
# (a move between a pool and a driver of its own is the reconcile's routing, not a new driver).
IN_PLACE_PREFIXES = ("spec.scaling", "spec.maintenance", "spec.suspend", "spec.placement")


def changed_fields(old: Any, new: Any, path: str = "spec") -> list[str]:
    """Dotted paths of the leaves that differ between two spec documents."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += changed_fields(old.get(key), new.get(key), f"{path}.{key}")
        return out
    return [] if old == new else [path]


def needs_driver_replacement(fields: list[str]) -> bool:
    """True when any changed field is one the running driver cannot apply in place."""
    return any(not f.startswith(IN_PLACE_PREFIXES) for f in fields)
