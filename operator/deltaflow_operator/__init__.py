"""Deltaflow operator: reconciles DeltaIngestion resources into running Kafka -> Delta streams."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("deltaflow")
except PackageNotFoundError:  # running from a source tree without the distribution installed
    __version__ = "0.0.0"
