"""The full-size crash test: >= 1M records produced while the driver is SIGKILLed 10 times at
random moments (some mid-write, some right after the Delta commit, some right after planning),
restarted from the same checkpoint each time, with ~1% hostile records in the mix (each refused
with its own reason) and transactions aborted after their records reached the log; then 0
duplicates, 0 lost and 0 aborted records landed across the table and the dead-letter table,
counted by (topic, partition, offset), at least one kill between a batch's table commit and its
dead-letter commit, and the recovery time of each restart. Same harness as the CI test.

    bash bench/run.sh crash [--records 1000000] [--kills 10] [--rate 3500]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import broker, conclude, create_topic, work_dir
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
    work = work_dir(args.work, "deltaflow-crash-")
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
    aimed = [r for r in result.restarts if r.before_dead_letters is not None]
    between = sum(1 for r in aimed if r.before_dead_letters)
    print(
        f"kills right after a table commit: {between} of {len(aimed)} landed before that "
        "batch's dead-letter commit (the recovery must still write its dead letters)"
    )
    ok = (
        result.duplicates == 0
        and result.lost == 0
        and result.unexpected == 0
        and result.mismatched == 0
        and result.in_dead_letter > 0
        and between > 0
        and result.aborted > 0
        and result.aborted_landed == 0
    )
    return conclude(ok, "exactly once held", work, args.work)


if __name__ == "__main__":
    raise SystemExit(main())
