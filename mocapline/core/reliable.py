"""Reliable links: at-least-once delivery with durable logs on both ends, duplicates removed on
arrival, so every frame reaches the next stage exactly once and in order across a kill -9.

Each link keeps its data path (the 44-byte header on PUSH/PULL, ``frame_id`` = the link's sequence
number, +1 per message, END_OF_STREAM included) and adds a control path beside it: the sender binds
a ROUTER on the *ack endpoint* (by default the data port + 1000), the receiver connects a DEALER.

    receiver -> sender  HELLO(epoch, seq)        "I hold everything through seq: send me seq+1 on"
    receiver -> sender  ACK(epoch, seq)          "done through seq (processed, passed on, on disk)"
    sender -> receiver  WELCOME(epoch, seq, ref) "I am link epoch E; the next frame you get is seq"

(the control messages: ``mocapline.core.control``). The sending end is the fan-out's sender with
one consumer (``ReliableSender``, ``mocapline.core.fanout``): one cursor implementation for both.

The sender's frames live in its stage log (``StageLog``) before they are sent, so what has not
been acknowledged is still on disk after any crash; the sender sends only to a receiver that said
HELLO, keeps at most ``window`` unacknowledged frames in flight (ZeroMQ's queues stay small; a
consumer that is gone makes frames wait on disk, not in memory) and rewinds to ``seq + 1`` on every
HELLO but a keep-alive. The receiver says HELLO (flag RESEND) when it starts, when it sees a gap
(frames lost in a dead peer's queue, or one rejected) and when told RESTARTED; when nothing at all
has arrived for a while (a duplicate or a frame beyond a gap is something: the link is alive) it
says HELLO with doubling back-off, the first one a keep-alive (no RESEND: frames in flight are not
sent twice), the next ones with RESEND: a hung peer is not sent the window again and again, and a
restarted sender is found within a second.

Every HELLO and ACK also says how many data messages the receiver has taken off its socket (flag
TAKEN): the sender's credit. It keeps at most ``window`` messages, first copies and resends
together, on their way, and resends only what the receiver took and lacks, never what is still on
its way to it (``mocapline.core.fanout``; docs/protocol.md, "Flow control").

The epoch is the sender's log identity (a random id made with its state directory). A receiver
whose stored epoch differs is talking to a new sender: it takes the sender's numbering from the
WELCOME. "Processed" and "remembered" are one step: a stage appends one record holding the input's
(epoch, seq), its outputs and its counters, then the input is acknowledged.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from mocapline.core.control import (
    ACK,
    ACK_PORT_OFFSET,
    CONTROL,
    CONTROL_MAGIC,
    DEFAULT_WINDOW,
    FORGET,
    HELLO,
    MAX_NAME,
    NO_EPOCH,
    RESEND,
    RESTARTED,
    TAKEN,
    WELCOME,
    Control,
    ack_endpoint,
    decode_control,
    encode_control,
    encode_output,
    header_epoch,
)
from mocapline.core.fanout import LINK, Consumer, FanoutSender
from mocapline.core.header import MessageType
from mocapline.core.stagelog import StageLog
from mocapline.core.transport import Received, keep_alive, lossless_socket, ready, validate_message

__all__ = ["ACK", "ACK_PORT_OFFSET", "CONTROL", "CONTROL_MAGIC", "DEFAULT_WINDOW", "FORGET", "HELLO", "MAX_NAME",
           "NO_EPOCH", "RESEND", "RESTARTED", "TAKEN", "WELCOME", "Control", "ReliableReceiver", "ReliableSender",
           "ack_endpoint", "decode_control", "encode_control", "encode_output", "header_epoch",
           "receiver_sockets", "sender_sockets"]

log = logging.getLogger("mocapline.core.reliable")


# --- the sending end: the fan-out's sender with one consumer -----------------------------------


class ReliableSender(FanoutSender):
    """Sends a StageLog's outputs in order to the receiver that said HELLO, resending on request:
    ``FanoutSender`` with one consumer (``LINK``), frames on ``data`` (PUSH), control on
    ``control`` (ROUTER); no eviction (the log's retention alone bounds it)."""

    def __init__(self, data: zmq.Socket, control: zmq.Socket, stage_log: StageLog, joint_count: int, *,
                 window: int = DEFAULT_WINDOW, cache: int = 4096) -> None:
        super().__init__(data, stage_log, joint_count, window=window, max_backlog=sys.maxsize, cache=cache,
                         control=control)

    @property
    def receiver(self) -> Consumer:
        """The link's consumer (a fresh one before its first HELLO)."""
        return self.consumers.get(LINK) or Consumer(LINK)


# --- the receiving end ------------------------------------------------------------------------


@dataclass
class ReceiverCounters:
    accepted: int = 0
    duplicates: int = 0  # already had it (a resend or a replay): dropped
    out_of_order: int = 0  # ahead of the next expected one (its predecessors were lost): dropped
    before_welcome: int = 0
    lost: int = 0  # the sender no longer had them (its log retention): reported, never silent
    hellos: int = 0
    epoch_changes: int = 0
    restarts_heard: int = 0  # RESTARTED from a port that came back (answered with HELLO)


class ReliableReceiver:
    """Yields each frame of the link once, in order; ``last`` is what the caller has committed."""

    IDLE_HELLO_S = 0.25
    MAX_BACKOFF_S = 2.0
    GAP_HELLO_S = 0.1  # a gap HELLO at most this long after any HELLO (frames in flight behind one look like a gap)
    ACK_INTERVAL_S = 0.05
    # A receive that finds a duplicate or a frame beyond a gap takes the next message waiting at
    # once, up to this many: one ignored message per wake-up (the viewer's 50 ms batches) left a
    # consumer behind a resent window for good (docs/protocol.md, "The resend storm").
    DRAIN_BATCH = 256

    def __init__(
        self,
        data: zmq.Socket,
        control: zmq.Socket,
        message_type: MessageType,
        joint_count: int | None,
        *,
        epoch: bytes = NO_EPOCH,
        last: int = -1,
        name: str = "",
        before_ack: Callable[[bytes, int], None] | None = None,
    ) -> None:
        """``control`` may be ``data`` itself: one DEALER on a fan-out port (``mocapline.core.fanout``),
        where one-part messages are control and two-part messages are frames. ``name`` goes with
        every HELLO (the consumer's identity there); ``before_ack(epoch, seq)`` runs before each
        ACK, so a caller can store its position first (``mocapline.client``)."""
        self.data = data
        self.control = control
        self.single = control is data
        self.name = name
        self.before_ack = before_ack
        self.message_type = message_type
        self.joint_count = joint_count
        self.epoch = epoch
        self.last = last  # the newest seq handed out (the caller commits it before asking for more)
        self.welcomed = False
        self.counters = ReceiverCounters()
        self.rejects: Counter[str] = Counter()
        self.taken = 0  # data messages taken off the socket, each counted (the credit HELLO and ACK report)
        self._reported = -1  # ``taken`` as the last HELLO or ACK said it
        self._arrived_at = 0.0  # when the last data message of any kind arrived (the idle timer)
        self._acked = last
        self._ack_at = 0.0
        self._backoff = self.IDLE_HELLO_S
        self._hello_at = 0.0
        self._gap = False  # frames beyond the next expected one were dropped, not asked for since
        self._poller = zmq.Poller()
        self._poller.register(data, zmq.POLLIN)
        if not self.single:
            self._poller.register(control, zmq.POLLIN)
        self._wake: list[zmq.Socket] = []
        # The highest seq the caller allows to be acknowledged (None: everything handed out). A
        # retarget worker acknowledges capture only what the streamer already holds (core/assign.py).
        self.ack_cap: Callable[[], int] | None = None
        self._hello_seq = last  # the seq of the last HELLO sent (a fan-out's WELCOME echoes the one it answers)
        self._hello()

    def _send_control(self, kind: int, seq: int | None = None, name: str | None = None, flags: int = 0) -> bool:
        try:  # IMMEDIATE: with no sender connected this fails and the timer asks again later
            name = name if name is not None else self.name if kind == HELLO else ""
            credit = kind in (HELLO, ACK)
            body = encode_control(kind, self.epoch, self.last if seq is None else seq, name,
                                  flags=flags | (TAKEN if credit else 0), ref=self.taken if credit else 0)
            self.control.send(body, zmq.NOBLOCK)
        except zmq.Again:
            return False
        if credit:
            self._reported = self.taken
        return True

    def _hello(self, resend: bool = True) -> None:
        """HELLO with what is finished; ``resend=False`` (a keep-alive) leaves frames in flight be."""
        # with a cap, HELLO says what is finished, not merely received: the sender resends the rest
        seq = self.last if self.ack_cap is None else min(self.last, self.ack_cap())
        if self.welcomed and self.before_ack is not None:
            self.before_ack(self.epoch, seq)  # a HELLO acknowledges through seq: stored first
        if self._send_control(HELLO, seq, flags=RESEND if resend else 0):
            self._hello_seq = seq
        self.counters.hellos += 1
        self._hello_at = time.monotonic()

    def _ask_gap(self, now: float) -> bool:
        """HELLO (RESEND) for a gap, at most every GAP_HELLO_S; one held back by that bound goes
        when the time is up, more frames or not (a gap at the end of a burst would otherwise wait
        for the idle timer's second HELLO, ~0.75 s)."""
        if not self._gap or now - self._hello_at < self.GAP_HELLO_S:
            return False
        self._gap = False
        self._hello()
        return True

    def _maybe_hello(self, now: float) -> None:
        """A gap held back, else the idle timer: the first HELLO after progress is a keep-alive
        (what is in flight still comes); the next ones, with nothing arrived in between, ask for a
        resend."""
        if self._ask_gap(now):
            return
        if now - max(self._hello_at, self._arrived_at) >= self._backoff:
            self._hello(resend=self._backoff > self.IDLE_HELLO_S or not self.welcomed)
            self._backoff = min(self._backoff * 2, self.MAX_BACKOFF_S)

    def ack(self) -> None:
        """Acknowledge everything handed out so far (call after it is committed), or up to
        ``ack_cap()`` when set; with nothing new to acknowledge, an ACK still reports the messages
        taken since the last one (the sender's credit: duplicates use it up too)."""
        upto = self.last if self.ack_cap is None else min(self.last, self.ack_cap())
        if self.welcomed and (upto > self._acked or self.taken != self._reported):
            if upto > self._acked and self.before_ack is not None:
                self.before_ack(self.epoch, self.last)
            seq = max(upto, self._acked)
            if self._send_control(ACK, seq):
                self._acked = seq
        self._ack_at = time.monotonic()

    def _ack_due(self, now: float) -> bool:
        return (self.last > self._acked or self.taken != self._reported) and now - self._ack_at >= self.ACK_INTERVAL_S

    def rewind(self, seq: int) -> None:
        """Ask the sender again for everything after ``seq`` (still held in its log: a fan-out
        keeps what any consumer has not acknowledged); frames from ``seq + 1`` on are handed out
        again. Used by a retarget worker taking over a performer from a dead one."""
        if seq < self.last:
            self.last = seq
            self._acked = min(self._acked, seq)
            self._hello()

    def forget(self, consumer: str) -> bool:
        """Ask a fan-out sender to drop another consumer's entry, so that its log no longer holds
        frames for it (a retarget worker that is gone, its performers taken over); False when the
        request could not be sent (no sender connected: ask again later)."""
        return self.welcomed and self._send_control(FORGET, name=consumer)

    def recv(self, timeout_ms: int) -> Received | None:
        """The next frame of the link (each exactly once, in order), or None on timeout.

        Everything handed out before this call counts as committed and is acknowledged.
        """
        now = time.monotonic()
        if self._ack_due(now):
            self.ack()
        # the common case, a frame already waiting: no poll; EVENTS first, since an empty socket's
        # recv raises zmq.Again, and the exception cost more than the frame's checks (bench cost)
        budget = self.DRAIN_BATCH
        while self.welcomed and budget and ready(self.data):
            budget -= 1
            try:
                got = self._on_message(self.data.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            if got is not None:
                self._progress()
                return got
        if timeout_ms <= 0 and self.welcomed:  # data checked above: the rest from EVENTS, no Poller
            if not self.single and ready(self.control):
                self._read_control()
            now = time.monotonic()
            if self._ack_due(now):
                self.ack()
            self._maybe_hello(now)
            return None
        deadline = now + timeout_ms / 1000
        while True:
            wait = self._wait_s(deadline)
            events = dict(self._poller.poll(max(0, math.ceil(wait * 1000))))  # ceil: no spin at the end
            if not self.single and self.control in events:
                self._read_control()
            if self.data in events:
                got = self._on_message(self.data.recv_multipart())
                if got is not None:
                    self._progress()
                    return got
            now = time.monotonic()
            if self._ack_due(now):
                self.ack()
            self._maybe_hello(now)
            if now >= deadline or any(sock in events for sock in self._wake):
                return None

    def _wait_s(self, deadline: float) -> float:
        """How long to poll: until ``deadline``, or in time to acknowledge, or to ask for a gap."""
        now = time.monotonic()
        wait = deadline - now
        if self.last > self._acked or (self.welcomed and self.taken != self._reported):
            wait = min(wait, self._ack_at + self.ACK_INTERVAL_S - now)
        if self._gap:
            wait = min(wait, self._hello_at + self.GAP_HELLO_S - now)
        return wait

    def wake_on(self, sock: zmq.Socket) -> None:
        """Also return (None) from ``recv`` when ``sock`` has a message: a stage's output link's
        control socket, so that ACKs and HELLOs are handled without busy polling."""
        self._wake.append(sock)
        self._poller.register(sock, zmq.POLLIN)

    def _on_message(self, parts: list[bytes]) -> Received | None:
        if self.single and len(parts) == 1:
            self._on_control(parts[0])
            return None
        self.taken += 1
        if self.welcomed:  # (before a WELCOME it acts on, frames do not stand in for one: the timer asks again)
            self._arrived_at = time.monotonic()
            self._backoff = self.IDLE_HELLO_S  # something arrived: the next idle HELLO is a keep-alive again
        return self._decode(parts)

    def _read_control(self) -> None:
        while ready(self.control):
            self._on_control(self.control.recv())

    def _on_control(self, body: bytes) -> None:
        msg = decode_control(body)
        if msg is not None and msg.kind == RESTARTED:
            self.counters.restarts_heard += 1
            self._hello()  # the port came back: tell it where we are now
            return
        if msg is None or msg.kind != WELCOME:
            return
        if msg.ref is not None and msg.ref != self._hello_seq:
            return  # the answer to an older HELLO (one before a rewind): the answer to the last one follows
        self._welcome(msg.epoch, msg.seq)

    def _welcome(self, epoch: bytes, next_seq: int) -> None:
        if epoch != self.epoch:
            if self.epoch != NO_EPOCH:
                log.warning("new sender on the link (epoch %s, was %s): taking its numbering from %d",
                            epoch.hex()[:8], self.epoch.hex()[:8], next_seq)
                self.counters.epoch_changes += 1
            self.epoch = epoch
            self.last = next_seq - 1
            self._acked = self.last
        elif next_seq > self.last + 1:
            log.error("frames %d..%d are no longer held by the sender: lost", self.last + 1, next_seq - 1)
            self.counters.lost += next_seq - 1 - self.last
            self.last = next_seq - 1
        self.welcomed = True

    def _progress(self) -> None:
        self._backoff = self.IDLE_HELLO_S
        self._hello_at = time.monotonic()

    def _decode(self, parts: list[bytes]) -> Received | None:
        received = validate_message(parts, self.message_type, self.joint_count, self.rejects)
        if received is None:
            return None
        if not self.welcomed:
            self.counters.before_welcome += 1
            return None
        seq = received.header.frame_id
        if seq <= self.last:
            self.counters.duplicates += 1
            return None
        if seq > self.last + 1:
            self.counters.out_of_order += 1
            self._gap = True
            self._ask_gap(time.monotonic())
            return None
        self._gap = False
        self.last = seq
        self.counters.accepted += 1
        return received

    def snapshot(self) -> dict[str, int]:
        c = self.counters
        return {"accepted": c.accepted, "duplicates": c.duplicates, "out_of_order": c.out_of_order,
                "welcomed": self.welcomed, "before_welcome": c.before_welcome, "lost": c.lost,
                "hellos": c.hellos, "epoch_changes": c.epoch_changes, "restarts_heard": c.restarts_heard,
                "taken": self.taken, "last": self.last}


def sender_sockets(ctx: zmq.Context, endpoint: str) -> tuple[zmq.Socket, zmq.Socket]:
    """(PUSH bound on ``endpoint``, ROUTER bound on its ack endpoint)."""
    data = lossless_socket(ctx, zmq.PUSH, endpoint, bind=True)
    try:
        control = ctx.socket(zmq.ROUTER)
        control.setsockopt(zmq.LINGER, 0)
        keep_alive(control)
        control.bind(ack_endpoint(endpoint))
    except BaseException:
        data.close(linger=0)
        raise
    return data, control


def receiver_sockets(ctx: zmq.Context, endpoint: str) -> tuple[zmq.Socket, zmq.Socket]:
    """(PULL connected to ``endpoint``, DEALER connected to its ack endpoint)."""
    data = lossless_socket(ctx, zmq.PULL, endpoint, bind=False)
    control = ctx.socket(zmq.DEALER)
    control.setsockopt(zmq.LINGER, 0)
    keep_alive(control)
    control.setsockopt(zmq.IMMEDIATE, 1)  # no control message queued for a sender that is not there
    control.setsockopt(zmq.SNDHWM, 100)
    control.connect(ack_endpoint(endpoint))
    return data, control
