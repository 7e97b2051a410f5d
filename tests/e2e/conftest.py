"""Fixtures for the operator's end-to-end tests (defined in support.operator_harness)."""

from support.operator_harness import chart_installed, operator, operator_identity

__all__ = ["chart_installed", "operator", "operator_identity"]
