"""Deltaflow data plane: the Spark Structured Streaming writer and the maintenance jobs."""
