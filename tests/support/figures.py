"""Figures the end-to-end tests measure (times to Running, recovery times), printed at the end."""

from __future__ import annotations

FIGURES: list[str] = []


def record(text: str) -> None:
    """Keep one measured figure for the run's summary (and print it for -s runs)."""
    FIGURES.append(text)
    print(text, flush=True)
