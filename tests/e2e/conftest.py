"""Fixtures for the operator's end-to-end tests (defined in support.operator_harness)."""

from __future__ import annotations

import pytest

from support.figures import FIGURES
from support.operator_harness import chart_installed, operator, operator_identity

__all__ = ["chart_installed", "operator", "operator_identity"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the timings the running-pods tests measured (apply -> Running, recoveries)."""
    if FIGURES:
        terminalreporter.section("figures measured on the local node")
        for line in FIGURES:
            terminalreporter.write_line(line)
