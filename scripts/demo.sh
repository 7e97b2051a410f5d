#!/usr/bin/env bash
# The main job on the local embedded stack (README.md): installs what it needs (cached), starts a
# real Kafka broker, and streams sample records through Spark + delta-spark into a Delta table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash stack/install/python.sh >/dev/null
bash stack/install/spark-jars.sh >/dev/null
bash stack/install/kafka.sh >/dev/null
PYTHONPATH=stack exec .venv/bin/python -m devstack.demo "$@"
