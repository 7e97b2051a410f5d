#!/usr/bin/env bash
# Benchmarks and the full-size crash soak on the local stack (not part of CI: they run for
# minutes and want the machine to themselves). Each prints its figures.
#   bash bench/run.sh throughput [--records 5000000] [--repeat 1]
#   bash bench/run.sh freshness  [--rate 5000] [--seconds 120] [--trigger 5s]
#   bash bench/run.sh trickle    [--rate 10] [--seconds 120] [--trigger 1s]
#   bash bench/run.sh crash      [--records 1000000] [--kills 10]
#   bash bench/run.sh autoscale  [--calibration FILE] [--traces step,ramp,sine,bursts,hot]
#                                [--seconds-per-step 10]   (a model: no broker, no Spark, ~2 s)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: bash bench/run.sh throughput|freshness|trickle|crash|autoscale [args...]}
shift
case "$what" in
  throughput | freshness | trickle) script="bench/$what.py" ;;
  crash) script="bench/crash_soak.py" ;;
  autoscale) script="bench/autoscale.py" ;;
  *) echo "unknown benchmark: $what" >&2; exit 2 ;;
esac
bash stack/install/python.sh >/dev/null
if [ "$what" != autoscale ]; then # the autoscale model needs only the operator's package
  bash stack/install/spark-jars.sh >/dev/null
  bash stack/install/kafka.sh >/dev/null
fi
# Every process the benchmark starts is recorded here and stopped by pid at the end.
pidfile=$(mktemp "${TMPDIR:-/tmp}/deltaflow-bench-pids.XXXXXX")
cleanup() {
  while read -r pid; do
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -9 -- "-$pid" 2>/dev/null || true
  done <"$pidfile"
  rm -f "$pidfile"
}
trap cleanup EXIT
DELTAFLOW_PIDFILE="$pidfile" PYTHONPATH=stack:bench:tests/integration/runtime \
  .venv/bin/python "$script" "$@"
