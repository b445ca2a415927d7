"""`mocapline streamer --fan-in`: RobotFrames from every retarget worker instead of one retarget.

The workers (``mocapline retarget --worker NAME``, mocapline/services/retarget/worker.py) announce
their RobotFrame ports in NATS (``mocapline.core.assign``); the streamer connects to each as the
named, acknowledging consumer ``streamer`` (``mocapline.client`` on a worker's fan-out port) and
keeps its position at every worker in its own record, written before the frames are acknowledged,
like any durable stage.

Frames of one performer come from one worker at a time and in order, except around a takeover:
the new owner resends from the performer's stored position, and a dead worker restarted later may
still deliver what it had logged. So each performer's frames are kept only when (segment,
posture_index) is beyond the last one taken (``duplicates`` counts the others). END_OF_STREAM
goes out once every live worker has forwarded capture's marker; a worker stays live for
``LIVE_GRACE_S`` after it was last in the registry, so one lapsed heartbeat (a worker starved of
CPU for longer than ``WORKER_TTL_S``) does not end the take at the other worker's marker.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import zmq

from mocapline.client import ClientSettings, MemoryPosition, MocapClient
from mocapline.core.assign import WORKER_TTL_S, Registry
from mocapline.core.counters import FanInInfo, StreamerCounts
from mocapline.core.header import MessageType
from mocapline.core.transport import Received

from .service import StreamerLoop

log = logging.getLogger("mocapline.streamer.fanin")

REFRESH_S = 0.5
LIVE_GRACE_S = WORKER_TTL_S


class FanIn:
    """One acknowledging consumer per live worker, read round-robin."""

    def __init__(self, ctx: zmq.Context, registry: Registry, joint_count: int, name: str = "streamer",
                 positions: dict[str, list[Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.clock = clock
        self.joint_count = joint_count
        self.registry = registry
        self.name = name
        self.inputs: dict[str, tuple[str, MocapClient]] = {}  # worker -> (endpoint, client)
        self.saved = {w: (bytes.fromhex(e), int(s)) for w, (e, s) in (positions or {}).items()}
        self.live: set[str] = set()
        self._seen: dict[str, float] = {}  # worker -> when the registry last listed it
        self._refresh_at = 0.0
        self._next = 0
        self.poller = zmq.Poller()

    def refresh(self) -> None:
        workers = self.registry.workers()
        if workers is None:
            return
        now = self.clock()
        self._seen.update(dict.fromkeys(workers, now))
        self._seen = {w: t for w, t in self._seen.items() if now - t <= LIVE_GRACE_S}
        self.live = set(self._seen)
        for worker, info in workers.items():
            endpoint = str(info.get("endpoint", ""))
            known = self.inputs.get(worker)
            if not endpoint or (known is not None and known[0] == endpoint):
                continue
            if known is not None:  # the worker restarted on another port: same log, same position
                self.saved[worker] = (known[1].rx.epoch, known[1].rx.last)
                self.poller.unregister(known[1].sock)
                known[1].close()
            store = MemoryPosition()
            store.position = self.saved.get(worker)
            client = MocapClient(ClientSettings(endpoint, name=self.name, joint_count=self.joint_count,
                                                message_type=MessageType.ROBOT_STATE), store=store, ctx=self.ctx)
            self.inputs[worker] = (endpoint, client)
            self.poller.register(client.sock, zmq.POLLIN)
            log.info("fan-in: worker %s at %s", worker, endpoint)

    def recv(self, timeout_ms: int) -> tuple[str, Received] | None:
        """The next frame of any worker (each worker's frames once and in order), or None."""
        now = time.monotonic()
        if now >= self._refresh_at:
            self._refresh_at = now + REFRESH_S
            self.refresh()
        for attempt in range(2):
            workers = list(self.inputs)
            for k in range(len(workers)):
                worker = workers[(self._next + k) % len(workers)]
                got = self.inputs[worker][1].rx.recv(0)
                if got is not None:
                    self._next = (self._next + k + 1) % len(workers)
                    return worker, got
            if attempt == 0:
                if workers:
                    self.poller.poll(timeout_ms)
                else:
                    time.sleep(timeout_ms / 1000)
        return None

    def positions(self) -> dict[str, list[Any]]:
        out = {w: [e.hex(), s] for w, (e, s) in self.saved.items()}
        out.update({w: [c.rx.epoch.hex(), c.rx.last] for w, (_, c) in self.inputs.items() if c.rx.welcomed})
        return out

    @property
    def rejects(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for _, client in self.inputs.values():
            total.update(client.rx.rejects)
        return total

    def close(self) -> None:
        for _, client in self.inputs.values():
            client.close()
        self.registry.close()


@dataclass
class FanInLoop(StreamerLoop):
    """The streamer's stage loop over a FanIn (see the module docstring)."""

    fanin: FanIn | None = None
    last: dict[int, tuple[int, int]] = field(default_factory=dict)  # performer -> (segment, posture_index)
    ends: set[str] = field(default_factory=set)  # workers whose END_OF_STREAM of this take arrived
    duplicates: int = 0
    received: int = 0

    def step(self) -> bool:
        assert self.fanin is not None
        got = self.fanin.recv(timeout_ms=0 if self.streamer.outbox else 10)
        if got is not None:
            worker, msg = got
            self.received += 1
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.ends.add(worker)
            else:
                self.on_frame(msg.payload)
        ended = bool(self.ends) and self.ends >= (self.fanin.live & set(self.fanin.inputs))
        if ended:
            self.streamer.on_end()
            self.ends.clear()
            self.last.clear()
        self.streamer.send_ready(timeout_ms=0 if got is not None else 1)
        if got is not None or ended:
            self.links.done(self.received, self.durable_state())
        return True

    def on_frame(self, payload: bytes | memoryview) -> None:
        try:
            frame = self.streamer.robot_frame(payload)
        except ValueError as exc:
            assert self.fanin is not None
            self.fanin.rejects[getattr(exc, "reason", "invalid")] += 1
            return
        key = (frame.segment, frame.posture_index)
        last = self.last.get(frame.avatar_index)
        if last is not None and key <= last:
            self.duplicates += 1
            return
        self.last[frame.avatar_index] = key
        self.streamer.on_robot_frame(frame, time.time_ns())

    def durable_state(self) -> dict[str, Any]:
        assert self.fanin is not None
        return {**self.streamer.durable_state(),
                "fan_in": {"inputs": self.fanin.positions(), "duplicates": self.duplicates, "received": self.received,
                           "ends": sorted(self.ends), "last": {str(k): list(v) for k, v in self.last.items()}}}

    def restore(self, state: dict[str, Any]) -> None:
        saved = state.get("fan_in") or {}
        self.duplicates = int(saved.get("duplicates", 0))
        self.received = int(saved.get("received", 0))
        self.ends = set(saved.get("ends", []))
        self.last = {int(k): (int(v[0]), int(v[1])) for k, v in (saved.get("last") or {}).items()}

    def rejects(self) -> dict[str, int]:
        assert self.fanin is not None
        return dict(self.fanin.rejects)

    def heartbeat(self) -> StreamerCounts:
        assert self.fanin is not None
        return replace(super().heartbeat(), fan_in=FanInInfo(
            workers=sorted(self.fanin.inputs), live=sorted(self.fanin.live), duplicates=self.duplicates,
            positions={w: p[1] for w, p in self.fanin.positions().items()}))

    def reset(self) -> None:
        super().reset()
        self.last.clear()
        self.ends.clear()

    def finish(self) -> None:
        super().finish()
        assert self.fanin is not None
        self.fanin.close()


def fan_in_loop(loop: StreamerLoop, ctx: zmq.Context, nats_url: str, restored: dict[str, Any] | None) -> FanInLoop:
    """The fan-in variant of ``loop``: inputs discovered in NATS, positions from ``restored``."""
    registry = Registry(nats_url)
    saved = (restored or {}).get("fan_in") or {}
    fanin = FanIn(ctx, registry, loop.streamer.robot.joint_count, positions=saved.get("inputs"))
    out = FanInLoop(loop.streamer, loop.links, fanin=fanin)
    if restored is not None:
        out.restore(restored)
    return out
