"""Executor autoscaling on Kafka lag: a pure policy (observations in, executor count out)."""
