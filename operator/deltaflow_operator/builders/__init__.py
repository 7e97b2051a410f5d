"""Pure builders: a DeltaIngestion (and settings) in, Kubernetes manifest dicts out.

Nothing here imports kopf, kubernetes or pyspark, or does I/O; every function is unit-tested
without a cluster.
"""
