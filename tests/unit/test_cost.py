"""What a stream costs: the driver's running totals in, per-hour and per-million-records figures
out, read back by the operator into status.cost. Pure; procfs read from a folder laid out as
Linux lays it out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deltaflow_operator.autoscaler.observe import RefusedReportError, _parse, parse_report
from deltaflow_operator.decisions.cost import cost_status
from deltaflow_runtime.cost import (
    CostMeter,
    CostSample,
    LoadMeter,
    ProcessFigures,
    cost_between,
    process_age_seconds,
    process_figures,
)

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def stat_line(pid: int, comm: str, *times: int, rss_pages: int) -> str:
    """A /proc/<pid>/stat line (fields 1-24 matter here)."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", "0", "0", "0", "0"]
    utime, stime, cutime = times
    fields += [str(utime), str(stime), str(cutime), "0", "20", "0", "40", "0", "100"]
    fields += ["1000000", str(rss_pages)]
    return f"{pid} ({comm}) " + " ".join(fields) + " 0 0 0\n"


def test_the_drivers_cpu_and_memory_come_from_its_processes_in_procfs(tmp_path: Path) -> None:
    for pid, comm, user, system, children, pages in [
        (10, "python3", 3 * TICKS, TICKS, 0, 1000),
        # A command name with spaces and parentheses: fields count from its last ')'.
        (11, "java (x) y", 10 * TICKS, 2 * TICKS, TICKS, 50_000),
    ]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            stat_line(pid, comm, user, system, children, rss_pages=pages)
        )
    figures = process_figures([10, 11, 99], proc=tmp_path)  # 99: gone, counts 0
    assert figures.cpu_seconds == pytest.approx(3 + 1 + 10 + 2 + 1)
    assert figures.rss_bytes == 51_000 * PAGE


def test_this_process_is_measured_for_real() -> None:
    before = process_figures([os.getpid()])
    sum(i * i for i in range(2_000_000))  # some CPU
    after = process_figures([os.getpid()])
    assert after.cpu_seconds > before.cpu_seconds
    assert after.rss_bytes > 10 * 2**20


def test_a_process_age_is_uptime_minus_its_start_tick(tmp_path: Path) -> None:
    # Started at tick 100 (stat_line's field 22), the machine up 12.5 s beyond that.
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(stat_line(7, "py (x)", 1, 1, 0, rss_pages=1))
    (tmp_path / "uptime").write_text(f"{100 / TICKS + 12.5:.2f} 99.00\n")
    assert process_age_seconds(proc=tmp_path) == pytest.approx(12.5, abs=0.01)
    assert process_age_seconds(proc=tmp_path / "missing") is None
    real = process_age_seconds()
    assert real is not None
    assert 0 < real < 24 * 3600


def sample(at: float, cpu: float, executor_cpu: float, executors: float, records: int) -> Any:
    return CostSample(at, cpu, executor_cpu, executors, records, 2**30, 3 * 2**30)


# first, last -> cpu s/h, executor s/h, cpu s per million records (None: no records)
RATES = [
    # A trickle: 0.02 cores of driver, one executor held, 36k records an hour.
    (sample(0, 100, 0, 0, 0), sample(600, 112, 0, 600, 6000), 72.0, 3600.0, 2000.0),
    # Executors' CPU counts with the driver's.
    (sample(0, 100, 50, 0, 0), sample(60, 106, 80, 120, 0), 2160.0, 7200.0, None),
    # An idle stream: no record, so no per-record figure.
    (sample(0, 10, 0, 0, 500), sample(3600, 46, 0, 3600, 500), 36.0, 3600.0, None),
]


@pytest.mark.parametrize(("first", "last", "cpu", "executor", "per_million"), RATES)
def test_cost_is_per_hour_and_per_million_records_between_two_samples(
    first: CostSample,
    last: CostSample,
    cpu: float,
    executor: float,
    per_million: float | None,
) -> None:
    body = cost_between(first, last)
    assert body is not None
    assert body["cpuSecondsPerHour"] == cpu
    assert body["executorSecondsPerHour"] == executor
    assert body.get("cpuSecondsPerMillionRecords") == per_million
    assert (body["driverMemoryBytes"], body["executorMemoryBytes"]) == (2**30, 3 * 2**30)
    assert cost_between(last, last) is None


def test_the_meter_integrates_executors_and_keeps_one_window() -> None:
    meter = CostMeter(window_seconds=100.0)
    driver = ProcessFigures(0.0, 2**30)
    assert meter.report() is None
    for t in range(0, 301, 10):
        # Two executors for the first 150 s, one after.
        meter.sample(
            float(t),
            driver=ProcessFigures(t * 0.05, driver.rss_bytes),
            executor_cpu_seconds=t * 0.1,
            executor_rss_bytes=2**31,
            registered_executors=2 if t < 150 else 1,
            records=t * 10,
        )
    body = meter.report()
    assert body is not None
    assert 100 <= body["windowSeconds"] <= 110  # the last window only
    assert body["executorSecondsPerHour"] == 3600.0  # one executor over the window
    assert body["cpuSecondsPerHour"] == pytest.approx(0.15 * 3600)
    assert body["cpuSecondsPerMillionRecords"] == pytest.approx(0.15 / 10 * 1e6)


REPORT: dict[str, Any] = {
    "at": 1_700_000_000.0,
    "queryId": "q",
    "runId": "r",
    "target": 1,
    "registered": 1,
}
COST: dict[str, Any] = {
    "windowSeconds": 600.0,
    "cpuSecondsPerHour": 72.0,
    "executorSecondsPerHour": 3600.0,
    "records": 6000,
    "driverMemoryBytes": 2**30,
    "executorMemoryBytes": 2**31,
    "cpuSecondsPerMillionRecords": 2000.0,
}


def test_the_operator_shows_the_drivers_cost_and_nothing_when_it_does_not_report() -> None:
    report = parse_report(json.dumps({**REPORT, "cost": COST}))
    assert report is not None
    assert report.cost is not None
    status = cost_status(report.cost, reporting=True, now=1_700_000_000.0)
    assert status.cpu_seconds_per_hour == 72.0
    assert status.cpu_seconds_per_million_records == 2000.0
    assert status.executor_seconds_per_million_records is None  # absent: unknown, not 0
    assert status.driver_memory_bytes == 2**30
    assert cost_status(report.cost, reporting=False, now=0.0).cpu_seconds_per_hour is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"cpuSecondsPerHour": -1}, "cost.cpuSecondsPerHour"),
        ({"cpuSecondsPerHour": float("inf")}, "cost.cpuSecondsPerHour"),
        ({"records": 1.5}, "cost.records"),
        ({"driverMemoryBytes": -3}, "cost.driverMemoryBytes"),
    ],
)
def test_a_cost_part_with_impossible_figures_is_left_out_and_the_report_kept(
    change: dict[str, Any], why: str
) -> None:
    from deltaflow_operator.autoscaler.observe import _cost

    with pytest.raises(RefusedReportError, match=why):
        _cost(json.loads(json.dumps({**COST, **change})))
    # What the autoscaler and Ready act on still counts; only the cost is unknown.
    for part in ({**COST, **change}, [1]):
        report = _parse(json.dumps({**REPORT, "cost": part}))
        assert (report.cost, report.target) == (None, 1)


LOAD = [  # (samples (time, running task seconds), cores kept busy)
    ([], None),
    ([(0.0, 0.0), (20.0, 4.0)], None),  # under 30 s of span: too noisy to say
    ([(0.0, 0.0), (30.0, 3.0)], 0.1),
    ([(0.0, 5.0), (10.0, 5.0), (40.0, 5.0)], 0.0),  # idle
    # The window keeps the last five minutes: an old burst is forgotten.
    ([(0.0, 0.0), (10.0, 100.0), (400.0, 100.0), (700.0, 130.0)], 0.1),
]


@pytest.mark.parametrize(("samples", "cores"), LOAD)
def test_a_pool_members_load_is_its_task_time_per_second_over_five_minutes(
    samples: list[tuple[float, float]], cores: float | None
) -> None:
    meter = LoadMeter()
    for at, busy in samples:
        meter.sample(at, busy)
    measured = meter.cores()
    assert measured == (None if cores is None else pytest.approx(cores))
