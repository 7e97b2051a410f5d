"""The scaling channel between the operator and a driver: annotations on the driver pod, written
through the API server (see docs/autoscaling.md). The operator writes the executor count it
wants; the driver writes what it measured and runs. Neither side trusts what it reads."""

from __future__ import annotations

# The executor count the operator asks of the driver (a decimal integer).
DESIRED_ANNOTATION = "deltaflow.io/executors-desired"
# The driver's report: JSON, its measurements and what it runs (autoscaler.observe reads it).
REPORT_ANNOTATION = "deltaflow.io/driver-report"
# A stream pool's report of all its members, on the pool's pod: JSON, {"at", "members": {key:
# {...}}}, written once per round for every member (one API request per pool, not per stream).
POOL_REPORT_ANNOTATION = "deltaflow.io/pool-report"
