"""Axis Studio over TCP: capture is the client of Axis' TCP server (the seeds' MocapApi set-up,
"Axis opens TCP server port 7001").

One daemon thread connects, reads, cuts the byte stream into datagrams
(``mocapline.formats.axis_stream``) and hands each one on exactly as a UDP receive thread does:
journaled first (durable mode), then into capture's FIFO, stamped with the Axis server's port as
its path. From there on a TCP datagram is indistinguishable from a UDP one: same core, same
ledger, same merge with a UDP side path.

When the connection cannot be made or ends, the thread says so (log and the ``tcp`` part of the
ledger, exported as metrics) and tries again with doubling back-off. What Axis sent while no
connection was up never reaches capture: those indices are missing in the ledger, as they should
be. A datagram cut by the disconnect is handed on as a rejected chunk (``truncated``).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from mocapline.core.udp import Datagram, readable
from mocapline.formats.axis_bvh import AxisBvhConfig
from mocapline.formats.axis_stream import AxisStreamSplitter

log = logging.getLogger(__name__)

DEFAULT_AXIS_TCP_PORT = 7001
READ_SIZE = 65536
POLL_TIMEOUT_S = 0.2  # a read that waits this long lets the splitter release a held datagram


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``initial`` doubling up to ``maximum`` while attempts fail; back to
    ``initial`` once a connection is made."""

    initial_s: float = 0.1
    maximum_s: float = 2.0
    connect_timeout_s: float = 2.0

    def next(self, delay_s: float) -> float:
        return min(max(delay_s * 2.0, self.initial_s), self.maximum_s)


DEFAULT_BACKOFF = Backoff()


@dataclass
class TcpStats:
    connected: bool = False
    connects: int = 0  # connections made: the first, then every reconnect
    disconnects: int = 0  # connections that ended (by Axis, by the network) while capture ran
    failed_attempts: int = 0  # connection attempts refused or timed out
    bytes: int = 0
    last_error: str = ""


def parse_endpoint(text: str, default_port: int = DEFAULT_AXIS_TCP_PORT) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` or ``:PORT`` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


class AxisTcpReceiver:
    """Connect to Axis Studio's TCP server, split, hand each datagram on; reconnect with back-off.

    Same shape as ``UdpReceiver`` (``start``, ``stop``, ``port``, ``received``): ``port`` is the
    server's port, the path this stream is merged under.
    """

    def __init__(
        self,
        host: str,
        port: int,
        fifo: queue.Queue[Datagram],
        config: AxisBvhConfig,
        journal: Callable[[Datagram], Datagram] | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.host = host
        self.port = port
        self.fifo = fifo
        self.journal = journal
        self.backoff = backoff
        self.splitter = AxisStreamSplitter(config)
        self.stats = TcpStats()
        self.received = 0
        self._sock: socket.socket | None = None
        self._reading = False  # bytes are off the socket and their frames not in the FIFO yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"axis-tcp-{port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.backoff.connect_timeout_s + 2 * POLL_TIMEOUT_S + 1)

    def holding(self) -> bool:
        """Bytes have arrived whose frames are not in the FIFO yet (as ``UdpReceiver.holding``)."""
        return readable(self._sock) or self._reading

    def as_dict(self) -> dict[str, object]:
        return {"server": f"{self.host}:{self.port}", **asdict(self.stats), **asdict(self.splitter.stats)}

    def _run(self) -> None:
        delay = self.backoff.initial_s
        while not self._stop.is_set():
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.backoff.connect_timeout_s)
            except OSError as exc:
                self.stats.failed_attempts += 1
                self.stats.last_error = str(exc.strerror or exc)
                log.warning("axis tcp %s:%d: cannot connect (%s); retrying in %.1f s",
                            self.host, self.port, self.stats.last_error, delay)
                self._stop.wait(delay)
                delay = self.backoff.next(delay)
                continue
            self.stats.connects += 1
            self.stats.connected = True
            log.info("axis tcp %s:%d: connected%s", self.host, self.port,
                     f" (reconnect {self.stats.connects - 1})" if self.stats.connects > 1 else "")
            before = self.stats.bytes
            reason = self._read(sock)
            self.stats.connected = False
            self._hand_on(self.splitter.close())
            if self._stop.is_set():
                break
            self.stats.disconnects += 1
            self.stats.last_error = reason
            if self.stats.bytes > before:  # a working connection that ended: reconnect at once
                delay = self.backoff.initial_s
                log.warning("axis tcp %s:%d: connection lost (%s); reconnecting", self.host, self.port, reason)
            else:  # a server that accepts and closes at once must not make this loop spin
                log.warning("axis tcp %s:%d: connection lost (%s) before any data; reconnecting in %.1f s",
                            self.host, self.port, reason, delay)
                self._stop.wait(delay)
                delay = self.backoff.next(delay)

    def _read(self, sock: socket.socket) -> str:
        """Read until the connection ends or capture stops; returns why it ended."""
        sock.settimeout(POLL_TIMEOUT_S)
        self._sock = sock
        try:
            while not self._stop.is_set():
                if not readable(sock, POLL_TIMEOUT_S):
                    self._hand_on(self.splitter.idle())
                    continue
                self._reading = True
                try:
                    data = sock.recv(READ_SIZE)
                    if not data:
                        return "closed by the server"
                    self.stats.bytes += len(data)
                    self._hand_on(self.splitter.feed(data))
                finally:
                    self._reading = False
            return "capture stopping"
        except OSError as exc:
            return str(exc.strerror or exc)
        finally:
            self._sock = None
            sock.close()

    def _hand_on(self, chunks: list[bytes]) -> None:
        if not chunks:
            return
        now = time.time_ns()
        for chunk in chunks:
            dgram = Datagram(now, self.port, self.host, chunk)
            if self.journal is not None:
                dgram = self.journal(dgram)
            self.received += 1
            self.fifo.put(dgram)
