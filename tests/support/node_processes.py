"""Processes on the local node (this machine: its containers are host processes in their own
namespaces). "Never two drivers" judged where it matters, by the driver processes that run, not
only by the pods the API server lists: a pod of a fixed name is never listed twice, and a
force-deleted pod's container can keep running."""

from __future__ import annotations

import threading
from pathlib import Path


def driver_processes(pod_name: str) -> set[int]:
    """Pids of ``deltaflow stream`` processes whose pod is ``pod_name`` (the kubelet sets
    HOSTNAME to it in every container)."""
    found: set[int] = set()
    hostname = f"HOSTNAME={pod_name}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        is_driver = b"stream" in argv and any(a.endswith(b"deltaflow") for a in argv[:2])
        if is_driver and hostname in environ:
            found.add(int(proc.name))
    return found


def _child_file(parent_pid: int, name: str) -> bytes | None:
    """``/proc/<child>/<name>`` of the first child of ``parent_pid`` (the driver's JVM, which
    PySpark starts under its Python process); None without such a child."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != parent_pid:
                continue
            return (stat.parent / name).read_bytes()
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return None


def child_argv(parent_pid: int) -> list[str]:
    """The command line of a child of ``parent_pid``; empty without one."""
    raw = _child_file(parent_pid, "cmdline") or b""
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def child_mapped_files(parent_pid: int) -> set[str]:
    """Files that a child of ``parent_pid`` has mapped; empty without such a child."""
    maps = (_child_file(parent_pid, "maps") or b"").decode(errors="replace")
    fields_of = (line.split(maxsplit=5) for line in maps.splitlines())
    return {f[5] for f in fields_of if len(f) == 6}


class DriverProcessWatch:
    """Samples :func:`driver_processes` until :meth:`stop`: the most that ran at once, and
    every pid seen."""

    def __init__(self, pod_name: str, period: float = 0.2) -> None:
        self.pod_name, self.period = pod_name, period
        self.max_at_once = 0
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = driver_processes(self.pod_name)
            self.max_at_once = max(self.max_at_once, len(pids))
            self.seen |= pids
            self._stop.wait(self.period)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(10)
