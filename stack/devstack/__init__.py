"""The local stack for tests and the demo: real Kafka, Spark and Kubernetes on loopback.

Each part is installed by its script in ``stack/install`` (cached outside the clone) and started
here as a supervised process on free ports; see :mod:`devstack.process`.
"""
