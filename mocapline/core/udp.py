"""UDP receiving: one thread per socket, a large kernel buffer, every datagram into one FIFO.

The receive thread does nothing but wait, ``recvfrom`` and ``put``: parsing happens on the consumer side,
so a slow parse can never make the kernel buffer overflow. The FIFO is unbounded by design (a frame
is never overwritten); its depth is reported as ``input_pending``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

RCVBUF_REQUEST = 16 * 1024 * 1024
MAX_DATAGRAM = 65535
POLL_TIMEOUT_S = 0.2


@dataclass(frozen=True, slots=True)
class Datagram:
    """One received datagram: when (unix ns), on which local port, from where, the bytes, and its
    number in capture's raw journal (-1 when not journaled)."""

    recv_ns: int
    port: int
    source: str
    data: bytes
    seq: int = -1


def raise_priority() -> str:
    """Ask the OS for a higher scheduling priority; return what happened, for the log."""
    try:
        os.nice(-10)
        return "raised (nice -10)"
    except (PermissionError, OSError) as exc:
        return f"not raised ({exc.strerror or exc}); run with CAP_SYS_NICE to allow it"


def open_udp(host: str, port: int, rcvbuf: int = RCVBUF_REQUEST) -> tuple[socket.socket, int]:
    """Bind a UDP socket, ask for ``rcvbuf`` bytes of kernel buffer, return it and what was granted."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < rcvbuf:
        with contextlib.suppress(OSError):  # SO_RCVBUFFORCE ignores net.core.rmem_max where we have CAP_NET_ADMIN
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), rcvbuf)
    sock.bind((host, port))
    sock.settimeout(POLL_TIMEOUT_S)
    # Linux reports the doubled bookkeeping size; halve it to compare with the request.
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
    return sock, granted


def datagram_fifo() -> queue.Queue[Datagram]:
    """The FIFO receivers fill and a stage's main thread waits on (``get(timeout=...)``).

    A ``queue.Queue``, not the faster ``SimpleQueue``: CPython 3.11's ``SimpleQueue.get`` with a
    timeout, when a signal handler runs in it and ends after the deadline, takes the negative time
    left for no timeout and waits until the next put. Capture, between takes, then never got back
    to its loop to see its SIGTERM (tests/test_capture_signals.py). A put and get here cost ~1.3 us more, once
    per datagram.
    """
    return queue.Queue()


def readable(sock: socket.socket | None, timeout_s: float = 0.0) -> bool:
    """Something waits in the socket's receive queue (a closed socket: nothing)."""
    if sock is None:
        return False
    try:
        return bool(select.select([sock], [], [], timeout_s)[0])
    except (OSError, ValueError):
        return False


def adopt_udp(fd: int) -> tuple[socket.socket, int]:
    """A bound UDP socket inherited from a supervisor (``--udp-fds``), as ``open_udp`` returns it.

    The supervisor keeps its own copy open, so datagrams that arrive while this process is dead
    wait in the kernel buffer for the restarted one instead of being refused.
    """
    sock = socket.socket(fileno=fd)
    if sock.type != socket.SOCK_DGRAM:
        raise OSError(f"fd {fd} is not a UDP socket")
    sock.settimeout(POLL_TIMEOUT_S)
    return sock, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2


class UdpReceiver:
    """A daemon thread that moves datagrams from one socket into a shared FIFO; with ``journal``,
    each datagram is handed to it (written to disk) before it is queued."""

    def __init__(
        self,
        sock: socket.socket,
        fifo: queue.Queue[Datagram],
        journal: Callable[[Datagram], Datagram] | None = None,
        journaled_head: bytes | None = None,
    ) -> None:
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.fifo = fifo
        self.journal = journal
        self.journaled_head = journaled_head
        self.received = 0
        self._reading = False  # a datagram is off the socket and not in the FIFO yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"udp-{self.port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * POLL_TIMEOUT_S + 1)
        self.sock.close()

    def holding(self) -> bool:
        """A datagram has arrived and is not in the FIFO yet: queued in the socket, or being read.
        (The socket is looked at first: the flag is raised before a datagram leaves the socket and
        lowered after it is in the FIFO, so a caller that looks at the FIFO last sees it somewhere.)"""
        return readable(self.sock) or self._reading

    def _run(self) -> None:
        """With a journal: peek, journal, then take the datagram off the socket. It leaves the
        kernel's buffer only once it is on disk, so a capture killed in between finds it again in
        the socket its supervisor holds. That one is then the journal's last datagram of this port
        (``journaled_head``) and is taken off without being journaled twice.

        (A datagram Axis really sent twice in a row, with the kill falling between the two, would
        be taken for that and counted once: a window of microseconds, once per crash.)
        """
        sock, put, port, journal = self.sock, self.fifo.put, self.port, self.journal
        flags = socket.MSG_PEEK if journal is not None else 0
        head = self.journaled_head
        while not self._stop.is_set():
            if not readable(sock, POLL_TIMEOUT_S):
                continue
            self._reading = True
            try:
                try:
                    data, addr = sock.recvfrom(MAX_DATAGRAM, flags)
                except TimeoutError:
                    continue
                except OSError as exc:
                    if self._stop.is_set():
                        return
                    log.warning("udp %d: %s", port, exc)
                    time.sleep(0.01)
                    continue
                dgram = Datagram(time.time_ns(), port, addr[0], data)
                if journal is not None:
                    if head is not None:
                        known, head = head == data, None
                        if known:
                            sock.recv(MAX_DATAGRAM)
                            log.info("udp %d: the first datagram was journaled before the restart; not again", port)
                            continue
                    dgram = journal(dgram)
                    sock.recv(MAX_DATAGRAM)
                self.received += 1
                put(dgram)
            finally:
                self._reading = False
