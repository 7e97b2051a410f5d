#!/usr/bin/env bash
# The main job on the local embedded stack (README.md): installs what it needs (cached), starts a
# real Kafka broker and a real Kubernetes cluster whose node runs the project's image (built from
# its Dockerfile), installs the operator with Helm, applies a DeltaIngestion and shows records
# flowing through the driver and executor pods into a Delta table. Needs root (the node).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash stack/install/all.sh
echo "== installs done in $((SECONDS - t0))s"
PYTHONPATH=stack .venv/bin/python -m devstack.demo "$@"
PYTHONPATH=stack .venv/bin/python -m devstack.leftovers
echo "== demo done in $((SECONDS - t0))s"
