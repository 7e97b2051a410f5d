#!/usr/bin/env bash
# Benchmarks and the full-size crash soak on the local stack (not part of CI: they run for
# minutes and want the machine to themselves). Each prints its figures.
#   bash bench/run.sh throughput [--records 5000000] [--repeat 1] [--bad-percent 0.2] [--spark-conf K=V]
#   bash bench/run.sh freshness  [--rate 5000] [--seconds 120] [--warmup-seconds 30] [--trigger 5s]
#                                [--optimize-write both] [--jobs deltaflow,baseline]
#   bash bench/run.sh trickle    [--rate 10] [--seconds 120] [--trigger 1s | --freshness 60] [--idle-seconds 60]
#   bash bench/run.sh crash      [--records 1000000] [--kills 10]
#   bash bench/run.sh pool-crash [--members 20] [--kills 10] [--rate 20]   (one pool process, ~15 min)
#   bash bench/run.sh pool-fairness [--backlog 1000000] [--trickles 4]   (one pool process, ~8 min)
#   bash bench/run.sh start      [--starts 5] [--records 40000] [--after stop|kill] [--clean]
#                                [--kinds "local mode,archive,without"]   (a driver's start:
#                                local mode, the JVM class-data archive, neither; ~5 min)
#   bash bench/run.sh json-check [--records 2000000] [--repeat 3]   (Spark only, ~1 min)
#   bash bench/run.sh plan-cost  [--batches 200] [--fields 4]   (Spark only: building a batch's plan)
#   bash bench/run.sh commit-cost [--files 0,10000,50000,200000] [--partitions 1,2,8]
#                                (Spark only: one small commit by table size and tasks, ~10 min)
#   bash bench/run.sh autoscale  [--calibration FILE] [--traces step,ramp,sine,bursts,hot]
#                                [--seconds-per-step 10]   (a model: no broker, no Spark, ~2 s)
#   bash bench/run.sh autoscale-node [--base-rate N] [--factor 3] [--minutes-base 2]
#                                [--minutes-step 3] [--minutes-after 3] [--sample-seconds 2]
#                                (the step on the local node, deltaflow vs fixed-at-max; root,
#                                 the node to itself, ~25 min)
#   bash bench/run.sh control-plane [--counts 1,10,50] [--steady-seconds 60]
#                                (the operator with 1/10/50 resources on the local cluster:
#                                 latency, CPU, memory, API requests; root, ~10 min)
#   bash bench/run.sh pool-rate  [--trickles 3] [--busy-rate 5000] [--minutes-busy 6] [--minutes-after 24]
#                                (one auto member 10 -> 5,000 -> 10 records/s moves out of its
#                                 pool and back; root, the node to itself, ~40 min)
#   bash bench/run.sh pool-fleet [--trickles 40] [--idle 20] [--large-rate 5000] [--minutes 30]
#                                (61 streams on the node: pools' cost per member, freshness,
#                                 exactly once; root, the node to itself, ~60 min)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: bash bench/run.sh throughput|freshness|trickle|crash|pool-crash|pool-fairness|start|json-check|plan-cost|commit-cost|autoscale|autoscale-node|control-plane|pool-rate|pool-fleet [args...]}
shift
case "$what" in
  throughput | freshness | trickle) script="bench/$what.py" ;;
  crash) script="bench/crash_soak.py" ;;
  pool-crash) script="bench/pool_crash.py" ;;
  pool-fairness) script="bench/pool_fairness.py" ;;
  start) script="bench/start.py" ;;
  json-check) script="bench/json_check.py" ;;
  plan-cost) script="bench/plan_cost.py" ;;
  commit-cost) script="bench/commit_cost.py" ;;
  autoscale) script="bench/autoscale.py" ;;
  autoscale-node) script="bench/autoscale_node.py" ;;
  control-plane) script="bench/control_plane.py" ;;
  pool-rate | pool-fleet) script="bench/pool_node.py" ;;
  *) echo "unknown benchmark: $what" >&2; exit 2 ;;
esac
node=false
case "$what" in autoscale-node | control-plane | pool-rate | pool-fleet) node=true ;; esac
if $node; then
  # The whole local stack, as scripts/demo.sh installs it: the node needs root, and the image its
  # pods run is built from the Dockerfile here.
  [ "$(id -u)" = 0 ] || { echo "$what runs a Kubernetes node: run it as root" >&2; exit 2; }
  t0=$SECONDS
  bash stack/install/all.sh
  echo "== installs done in $((SECONDS - t0))s"
else
  bash stack/install/python.sh >/dev/null
fi
case "$what" in
  autoscale | autoscale-node | control-plane | pool-rate | pool-fleet) ;; # the model needs only the operator's package; all.sh did the rest
  *)
    bash stack/install/spark-jars.sh >/dev/null
    bash stack/install/jvm-archive.sh >/dev/null
    bash stack/install/kafka.sh >/dev/null
    ;;
esac
# Every process the benchmark starts is recorded here and stopped by pid at the end.
pidfile=$(mktemp "${TMPDIR:-/tmp}/deltaflow-bench-pids.XXXXXX")
cleanup() {
  # By pid and start time: a pid the system handed to another process since is not ours.
  for pid in $(PYTHONPATH=stack .venv/bin/python -m devstack.process alive "$pidfile" | cut -d'(' -f1); do
    kill -9 -- "-$pid" 2>/dev/null || true
  done
  rm -f "$pidfile"
}
trap cleanup EXIT
status=0
args=("$@")
case "$what" in pool-rate | pool-fleet) args=("${what#pool-}" "$@") ;; esac
DELTAFLOW_PIDFILE="$pidfile" PYTHONPATH=stack:bench:tests/integration/runtime:tests \
  .venv/bin/python "$script" "${args[@]}" || status=$?
if $node && [ "$status" != 2 ]; then # 2: refused, the node was busy
  # The node must leave no mount, namespace, interface, rule or shim behind (as after the demo).
  PYTHONPATH=stack .venv/bin/python -m devstack.leftovers || status=1
fi
exit "$status"
