"""Shared test configuration: the real stack's fixtures come from devstack.pytest_plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first: they need no service, so a quick failure shows in seconds rather than
    after the stack has started and the e2e and integration tests have run. The rest keep their
    order (module-scoped fixtures stay together)."""
    items.sort(key=lambda item: not item.path.is_relative_to(UNIT))
