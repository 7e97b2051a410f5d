"""Supervised service processes: start on loopback, wait until ready, tail logs, stop by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# Every pid the harness starts is appended here (when set), so the test command can prove after
# the run that none is left, by pid rather than by process name.
PIDFILE_ENV = "DELTAFLOW_PIDFILE"


class ServiceError(RuntimeError):
    """A service did not start or stopped unexpectedly; the message carries its log tail."""


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it, so busy ports are avoided) and
    was not returned before in this process: the OS may hand out a just-closed port again, and
    two listeners of one service (Kafka's controller and pod listeners) once got the same one."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        with _HANDED_OUT_LOCK:
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/<pid>/stat field 22): with the
    pid, names one process, never a later one the pid was reused for. None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_pid(pid: int) -> None:
    """Append a pid and its start time to the run's pid file, if the test command asked for one
    (a process already gone is not recorded: nothing of it can be left)."""
    pidfile = os.environ.get(PIDFILE_ENV)
    started = start_time(pid)
    if pidfile and started is not None:
        with open(pidfile, "a", encoding="utf-8") as f:
            f.write(f"{pid} {started}\n")


def recorded_alive(pidfile: Path) -> list[int]:
    """The recorded processes still running: the same pid and start time. A pid the system
    handed to another process since (a reused pid) is not one of them."""
    alive = []
    for line in pidfile.read_text().splitlines():
        pid, _, started = line.partition(" ")
        if pid.isdigit() and start_time(int(pid)) == started:
            alive.append(int(pid))
    return alive


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log file (empty if it does not exist yet)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Service:
    """One long-running process of the stack, in its own process group, logging to a file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The pid of the running process."""
        if self.proc is None:
            raise ServiceError(f"{self.name} was never started")
        return self.proc.pid

    def start(self) -> None:
        """Start the process (stdout and stderr go to the log file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # its own group: stop() reaches any children too
            )
        record_pid(self.proc.pid)

    def failure(self, what: str) -> ServiceError:
        """An error naming this service, with its log tail attached."""
        return ServiceError(
            f"{self.name} {what}\n--- last lines of {self.log_path} ---\n{tail(self.log_path)}"
        )

    def wait_ready(self, probe: Callable[[], bool], timeout: float, what: str = "ready") -> None:
        """Poll ``probe`` until it returns True; fail with the log tail on exit or timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise self.failure(f"exited with code {self.proc.returncode} before it was {what}")
            try:
                if probe():
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise self.failure(f"was not {what} within {timeout:.0f}s")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it after ``grace`` seconds."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Reap anything left in the group (e.g. a JVM child) so no pid outlives the run.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def tcp_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def main(argv: list[str]) -> int:
    """``python -m devstack.process alive PIDFILE``: print "pid(name)" of each recorded process
    still running, one per line."""
    if len(argv) != 2 or argv[0] != "alive":
        print("usage: python -m devstack.process alive PIDFILE", file=sys.stderr)
        return 2
    for pid in recorded_alive(Path(argv[1])):
        name = (
            Path(f"/proc/{pid}/comm").read_text().strip() if Path(f"/proc/{pid}").exists() else ""
        )
        print(f"{pid}({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
