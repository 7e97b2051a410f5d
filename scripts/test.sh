#!/usr/bin/env bash
# The test command (README.md; CI runs exactly this): install the local stack (cached), run the
# static checks, run every test against the real Kafka, Spark and Kubernetes control plane, then
# prove by pid that no process of the stack outlived the run. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
step() { printf '\n== %s (at %ds)\n' "$*" "$((SECONDS - t0))"; }

step "installing the local stack (cached in ${DELTAFLOW_CACHE:-~/.cache/deltaflow})"
bash stack/install/all.sh

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
step "mypy --strict"
.venv/bin/mypy
# The benchmarks run outside the suite: type-checked here so that a refactor cannot break one
# unseen (bench/baseline_job.py and bench/freshness.py once imported a name that had gone).
MYPYPATH=bench:tests/integration/runtime:tests .venv/bin/mypy bench
step "import contracts"
.venv/bin/lint-imports

step "removing what an interrupted earlier run left on this machine, if anything"
PYTHONPATH=stack .venv/bin/python -m devstack.leftovers --sweep

step "pytest"
pidfile=$(mktemp "${TMPDIR:-/tmp}/deltaflow-pids.XXXXXX")
trap 'rm -f "$pidfile"' EXIT
rc=0
DELTAFLOW_PIDFILE="$pidfile" .venv/bin/pytest "$@" || rc=$?

step "checking that no process of the stack is left"
# By pid and start time: a pid the system handed to another process since is not ours.
left=$(PYTHONPATH=stack .venv/bin/python -m devstack.process alive "$pidfile" | tr '\n' ' ')
started=$(grep -c . "$pidfile" || true)
if [ -n "$left" ]; then
  echo "FAILED: stack processes still running after the run: $left"
  rc=1
else
  echo "all $started processes the stack started are gone"
fi
PYTHONPATH=stack .venv/bin/python -m devstack.leftovers || rc=1
step "done in $((SECONDS - t0))s, exit $rc"
exit "$rc"
