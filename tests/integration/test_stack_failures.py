"""A part of the stack that cannot start fails loudly, with its log tail, and leaves no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.install import installed_path
from devstack.process import Service, ServiceError, free_port, tcp_open


def test_a_service_that_exits_fails_with_its_log_tail(tmp_path: Path) -> None:
    etcd = installed_path("etcd") / "etcd"
    service = Service("etcd", [str(etcd), "--no-such-flag"], tmp_path / "etcd.log")
    service.start()
    with pytest.raises(ServiceError) as err:
        service.wait_ready(lambda: False, timeout=30)
    message = str(err.value)
    assert "etcd exited with code" in message
    assert "no-such-flag" in message  # etcd's own complaint, from its log
    assert not service.alive()


def test_a_service_that_never_gets_ready_is_stopped_by_pid(tmp_path: Path) -> None:
    port = free_port()
    service = Service("sleeper", ["sleep", "300"], tmp_path / "sleeper.log")
    service.start()
    with pytest.raises(ServiceError, match="was not listening within 1s"):
        service.wait_ready(lambda: tcp_open("127.0.0.1", port), timeout=1, what="listening")
    service.stop(grace=2)
    assert not service.alive()
