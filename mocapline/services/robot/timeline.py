"""Stream frames played on the robot's clock: each frame's target is reached at its own stream
time, commands between two frames interpolate them (position linearly, the velocity feed-forward
too), and the playback clock runs at 1x, faster when frames queue up (lag catch-up, up to
``max_speed``, never faster than the joints' velocity limits allow), and stops at the newest
frame when none follows (a stall: the caller holds).

Every frame is played: none is skipped to catch up, which is why catching up means playing
faster rather than jumping ahead.

The root is played as the joints are (position linearly, orientation by slerp), and each step
carries the root's velocity at the segment's first frame by central differences over its
neighbours (world frame; one-sided where a neighbour is missing or across a new segment, zero
while the stream stalls): what a policy's reference terms take, with no look-ahead beyond the
frame the playback is moving toward."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mocapline.core import quat as Q

MAX_ROOT_SPEED = 6.0  # m/s: a root moving faster between two frames has jumped


@dataclass
class StreamFrame:
    frame_id: int
    time_s: float  # stream time (MocapFrame.source_time_s)
    q: np.ndarray | None  # None: a rejected frame, another performer's, or END_OF_STREAM: passed over in order
    dq: np.ndarray | None
    capture_us: int = 0
    posture_index: int = 0
    received_ns: int = 0
    started: bool = False  # a command has moved toward it
    end: bool = False  # END_OF_STREAM (q None)
    other: bool = False  # another performer's frame (q None): passed over
    root: np.ndarray | None = None  # (7,) root position and orientation (w x y z), world
    segment_start: bool = False  # the playback jumped to it (a gap or a new segment): no difference across
    hands: np.ndarray | None = None  # the hands' joints (MocapFrame.hand_joint_pos), with --hands


@dataclass
class Step:
    q: np.ndarray
    dq: np.ndarray
    reached: list[StreamFrame]  # frames whose target this step reached (in order), rejected ones too
    started: list[StreamFrame]  # frames the step began moving toward (their first command)
    speed: float
    root: np.ndarray | None = None  # (7,) the root pose at the playback time (None: the stream has none)
    root_vel: np.ndarray | None = None  # (6,) linear and angular velocity of the root, world


@dataclass
class Timeline:
    max_speed: float = 1.25
    lag_target_s: float = 0.001  # queued stream time beyond one frame interval that makes playback speed up
    max_gap_s: float = 0.5  # a jump in stream time beyond this (or backwards) is not waited through
    velocity_limits: np.ndarray | None = None
    play_root: bool = False  # the root's pose and velocities in each step (the policy's reference; pd needs none)
    queue: deque[StreamFrame] = field(default_factory=deque)
    clock: float | None = None  # playback position, stream seconds
    last: StreamFrame | None = None  # the frame the current segment starts from (its target reached)
    previous: StreamFrame | None = None  # the valid frame before ``last`` (central differences)
    catchup_steps: int = 0
    shift_s: float = 0.0  # added to every frame's stream time (gaps and jumps taken out)
    interval_s: float = 0.0  # the stream's frame interval (the latest spacing of two valid frames)
    _newest: float | None = None

    def push(self, frame: StreamFrame) -> None:
        frame.time_s += self.shift_s
        if frame.q is not None:
            if self._newest is not None and 0 < frame.time_s - self._newest < 0.25:
                self.interval_s = frame.time_s - self._newest
            self._newest = frame.time_s
        self.queue.append(frame)

    @property
    def lag_s(self) -> float:
        """Stream time queued ahead of the playback clock (read by the heartbeat's thread too:
        from two floats, never by walking the queue)."""
        newest, clock = self._newest, self.clock
        if newest is None or clock is None:
            return 0.0
        return max(0.0, newest - clock)

    def pending(self) -> int:
        return len(self.queue)

    def _pass_rejected(self, reached: list[StreamFrame]) -> None:
        while self.queue and self.queue[0].q is None:
            reached.append(self.queue.popleft())

    def step(self, dt: float) -> Step | None:
        """Advance ``dt`` of wall time; None while there is nothing to play (no frame yet)."""
        reached: list[StreamFrame] = []
        started: list[StreamFrame] = []
        self._pass_rejected(reached)
        if self.last is None:
            if not self.queue:
                return None if not reached else Step(np.zeros(0), np.zeros(0), reached, started, 1.0)
            first = self.queue.popleft()
            self.last, self.clock, self.previous = first, first.time_s, None
            first.segment_start = True
            first.started = True
            started.append(first)
            reached.append(first)
            self._pass_rejected(reached)
        assert self.clock is not None
        speed = self._speed()
        if self.queue:
            self._renew_gap()
            self.clock += dt * speed
        while self.queue and self.queue[0].time_s <= self.clock:
            frame = self.queue.popleft()
            reached.append(frame)
            self.previous, self.last = self.last, frame
            self._pass_rejected(reached)
            if self.queue:
                self._renew_gap()
        assert self.last.q is not None and self.last.dq is not None
        if not self.queue:
            self.clock = self.last.time_s  # a stall: stop at the newest target
            root = None if self.last.root is None or not self.play_root else self.last.root.copy()
            return Step(self.last.q.copy(), np.zeros_like(self.last.q), reached, started, speed, root,
                        None if root is None else np.zeros(6))
        nxt = self.queue[0]
        assert nxt.q is not None and nxt.dq is not None
        if not nxt.started:
            started.append(nxt)
            nxt.started = True
        span = nxt.time_s - self.last.time_s
        a = 0.0 if span <= 0 else min(1.0, max(0.0, (self.clock - self.last.time_s) / span))
        q = self.last.q + a * (nxt.q - self.last.q)
        dq = (self.last.dq + a * (nxt.dq - self.last.dq)) * speed
        if speed > 1.0:
            self.catchup_steps += 1
        root, root_vel = self._root(nxt, a) if self.play_root else (None, None)
        return Step(q, dq, reached, started, speed, root, root_vel)

    def _root(self, nxt: StreamFrame, a: float) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The root pose ``a`` of the way from ``last`` to ``nxt``; the velocity at ``last``."""
        last = self.last
        assert last is not None
        if last.root is None or nxt.root is None:
            return None, None
        pos = last.root[:3] + a * (nxt.root[:3] - last.root[:3])
        root = np.concatenate([pos, Q.slerp(last.root[3:], nxt.root[3:], a)])
        before = self.previous if self.previous is not None and not last.segment_start else last
        after = last if nxt.segment_start or self._jumps(last, nxt) else nxt
        if before is not last and self._jumps(before, last):
            before = last
        if before is after or before.root is None or after.root is None or after.time_s <= before.time_s:
            return root, np.zeros(6)
        span = after.time_s - before.time_s
        lin = (after.root[:3] - before.root[:3]) / span
        ang = Q.log(Q.multiply(after.root[3:], Q.conjugate(before.root[3:]))) / span
        return root, np.concatenate([lin, ang])

    @staticmethod
    def _jumps(a: StreamFrame, b: StreamFrame) -> bool:
        """The root moved between two frames faster than a body does (a loop of a take starting
        over where its stream time runs on): no velocity is differenced across it."""
        assert a.root is not None and b.root is not None
        span = b.time_s - a.time_s
        return span <= 0 or float(np.linalg.norm(b.root[:3] - a.root[:3])) > MAX_ROOT_SPEED * span

    def _renew_gap(self) -> None:
        """A next frame far ahead in stream time (or behind it: a new segment) is played one
        nominal frame after the last, not waited for."""
        assert self.last is not None and self.clock is not None
        nxt = self.queue[0]
        gap = nxt.time_s - self.last.time_s
        if gap <= 0 or gap > self.max_gap_s:
            nxt.segment_start = True
            shift = self.last.time_s + min(0.02, self.max_gap_s) - nxt.time_s
            self.shift_s += shift
            for frame in self.queue:
                frame.time_s += shift
            if self._newest is not None:
                self._newest += shift

    def _speed(self) -> float:
        # right after a frame arrives the newest is one interval ahead: that is on time, not lag
        if self.lag_s <= self.interval_s + self.lag_target_s or self.max_speed <= 1.0:
            return 1.0
        speed = self.max_speed
        if self.velocity_limits is not None and self.queue and self.last is not None:
            nxt = self.queue[0]
            if nxt.q is not None and self.last.q is not None:
                span = nxt.time_s - self.last.time_s
                if span > 0:
                    needed = np.abs(nxt.q - self.last.q) / span
                    with np.errstate(divide="ignore"):
                        allowed = np.min(np.where(needed > 0, self.velocity_limits / needed, np.inf))
                    speed = max(1.0, min(speed, float(allowed)))
        return speed

    def reset(self) -> None:
        """Forget the playback position (after damping: the next frame starts a new segment)."""
        self.last = self.previous = None
        self.clock = None
