"""MotionInput: the one interface the rest of capture sees, whatever the suit.

    source.open()
    while running:
        frame = source.poll_frame(timeout_s)   # a HumanFrame, or None when nothing is ready
    source.close()
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from mocapline.core.frames import HumanFrame
from mocapline.core.udp import (
    RCVBUF_REQUEST,
    Datagram,
    UdpReceiver,
    adopt_udp,
    datagram_fifo,
    open_udp,
    raise_priority,
)
from mocapline.formats.axis_bvh import AxisBvhConfig
from mocapline.formats.mlrec import RecordingWriter
from mocapline.formats.mxtp02 import PositionUnitSetting
from mocapline.services.capture.core import (
    AxisDecoder,
    CaptureCore,
    Decoder,
    XsensDecoder,
)
from mocapline.services.capture.state import CaptureState
from mocapline.services.capture.tcp import DEFAULT_BACKOFF, AxisTcpReceiver, Backoff

log = logging.getLogger(__name__)

BATCH_MAX = 64  # FK cost per frame is lowest around 64 frames per batch (bench capture)


class MotionInput(Protocol):
    name: str

    def open(self) -> None: ...

    def close(self) -> None: ...

    def poll_frame(self, timeout_s: float) -> HumanFrame | None: ...


class UdpMotionInput:
    """Receives one source on one or more UDP ports, and/or an Axis TCP stream (``tcp``: the
    server's host and port, the main path, before the UDP ports), and merges them by
    posture_index."""

    def __init__(
        self,
        name: str,
        decoder: Decoder,
        ports: list[int],
        *,
        host: str = "0.0.0.0",
        rcvbuf: int = RCVBUF_REQUEST,
        merge_window_s: float = 0.25,
        idle_flush_s: float = 0.5,
        allowed_sources: frozenset[str] | None = None,
        record_path: Path | None = None,
        journal: Any = None,
        udp_fds: list[int] | None = None,
        tcp: tuple[str, int] | None = None,
        tcp_backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        if udp_fds is not None and len(udp_fds) != len(ports):
            raise ValueError(f"{len(udp_fds)} inherited UDP sockets for {len(ports)} ports")
        self.name = name
        self.journal = journal  # a RawJournal: every datagram on disk before it is processed
        self.udp_fds = udp_fds
        self.host = host
        self.ports = ports
        self.tcp = tcp
        self.tcp_backoff = tcp_backoff
        if tcp is not None and tcp[1] in ports:
            raise ValueError(f"the Axis TCP port {tcp[1]} is also a UDP port: paths are told apart by port")
        if tcp is not None and not isinstance(decoder, AxisDecoder):
            raise ValueError("only Axis Studio streams over TCP")
        self.paths = ([tcp[1]] if tcp is not None else []) + list(ports)
        self.rcvbuf = rcvbuf
        self.idle_flush_s = idle_flush_s
        self.record_path = record_path
        self.core = CaptureCore(
            decoder, self.paths, merge_window_s=merge_window_s, allowed_sources=allowed_sources,
            stream_ports=frozenset([tcp[1]] if tcp is not None else []),
        )
        self.fifo = datagram_fifo()
        self.receivers: list[UdpReceiver | AxisTcpReceiver] = []
        self.tcp_receiver: AxisTcpReceiver | None = None
        self.granted_rcvbuf: dict[int, int] = {}
        self.last_datagram = time.monotonic()
        self._ready: deque[HumanFrame] = deque()
        self._recorder: RecordingWriter | None = None
        self._idle_flushed = True
        self.fed_live = 0  # datagrams from the sockets through the core (a checkpoint compares)

    def open(self) -> None:
        priority = raise_priority()
        log.log(logging.INFO if priority.startswith("raised") else logging.WARNING,
                "capture process priority: %s", priority)
        journal = self.journal.record if self.journal is not None else None
        if self.tcp is not None:
            assert isinstance(self.core.decoder, AxisDecoder)
            self.tcp_receiver = AxisTcpReceiver(
                self.tcp[0], self.tcp[1], self.fifo, self.core.decoder.config, journal, self.tcp_backoff
            )
            self.receivers.append(self.tcp_receiver)
        for k, port in enumerate(self.ports):
            if self.udp_fds is not None:
                sock, granted = adopt_udp(self.udp_fds[k])
                if sock.getsockname()[1] != port:
                    bound = sock.getsockname()[1]
                    raise OSError(f"inherited fd {self.udp_fds[k]} is bound to port {bound}, not {port}")
            else:
                sock, granted = open_udp(self.host, port, self.rcvbuf)
            self.granted_rcvbuf[port] = granted
            level = logging.INFO if granted >= self.rcvbuf else logging.WARNING
            log.log(level, "udp %s:%d SO_RCVBUF asked %d, kernel granted %d", self.host, port, self.rcvbuf, granted)
            head = self.journal.last_by_port.get(port) if self.journal is not None else None
            self.receivers.append(UdpReceiver(sock, self.fifo, journal, head))
        if self.record_path is not None:
            self._recorder = RecordingWriter(
                self.record_path, {"source": self.name, "ports": self.paths, "session_id": self.core.session_id,
                                   **({"tcp": f"{self.tcp[0]}:{self.tcp[1]}"} if self.tcp else {})}
            )
        self.core.paths_live(time.monotonic())
        for receiver in self.receivers:
            receiver.start()

    def close(self) -> None:
        for receiver in self.receivers:
            receiver.stop()
        self.receivers.clear()
        self.flush()
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None

    def flush(self) -> None:
        """End of a take: process everything received, declare remaining gaps final."""
        while not self.fifo.empty():
            self._drain_fifo()
        self._ready.extend(self.core.flush())
        self._idle_flushed = True

    def reset(self) -> None:
        """A fresh ledger for the next take (sockets, session and recording stay)."""
        old = self.core
        self.core = CaptureCore(
            old.decoder,
            self.paths,
            merge_window_s=old.window_s,
            allowed_sources=old.allowed_sources,
            session_id=old.session_id,
            stream_ports=old.stream_ports,
        )

    def restore(self, state: CaptureState) -> None:
        """Continue from a checkpoint's state (``StateError`` if it does not fit this decoder)."""
        self.core = CaptureCore.from_state(state, self.core.decoder)

    def replay(self, datagrams: Iterable[Datagram]) -> int:
        """Feed journaled datagrams (a restarted capture's take so far) through the core, on the
        clock they arrived by; the frames they release become ready. Returns how many were fed."""
        offset = time.time() - time.monotonic()
        batch: list[Datagram] = []
        fed = 0

        def feed() -> None:
            now = batch[-1].recv_ns / 1e9 - offset
            self._ready.extend(self.core.poll(now))
            self._ready.extend(self.core.feed_batch(batch, now))
            batch.clear()

        for dgram in datagrams:
            batch.append(dgram)
            fed += 1
            if len(batch) >= BATCH_MAX:
                feed()
        if batch:
            feed()
        self.last_datagram = time.monotonic()
        self._idle_flushed = False
        return fed

    def poll_frame(self, timeout_s: float) -> HumanFrame | None:
        deadline = time.monotonic() + timeout_s
        while not self._ready:
            wait = min(deadline - time.monotonic(), self.core.window_s / 2)
            try:
                first = self.fifo.get(timeout=max(wait, 0.0))
            except queue.Empty:
                now = time.monotonic()
                if self._all_read():  # (a path is judged silent only once nothing of it waits unread)
                    self._ready.extend(self.core.poll(now))
                    if not self._idle_flushed and now - self.last_datagram > self.idle_flush_s:
                        self._ready.extend(self.core.flush())
                        self._idle_flushed = True
                if now >= deadline:
                    break
                continue
            self._drain_fifo(first)
        return self._ready.popleft() if self._ready else None

    def _all_read(self) -> bool:
        """Every datagram that has arrived is through the core: none in a socket or a receive
        thread's hands (looked at first), none in the FIFO."""
        return not any(receiver.holding() for receiver in self.receivers) and self.fifo.empty()

    def _drain_fifo(self, first: Datagram | None = None) -> None:
        """Take what the FIFO holds (up to BATCH_MAX) and process it as one batch."""
        batch = [first] if first is not None else []
        while len(batch) < BATCH_MAX:
            try:
                batch.append(self.fifo.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return
        if self._recorder is not None:
            for dgram in batch:
                self._recorder.write(dgram)
        now = time.monotonic()
        self.last_datagram = now
        self._idle_flushed = False
        self.fed_live += len(batch)
        self._ready.extend(self.core.feed_batch(batch, now))

    @property
    def settled(self) -> bool:
        """No datagram waits in the FIFO and no released frame waits to be sent."""
        return self.fifo.empty() and not self._ready

    @property
    def pending(self) -> int:
        return self.fifo.qsize() + len(self._ready)

    def ledger(self) -> dict[str, Any]:
        led = self.core.ledger(input_pending=self.pending)
        led["rcvbuf_granted"] = {str(p): g for p, g in self.granted_rcvbuf.items()}
        if self.tcp_receiver is not None:
            led["tcp"] = self.tcp_receiver.as_dict()
        return led


def axis_udp_source(config: AxisBvhConfig, ports: list[int], **kwargs: Any) -> UdpMotionInput:
    return UdpMotionInput("axis", AxisDecoder(config), ports, **kwargs)


def xsens_udp_source(ports: list[int], position_unit: PositionUnitSetting = "m", **kwargs: Any) -> UdpMotionInput:
    return UdpMotionInput("xsens", XsensDecoder(position_unit), ports, **kwargs)
