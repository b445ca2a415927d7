"""The acknowledged sender: one stage log sent to every consumer that completed the handshake, each
at its own pace, with its own cursor, acknowledgement state and backlog. The robot port (tcp 5555)
is a fan-out to named consumers; a point-to-point link between two stages
(``mocapline.core.reliable.ReliableSender``) is the same sender with one consumer, its frames on a
PUSH and its control on a ROUTER beside it (``control``).

The port is a ZeroMQ ROUTER. A consumer connects a DEALER and speaks the acknowledged link protocol
of ``mocapline.core.reliable`` on that one connection (one-part messages are control, two-part
messages are frames; the wire contract is docs/protocol.md):

    consumer -> port  HELLO(epoch, seq, name)  "I am <name>; I hold everything through seq"
    port -> consumer  WELCOME(epoch, seq, ref) "the next frame I send you is seq" (ref: the HELLO's seq)
    port -> consumer  (topic, 44-byte header + payload), frame_id = seq, in order
    consumer -> port  ACK(epoch, seq)          "done through seq (processed and stored)"
    port -> consumer  RESTARTED(epoch)         "I came back: say HELLO" (to the consumers it remembers)

- **Nothing before the handshake.** Frames are addressed to a consumer's routing id, which the port
  learns from its HELLO; a peer that never says HELLO receives nothing, and a PUSH/PULL peer cannot
  even connect (ZeroMQ refuses a PULL talking to a ROUTER). Nobody can take frames from anyone.
- **Each consumer on its own.** A consumer is known by its name (``--name``; stable across its
  restarts). Its position is its own: a resend (a HELLO after a gap, or after its restart) goes to it
  alone, at most ``window`` of its frames are in flight, and a slow or dead consumer holds nobody
  back: the others' frames keep flowing, its own wait in the stage log on disk.
- **No resend for a keep-alive.** A HELLO on the same connection, at or past the consumer's last ACK
  and without the ``RESEND`` flag (an idle consumer's timer), moves nothing: the frames in flight
  on that connection still arrive, in order. Every other HELLO rewinds the consumer's cursor,
  unless the consumer reports its credit (below) and what it asks for is still on its way.
- **Credit.** A consumer whose HELLOs and ACKs carry ``TAKEN`` (the data messages it has taken off
  its socket; ``mocapline.client`` does) gets at most ``window`` messages on their way at once,
  first copies and resends together, counted by position on its connection (``handed`` against
  ``taken``): however slow it is, its queue never holds more than it can take, and ZeroMQ's
  high-water mark (10,000, above any window) is never reached. A RESEND HELLO is answered with a
  resend only of what it took and lacks (a frame at a position it has taken: rejected, or lost
  before it): a frame whose copy is at a position it has not taken yet is on its way, and
  resending it would only put a second copy behind the first (``resends_withheld``). What was on
  its way before its previous HELLO and still has not arrived by the second RESEND HELLO in a row
  that took nothing more (its idle timer's third HELLO) is taken as lost (a connection ZeroMQ
  re-made under the same routing id drops its queue) and sent again. docs/protocol.md, "Flow control".
- **Where a consumer starts.** A consumer that knows this port's epoch resumes after the seq it
  sends. Any other (new, or its stored position belongs to another epoch) starts at the oldest
  frame no consumer has taken yet: the first consumer of a fresh take gets every frame, even ones
  made while nobody was connected (or while the streamer was down); a consumer joining a running
  take starts about where the others are.
- **Bounded backlog.** A consumer more than ``max_backlog`` frames behind is *evicted* from holding
  the log (an error in the log, ``evicted``/``evictions`` in its counters, the alarm metric
  ``mocapline_consumers_evicted`` beside ``mocapline_consumer_backlog_max``): the log is trimmed past
  it, and when it comes back it is told (WELCOME) where the retained frames resume; its receiver
  counts the rest as ``lost``. A consumer not heard from (ACK or HELLO) for ``LIVE_S`` holds no
  drain; its frames still wait for it.
- **Remembered.** Per-consumer positions and counters live in ``consumers.json`` beside the log
  (rewritten at most once a second, and always before the log is trimmed, so the log never drops
  a frame a remembered consumer still needs).

``push=True`` is the port for a consumer that cannot acknowledge (``--plain-output``): a PUSH fed
from the same log. Frames handed to it are *unconfirmed* forever; a restart resumes after the last
position written down, so up to a second of frames may go out twice (same frame_id: drop by it).

Ledger: every produced frame is in exactly one of ``delivered`` (acknowledged by at least one
consumer), ``unconfirmed`` (handed to the wire, no acknowledgement yet, or never: push) and
``pending`` (in the log, not yet handed to anyone), so ``delivered + unconfirmed + pending ==
produced`` at every moment (``counts``).
"""


from __future__ import annotations

import bisect
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import zmq

from mocapline.core.control import (
    ACK,
    DEFAULT_WINDOW,
    FORGET,
    HELLO,
    NO_EPOCH,
    RESEND,
    RESTARTED,
    Control,
    decode_control,
    encode_control,
    encode_output,
    welcome,
)
from mocapline.core.header import TOPICS, MessageType
from mocapline.core.stagelog import DiskStream, Outbox, StageLog, StageRecord
from mocapline.core.transport import ready

log = logging.getLogger("mocapline.core.fanout")

DEFAULT_MAX_BACKLOG = 216_000  # frames: an hour at 60 Hz (~90 MB of MocapFrames on disk)
PERSIST_INTERVAL_S = 1.0
# A consumer is live while it is heard from (ACKs while frames flow, HELLOs at most 2 s apart when
# idle): one silent for longer holds no drain (its frames still wait for it in the log).
LIVE_S = 5.0
# After a restart the port tells each consumer it remembers that it is back (RESTARTED, to the
# consumer's name as its DEALER routing id), every ANNOUNCE_EVERY_S until it answers or ANNOUNCE_S.
ANNOUNCE_S = 30.0
ANNOUNCE_EVERY_S = 0.25
LINK = "link"  # the one consumer of a point-to-point link


@dataclass
class Run:
    """Seqs ``seq`` .. ``seq + count - 1`` handed to a consumer one after another, the first as
    message number ``pos`` on its connection (the numbering its TAKEN reports count in)."""

    seq: int
    pos: int
    count: int = 1

    @property
    def end(self) -> int:
        return self.pos + self.count

    def position(self, seq: int) -> int | None:
        return self.pos + seq - self.seq if self.seq <= seq < self.seq + self.count else None


@dataclass
class Consumer:
    """One consumer's cursor and counters (the persisted part is everything but ``route``)."""

    name: str
    acknowledges: bool = True
    joined: int = 0  # first seq it was sent
    cursor: int = 0  # next seq to send it
    acked: int = -1  # highest seq it acknowledged (for push: unused)
    high_water: int = 0  # every seq below was sent to it at least once
    resent: int = 0  # messages sent again (counted up to the last save before a kill -9)
    hellos: int = 0
    evicted: bool = False
    evictions: int = 0
    resends_withheld: int = 0  # RESEND HELLOs not resent to: what it asked for was on its way
    route: bytes | None = field(default=None, repr=False)
    version: int = field(default=2, repr=False)  # the control layout of its last HELLO
    stream: DiskStream = field(default_factory=DiskStream, repr=False)
    heard: float = field(default=float("-inf"), repr=False)  # monotonic time of its last HELLO or ACK
    # credit (its TAKEN reports; None: it sends none, the window counts unacknowledged frames)
    handed: int = field(default=0, repr=False)  # messages handed on its connection: the next one's position
    taken: int | None = field(default=None, repr=False)
    hello_taken: int | None = field(default=None, repr=False)  # its report in its previous HELLO
    hello_handed: int = field(default=0, repr=False)  # ``handed`` when that HELLO came
    quiet_hellos: int = field(default=0, repr=False)  # RESEND HELLOs in a row that took nothing since the one before
    runs: deque[Run] = field(default_factory=deque, repr=False)  # what is on its way, by position
    in_flight_max: int = field(default=0, repr=False)

    @property
    def in_flight(self) -> int:
        """Messages on their way to it: handed and not taken by its reports, else sent and not
        acknowledged."""
        if not self.acknowledges or self.route is None:
            return 0
        if self.taken is not None:
            return max(0, self.handed - self.taken)
        return max(0, self.cursor - self.acked - 1)

    def credit(self, taken: int, *, fresh: bool = False) -> None:
        """Its report of the messages it has taken. ``fresh`` (a new connection, a new socket, or
        what was on its way taken as lost), a report that goes back (another socket) or one past
        what was handed (positions out of step): the numbering starts again from the report."""
        if fresh or self.taken is None or taken < self.taken or taken > self.handed:
            self.handed = taken
            self.runs.clear()
        self.taken = taken
        while self.runs and self.runs[0].end <= taken:
            self.runs.popleft()

    def acked_credit(self, taken: int) -> None:
        """An ACK's report: taken only when it moves on within this numbering. A lower one is an
        older socket's last ACK overtaken by the new socket's HELLO (another TCP connection: no
        order between them), a higher one a numbering out of step; HELLOs set the numbering."""
        if self.taken is not None and self.taken <= taken <= self.handed:
            self.credit(taken)

    def handed_out(self, seq: int) -> None:
        """``seq`` was just handed to it (the position it took: ``handed``)."""
        if self.taken is not None:
            last = self.runs[-1] if self.runs else None
            if last is not None and last.seq + last.count == seq and last.end == self.handed:
                last.count += 1
            else:
                self.runs.append(Run(seq, self.handed))
        self.handed += 1
        self.in_flight_max = max(self.in_flight_max, self.in_flight)

    def on_its_way(self, seq: int) -> bool:
        """Whether a copy of ``seq`` was handed at a position it has not taken yet."""
        if self.taken is None or seq >= self.cursor:
            return False
        taken = self.taken
        return any((p := run.position(seq)) is not None and p >= taken for run in self.runs)

    @property
    def live(self) -> bool:
        return self.route is not None and time.monotonic() - self.heard < LIVE_S

    @property
    def hold(self) -> int:
        """The oldest seq this consumer may still ask for."""
        return self.acked + 1 if self.acknowledges else self.cursor

    @property
    def sent(self) -> int:
        """Messages handed to it since it joined, each once (END_OF_STREAM included, resends not):
        derived from positions, so it is exact across a kill -9 of the sender."""
        return max(0, self.high_water - self.joined)

    def persisted(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _TRANSIENT}

    @classmethod
    def restored(cls, d: dict[str, Any]) -> Consumer:
        return cls(**{k: v for k, v in d.items() if k in _PERSISTED})


_TRANSIENT = ("route", "version", "stream", "heard", "handed", "taken", "hello_taken", "hello_handed", "quiet_hellos",
              "runs", "in_flight_max")
_PERSISTED = frozenset(f.name for f in fields(Consumer)) - set(_TRANSIENT)


class FanoutSender:
    """A StageLog's outputs to every consumer on a ROUTER (``push``: to a PUSH; ``control``: a
    point-to-point link, frames on the PUSH ``sock``, control on this ROUTER); see the module."""

    def __init__(
        self,
        sock: zmq.Socket,
        stage_log: StageLog,
        joint_count: int,
        *,
        window: int = DEFAULT_WINDOW,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        push: bool = False,
        cache: int = 4096,
        control: zmq.Socket | None = None,
    ) -> None:
        self.sock = sock
        self.push = push
        self.link = control is not None
        self.control = control if control is not None else None if push else sock
        for router in [self.control] if self.control is not None else []:
            router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a peer gone raises, not drops silently
            router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted consumer's new connection takes over
        self.stage_log = stage_log
        self.joint_count = joint_count
        self.window = window
        self.max_backlog = max_backlog
        self.outbox = Outbox(stage_log, cache)
        self.consumers: dict[str, Consumer] = {}
        self._by_route: dict[bytes, Consumer] = {}
        self._ends: list[int] = []  # seqs of every END_OF_STREAM message (one per take: few)
        self.unrecoverable = 0
        self.state_path = Path(stage_log.directory) / "consumers.json"
        self._dirty = False
        self._persisted_at = 0.0
        self._trimmed_to = -1
        self._load()
        if push and "push" not in self.consumers:
            start = self._taken()
            self.consumers["push"] = Consumer("push", acknowledges=False, joined=start, cursor=start, high_water=start)
        announce = not push and not self.link
        self._announce = {c.name for c in self.consumers.values() if c.name} if announce else set()
        self._announce_until = time.monotonic() + ANNOUNCE_S
        self._announce_at = 0.0

    # --- state -----------------------------------------------------------------------------

    @property
    def epoch(self) -> bytes:
        return self.stage_log.epoch

    def _load(self) -> None:
        scanned = self.stage_log.first_seq()
        if self.state_path.exists():
            state = json.loads(self.state_path.read_text())
            if bytes.fromhex(state.get("epoch", "")) == self.epoch:
                for d in state.get("consumers", []):
                    c = Consumer.restored(d)
                    c.cursor = c.hold  # frames in flight at the crash are sent again
                    c.high_water = max(c.high_water, c.hold)
                    self.consumers[c.name] = c
                self._ends = list(state.get("ends", []))
                scanned = max(scanned, int(state.get("scanned_to", 0)))
        for seq, out in self.stage_log.outputs_from(scanned):  # ends written after the last save
            if out.message_type is MessageType.END_OF_STREAM:
                self._ends.append(seq)

    def _save(self) -> None:
        state = {"epoch": self.epoch.hex(), "scanned_to": self.stage_log.next_seq, "ends": self._ends,
                 "consumers": [c.persisted() for c in self.consumers.values()]}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)
        self._dirty = False
        self._persisted_at = time.monotonic()

    @property
    def wake_socket(self) -> zmq.Socket | None:
        """The socket ACKs and HELLOs arrive on (None for a push output)."""
        return self.control

    def close(self) -> None:
        self._save()

    # --- producing ---------------------------------------------------------------------------

    def commit(self, record: StageRecord) -> None:
        """The durable step: append the record (its outputs are sent by ``pump``)."""
        first = self.stage_log.append(record)
        self.outbox.append(first, record.outputs)
        for k, out in enumerate(record.outputs):
            if out.message_type is MessageType.END_OF_STREAM:
                self._ends.append(first + k)

    def pump(self, timeout_ms: int = 0) -> int:
        """Read HELLOs and ACKs, send each consumer what its window allows; returns messages sent.
        ``timeout_ms``: a link waits that long for its PUSH to take the first frame."""
        self._read_control()
        if self.link and timeout_ms and self._sendable() and not self.sock.poll(timeout_ms, zmq.POLLOUT):
            return 0
        sent = sum(self._send_to(c) for c in list(self.consumers.values())
                   if c.route is not None or not c.acknowledges)
        self._maintain()
        return sent

    def _sendable(self) -> bool:
        next_seq = self.stage_log.next_seq
        return any(c.route is not None and c.cursor < next_seq and not self._window_full(c)
                   for c in self.consumers.values())

    def _window_full(self, c: Consumer) -> bool:
        """``window`` frames sent and not acknowledged, or (its credit) ``window`` messages on their way."""
        if not c.acknowledges:
            return False
        return c.cursor - c.acked - 1 >= self.window or (c.taken is not None and c.handed - c.taken >= self.window)

    def _send_to(self, c: Consumer) -> int:
        sent = 0
        next_seq = self.stage_log.next_seq
        while c.cursor < next_seq:
            if self._window_full(c):
                break
            seq, out = self.outbox.fetch(c.cursor, c.stream)
            if seq != c.cursor:  # no longer on disk (evicted, then trimmed): skip ahead, loudly
                log.error("consumer %s: frames %d..%d are gone from the log; sending from %d", c.name, c.cursor,
                          seq - 1, seq)
                self.unrecoverable += seq - c.cursor
                c.cursor = seq
            frame = encode_output(out, seq, self.joint_count, self.epoch)
            parts = [TOPICS[out.message_type], frame]
            try:
                self.sock.send_multipart(parts if c.route is None or self.link else [c.route, *parts], zmq.NOBLOCK)
            except zmq.Again:  # its queue is full (or, push: nobody connected): later
                break
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    raise
                self._forget_route(c)  # disconnected: it says HELLO when it is back
                break
            if seq < c.high_water:
                c.resent += 1
            c.cursor = seq + 1
            c.high_water = max(c.high_water, c.cursor)
            c.handed_out(seq)
            sent += 1
        if sent and not c.acknowledges:
            self._dirty = True
        return sent

    def _forget_route(self, c: Consumer) -> None:
        if c.route is not None:
            self._by_route.pop(c.route, None)
            c.route = None

    # --- control -----------------------------------------------------------------------------

    def _read_control(self) -> None:
        if self.control is None:
            return
        while ready(self.control):
            parts = self.control.recv_multipart()
            msg = decode_control(parts[1]) if len(parts) == 2 else None
            if msg is None:
                continue
            if msg.kind == HELLO:
                self._hello(parts[0], msg, LINK if self.link else msg.name or parts[0].hex())
            elif msg.kind == FORGET and not self.link:
                self._forget(msg.name, asked_by=parts[0])
            elif msg.kind == ACK:
                c = self._by_route.get(parts[0])
                if c is not None:
                    c.heard = time.monotonic()
                    if msg.taken is not None:
                        c.acked_credit(msg.taken)
                if c is not None and msg.epoch == self.epoch and msg.seq > c.acked:
                    c.acked = min(msg.seq, self.stage_log.next_seq - 1)
                    self._dirty = True

    def _hello(self, route: bytes, msg: Control, name: str) -> None:
        epoch, seq = msg.epoch, msg.seq
        c = self.consumers.get(name)
        new = c is None
        if c is None:
            c = self.consumers[name] = Consumer(name)
        self._announce.discard(name)
        reconnected = c.route != route
        if c.route is not None and reconnected:
            self._forget_route(c)  # the same consumer on a new connection (it restarted)
        old = self._by_route.get(route)
        if old is not None and old is not c:
            self._forget_route(old)
        c.route = route
        c.version = msg.version
        self._by_route[route] = c
        c.hellos += 1
        c.heard = time.monotonic()
        self._hello_credit(c, msg, fresh=new or reconnected)
        next_seq = self.stage_log.next_seq
        oldest = self.stage_log.first_seq()
        # a keep-alive: same connection, nothing given back, no RESEND: what is in flight still arrives
        keep = (msg.version >= 2 and not msg.flags & RESEND and not new and not reconnected and epoch == self.epoch
                and seq >= c.acked and seq + 1 >= oldest)
        if epoch == self.epoch:
            if seq >= next_seq:
                log.warning("consumer %s holds up to %d but this log ends at %d: the log lost its tail", name, seq,
                            next_seq - 1)
            # what it holds now: lower than its last ACK when it asks for frames again (a retarget
            # worker rewinding to a performer it takes over), and the log keeps them for it
            c.acked = min(seq, next_seq - 1)
            start = seq + 1
            if new:  # known to the consumer, not to this table (it was lost): count from here
                c.joined = start
            c.high_water = max(c.high_water, min(start, next_seq))  # it holds them: they were sent
        elif not new and epoch == NO_EPOCH and c.acked < c.joined:
            start = c.joined  # its first HELLO again (the WELCOME not there yet): the same answer
        else:  # new, or it knows another sender: the oldest frame nobody (a link: it) has taken
            start = max(self._taken(exclude=None if self.link else c), oldest)
            if epoch != NO_EPOCH:
                log.warning("consumer %s knows another epoch (%s): starting it at %d", name, epoch.hex()[:8], start)
            c.acked = max(c.acked, start - 1) if not new else start - 1
            c.joined = start if new or not self.link else c.joined
        if start < oldest:
            log.error("consumer %s asks from %d, the oldest frame on disk is %d", name, start, oldest)
            self.unrecoverable += oldest - start
            start = oldest
        answer = min(start, next_seq)
        if keep:
            c.cursor = max(c.cursor, answer)
        elif epoch == self.epoch and c.on_its_way(answer):
            c.resends_withheld += 1  # its copy is behind what it took: a resend would arrive after it, a duplicate
        else:
            c.cursor = answer
        if new:
            c.high_water = c.cursor
        self._dirty = True
        if not self._welcome(c, answer, seq):
            return
        if reconnected and not self.link:  # (an idle consumer's periodic HELLO is not news)
            log.info("consumer %s %s at %d", name, "joined" if new else "resumed", c.cursor)

    def _welcome(self, c: Consumer, answer: int, seq: int) -> bool:
        """WELCOME(answer) to the HELLO(seq) just read; False when the consumer is gone again."""
        assert self.control is not None and c.route is not None
        try:
            self.control.send_multipart([c.route, welcome(self.epoch, answer, seq, c.version)], zmq.NOBLOCK)
        except zmq.Again:  # its queue is full: it is there, behind what it has not taken (no WELCOME this time)
            return True
        except zmq.ZMQError:  # gone again: its next HELLO is answered
            self._forget_route(c)
            return False
        return True

    @staticmethod
    def _hello_credit(c: Consumer, msg: Control, *, fresh: bool) -> None:
        """A HELLO's TAKEN report (none: a consumer that reports no credit, the window counts what
        it has not acknowledged). The second RESEND HELLO in a row that took nothing since the one
        before (its idle timer's third HELLO: 1.75 s without a message), while what was handed
        before that one is still not taken, says what was on its way is lost. (One is not enough: a
        consumer starved of CPU runs its timer before its I/O thread hands it what came.)"""
        if msg.taken is None:
            c.taken = None
            c.runs.clear()
            return
        resend = bool(msg.flags & RESEND)
        c.quiet_hellos = c.quiet_hellos + 1 if resend and msg.taken == c.hello_taken else 0
        stale = c.quiet_hellos >= 2 and msg.taken < c.hello_handed
        c.credit(msg.taken, fresh=fresh or stale)
        if stale:
            c.quiet_hellos = 0
        c.hello_taken, c.hello_handed = msg.taken, c.handed

    def _forget(self, name: str, asked_by: bytes) -> None:
        """FORGET(name) from another consumer: ``name`` is gone for good (a retarget worker whose
        performers were taken over), its entry goes and the log stops holding frames for it. If it
        comes back after all, its HELLO makes it a consumer again."""
        c = self.consumers.get(name)
        if c is None or c.route == asked_by:
            return
        self._forget_route(c)
        del self.consumers[name]
        self._announce.discard(name)
        self._dirty = True
        log.info("consumer %s forgotten (asked by %s): %d frames no longer held for it", name,
                 self._by_route[asked_by].name if asked_by in self._by_route else "?",
                 max(0, self.stage_log.next_seq - c.hold))

    def _tell_restarted(self, now: float) -> None:
        """RESTARTED to each remembered consumer not heard from yet, addressed by its name (a
        consumer whose DEALER routing id is its name gets it; the others find the port by their
        own HELLO timer)."""
        if now > self._announce_until:
            self._announce.clear()
        if now - self._announce_at < ANNOUNCE_EVERY_S or self.control is None:
            return
        self._announce_at = now
        for name in list(self._announce):
            c = self.consumers.get(name)
            if c is None:
                self._announce.discard(name)
                continue
            try:
                self.control.send_multipart([name.encode(), encode_control(RESTARTED, self.epoch, c.cursor)],
                                            zmq.NOBLOCK)
                self._announce.discard(name)
            except zmq.ZMQError:  # not connected (yet), or not by its name
                pass

    # --- bookkeeping -------------------------------------------------------------------------

    def _taken(self, exclude: Consumer | None = None) -> int:
        """The oldest seq no consumer has taken (acknowledged, or handed to a push consumer)."""
        holds = [c.hold for c in self.consumers.values() if c is not exclude and (c.acked >= 0 or not c.acknowledges)]
        return max(holds, default=self.stage_log.first_seq())

    def _maintain(self) -> None:
        """Evict consumers too far behind, write the table down and trim the log (<= once a second)."""
        now = time.monotonic()
        if self._announce:
            self._tell_restarted(now)
        if now - self._persisted_at < PERSIST_INTERVAL_S:
            return
        next_seq = self.stage_log.next_seq
        for c in self.consumers.values():
            backlog = next_seq - c.hold
            if not c.evicted and backlog > self.max_backlog:
                c.evicted = True
                c.evictions += 1
                self._dirty = True
                log.error("consumer %s is %d frames behind (bound %d): no longer holding the log for it; "
                          "frames trimmed before it returns are lost to it", c.name, backlog, self.max_backlog)
            elif c.evicted and backlog <= self.max_backlog // 2:
                c.evicted = False
                self._dirty = True
        if self._dirty:
            self._save()
        self._persisted_at = now
        holds = [c.hold for c in self.consumers.values() if not c.evicted]
        trim = min([self._taken(), *holds])
        if trim > self._trimmed_to + 1:
            self.stage_log.log.drop_before(trim)
            self._trimmed_to = trim - 1

    # --- the ledger --------------------------------------------------------------------------

    def _frames(self, lo: int, hi: int) -> int:
        """MocapFrames (END_OF_STREAM excluded) among seqs [lo, hi)."""
        if hi <= lo:
            return 0
        return hi - lo - (bisect.bisect_left(self._ends, hi) - bisect.bisect_left(self._ends, lo))

    def counts(self, base: int = 0) -> dict[str, int]:
        """Frames with seq >= ``base`` (a reset's start): delivered + unconfirmed + pending ==
        frames produced since ``base``."""
        next_seq = self.stage_log.next_seq
        delivered_to = max([c.acked + 1 for c in self.consumers.values() if c.acknowledges], default=0)
        handed_to = max([c.high_water for c in self.consumers.values()], default=0)
        delivered_to = max(base, min(delivered_to, next_seq))
        handed_to = max(delivered_to, min(handed_to, next_seq))
        return {"delivered": self._frames(base, delivered_to), "unconfirmed": self._frames(delivered_to, handed_to),
                "pending": self._frames(handed_to, next_seq)}

    @property
    def unacked(self) -> int:
        """Messages (END_OF_STREAM included) the furthest-behind connected consumer has not
        acknowledged yet: 0 means every consumer there is has everything (a drain is complete;
        frames nobody is connected for wait in the log and show as pending). A link's one
        receiver counts whether connected or not (and before it ever was: everything)."""
        next_seq = self.stage_log.next_seq
        if self.link:
            c = self.consumers.get(LINK)
            return next_seq - (c.acked + 1 if c is not None else 0)
        live = [c for c in self.consumers.values() if c.acknowledges and c.live and not c.evicted]
        return max([next_seq - c.acked - 1 for c in live], default=0)

    def snapshot(self, base: int = 0) -> dict[str, Any]:
        if self.link:
            c = self.consumers.get(LINK) or Consumer(LINK)
            return {"sent": c.sent, "resent": c.resent, "hellos": c.hellos, "acked": c.acked, "unacked": self.unacked,
                    "in_flight": c.in_flight, "unrecoverable": self.unrecoverable}
        next_seq = self.stage_log.next_seq
        return {
            "consumers": {
                c.name: {"connected": c.live or not c.acknowledges, "acknowledges": c.acknowledges,
                         "frames_acked": self._frames(max(base, c.joined), c.acked + 1) if c.acknowledges else 0,
                         "frames_sent": self._frames(max(base, c.joined), c.high_water),
                         "sent": c.sent, "resent": c.resent, "hellos": c.hellos,
                         "backlog": max(0, next_seq - c.hold), "evicted": c.evicted, "evictions": c.evictions,
                         "next_frame_id": c.cursor, "in_flight": c.in_flight, "in_flight_max": c.in_flight_max,
                         "resends_withheld": c.resends_withheld,
                         "frames_to_apply": self._frames(max(base, c.acked + 1), next_seq) if c.acknowledges else 0}
                for c in self.consumers.values()
            },
            "sent": sum(c.sent for c in self.consumers.values()),
            "resent": sum(c.resent for c in self.consumers.values()),
            "unrecoverable": self.unrecoverable,
            "unacked": self.unacked,
            "in_flight": max([c.in_flight for c in self.consumers.values() if c.live], default=0),
        }
