"""Every pod matching a selector, as a `kubectl get --watch` stream reports it: how many existed
at once, and which were added. Judges "never two drivers at a time" from the API server's events."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from devstack.kube import KubeControlPlane


class PodWatch:
    """Watches pods of ``namespace`` matching ``selector`` until :meth:`stop`."""

    def __init__(self, kube: KubeControlPlane, namespace: str, selector: str) -> None:
        self.proc = subprocess.Popen(
            [
                str(kube.kubectl_bin), "-n", namespace, "get", "pods", "-l", selector,
                "--watch", "--output-watch-events", "-o", "json",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=kube.env(),
        )  # fmt: skip
        self.events: list[tuple[str, str]] = []  # (event type, pod uid)
        self.seen: list[tuple[float, str, str, str]] = []  # (epoch seconds, type, name, component)
        self.alive: set[str] = set()
        self.max_alive = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = ""
        for line in self.proc.stdout:
            buf += line
            try:  # one event per line, or pretty-printed over several: parse when complete
                event = json.loads(buf)
            except json.JSONDecodeError:
                continue
            buf = ""
            meta = event["object"]["metadata"]
            uid = meta["uid"]
            self.events.append((event["type"], uid))
            component = (meta.get("labels") or {}).get("app.kubernetes.io/component", "")
            self.seen.append((time.time(), event["type"], meta["name"], component))
            if event["type"] == "DELETED":
                self.alive.discard(uid)
            else:
                self.alive.add(uid)
            self.max_alive = max(self.max_alive, len(self.alive))

    def added(self) -> set[str]:
        """Uids of the pods created while watching (and those that existed when it began)."""
        return {uid for kind, uid in self.events if kind == "ADDED"}

    def stop(self) -> None:
        """Stop watching."""
        self.proc.terminate()
        self.proc.wait(10)
