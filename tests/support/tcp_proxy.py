"""A TCP forwarder between a client and a server that can stop passing bytes without closing
anything, as a hung API server or a network that drops packets looks to the client: its
requests are sent and never answered, and new connections open and then say nothing."""

from __future__ import annotations

import socket
import threading
import time


class FreezableProxy:
    """Listens on 127.0.0.1:``port`` and forwards each connection to ``upstream``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def freeze(self) -> None:
        """From now on no byte passes either way (connections stay open)."""
        self.frozen.set()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                data = source.recv(65536)
                if not data:
                    break
                while self.frozen.is_set() and not self._closed.is_set():
                    time.sleep(0.2)  # held, never delivered: the peer waits
                sink.sendall(data)
        except OSError:
            pass
        finally:
            if not self.frozen.is_set():
                for s in (source, sink):
                    s.close()
