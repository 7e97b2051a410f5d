"""The full-size crash test: >= 1M records produced while the driver is SIGKILLed 10 times at
random moments (some mid-write, some right after the Delta commit, some right after planning),
restarted from the same checkpoint each time; then 0 duplicates and 0 lost, counted by
(topic, partition, offset), and the recovery time of each restart. Same harness as the CI test.

    bash bench/run.sh crash [--records 1000000] [--kills 10] [--rate 3500]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from common import broker, create_topic
from crash_kit import crash_soak


def main() -> int:
    """Run the soak and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=float, default=3500)
    parser.add_argument("--max-offsets", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="deltaflow-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    kafka = broker(work)
    try:
        create_topic(kafka.bootstrap_servers, "soak", 4)
        result = crash_soak(
            kafka.bootstrap_servers,
            "soak",
            work / "soak",
            records=args.records,
            kills=args.kills,
            rate=args.rate,
            max_offsets=args.max_offsets,
        )
    finally:
        kafka.stop()
    print("\n== crash soak")
    print(result.summary())
    recovery = [r.recovery_seconds for r in result.restarts]
    print(
        f"recovery (spawn -> first new commit): min {min(recovery):.1f}s, "
        f"mean {sum(recovery) / len(recovery):.1f}s, max {max(recovery):.1f}s"
    )
    ok = result.duplicates == 0 and result.lost == 0 and result.unexpected == 0
    print("RESULT:", "exactly once held" if ok else "FAILED")
    if args.work is None and ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
