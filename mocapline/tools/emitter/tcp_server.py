"""A synthetic Axis Studio TCP server: the same datagrams as over UDP, written back to back to every
connected client (Axis' "TCP server port 7001"; capture is the client).

For tests and the demo it can hold the take while no client is connected (``hold_s``), so that a
client that reconnects misses nothing, and it can drop every connection in the middle of a
datagram (``cut``), as a crashed server or a pulled cable would.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 0.1


class AxisTcpServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 7001) -> None:
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.settimeout(ACCEPT_POLL_S)
        self.host = host
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        self.dropped = 0  # clients whose connection failed or was cut
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"axis-tcp-server-{self.port}", daemon=True)
        self._thread.start()

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def wait_for_client(self, timeout_s: float) -> bool:
        """Until at least one client is connected (False if none came within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._joined:
            while not self._clients:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._joined.wait(left)
            return True

    def send(self, data: bytes) -> int:
        """Write one datagram to every client; returns how many it reached (a failed one is dropped)."""
        with self._lock:
            clients = list(self._clients)
        reached = 0
        for client in clients:
            try:
                client.sendall(data)
                reached += 1
            except OSError:
                self._drop(client)
        return reached

    def cut(self, data: bytes, at: int) -> None:
        """Write the first ``at`` bytes of ``data`` to every client, then close every connection."""
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.sendall(data[:at])
            self._drop(client)

    def close(self) -> None:
        """Stop listening first (a client reconnecting at once is refused), then end every connection."""
        self._stop.set()
        self._thread.join(timeout=1 + ACCEPT_POLL_S)
        self._listener.close()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            _close(client)

    def _drop(self, client: socket.socket) -> None:
        with self._lock:
            if client not in self._clients:
                return
            self._clients.remove(client)
        self.dropped += 1
        _close(client)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.settimeout(5.0)  # a client that stops reading is dropped, not waited on forever
            with self._joined:
                self._clients.append(client)
                self.accepted += 1
                self._joined.notify_all()
            log.info("axis tcp server :%d: client %s:%d connected", self.port, *addr[:2])


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
