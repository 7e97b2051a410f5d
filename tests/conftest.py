"""Shared test configuration: the real stack's fixtures come from devstack.pytest_plugin."""
