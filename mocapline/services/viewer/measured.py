"""The physics robot on the web page: the robot as its LowState reports it (a real one, `mocapline
sim`, Unitree's simulator), drawn over the streamed target, with the live tracking error.

The viewer reads ``rt/lowstate`` itself (``--robot-domain``): it needs nothing from the bridge,
so it also shows a robot another controller drives, and the bridge's 500 Hz loop does no work
for the page. Cyclone DDS is imported only when a page first opens (the ``[robot]`` extra; the
viewer works without it), and the DDS reader exists only while a page is open: with none, no
sample is delivered to this process, read or decoded. Of the samples waiting at each pose update
only the newest is decoded.

The measured joint angles go through forward kinematics on the viewer's model of the robot.
LowState carries no base position: where `mocapline sim` publishes its base's pose beside it (its
topic ``mocapline/sim/base_state``, :mod:`mocapline.robot.unitree.base`, read on the same terms as
LowState) the measured robot is drawn where its base is, so a robot on its own feet is seen
walking off its reference; elsewhere (a real robot, Unitree's simulator) at the streamed target's
root pose, where what differs between the two robots is the joint error. The tracking error is
the joints' either way (measured minus the target the page shows, per joint group; it includes the
bridge's playback delay, as the picture does).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.robot.model import default_qpos
from mocapline.robot.unitree.state import MeasuredState, StateDecoder, group_errors
from mocapline.services.viewer.scene import MeasuredPose

log = logging.getLogger("mocapline.viewer")
CLOSE_AFTER_S = 5.0  # no page for this long: the DDS reader is deleted


@dataclass
class MeasuredCounters:
    lowstate_received: int = 0  # valid samples decoded (the newest of each update)
    lowstate_skipped: int = 0  # older samples of an update, not decoded
    lowstate_rejected: Counter[str] = field(default_factory=Counter)
    reader_opens: int = 0
    base_received: int = 0  # the sim's base poses taken (the newest of each update)

    def as_dict(self) -> dict[str, Any]:
        return {"lowstate_received": self.lowstate_received, "lowstate_skipped": self.lowstate_skipped,
                "lowstate_rejected": sum(self.lowstate_rejected.values()),
                "lowstate_rejected_by_reason": dict(sorted(self.lowstate_rejected.items())),
                "lowstate_reader_opens": self.reader_opens, "base_received": self.base_received}


class MeasuredRobot:
    """LowState in, the measured robot's body poses out (``joint_adr``: the model's qpos address of
    each of the robot's joints in stream order, as the viewer's QposWriter maps them)."""

    def __init__(self, robot: RobotDescription, domain: int, interface: str, model: mujoco.MjModel,
                 joint_adr: np.ndarray, hand_adr: np.ndarray | None = None) -> None:
        self.robot = robot
        self.decoder = StateDecoder(robot)
        self.groups = robot.groups
        self.domain, self.interface = domain, interface
        self.model = model
        self.data = mujoco.MjData(model)
        self.joint_adr = joint_adr
        # a build with hands whose joints the model has free: the sim's HandState_ moves them too
        self.hand_adr = hand_adr if hand_adr is not None else np.zeros(0, dtype=np.int64)
        hands = robot.hands
        self.hand_topics = hands.state_topics if hands is not None and len(self.hand_adr) else ()
        self._hand_readers: list[Any] = []
        self.hand_q: np.ndarray | None = None
        self.counters = MeasuredCounters()
        self.latest: MeasuredState | None = None
        self.latest_at = 0.0
        self.unavailable: str | None = None
        self._dds: Any = None
        self._reader: Any = None
        self._base_reader: Any = None
        self.base: np.ndarray | None = None  # (7,) the sim's base position and quaternion, newest
        self.base_at = 0.0
        self._unwatched_since: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The viewer's heartbeat fields: its counters, and whether a DDS reader exists now."""
        return {**self.counters.as_dict(), "lowstate_reading": self._reader is not None}

    def poll(self, watching: bool, now: float | None = None) -> None:
        """Take what LowState waits while a page watches; delete the reader when none has for a while."""
        now = time.monotonic() if now is None else now
        if not watching:
            if self._reader is not None:
                self._unwatched_since = self._unwatched_since or now
                if now - self._unwatched_since >= CLOSE_AFTER_S:
                    self._reader = self._base_reader = None  # their last references: Cyclone deletes the readers
                    self._hand_readers = []
            return
        self._unwatched_since = None
        if self._reader is None and not self._open():
            return
        self._take_base(now)
        self._take_hands()
        samples = self._reader.take(256)
        if not samples:
            return
        state, looked = self.decoder.newest(samples, self.counters.lowstate_rejected)
        self.counters.lowstate_skipped += len(samples) - looked
        if state is not None:
            self.counters.lowstate_received += 1
            self.latest, self.latest_at = state, now

    def _take_base(self, now: float) -> None:
        from mocapline.robot.unitree.base import BASE_STATE
        from mocapline.robot.unitree.lowlevel import LayoutError

        if self._base_reader is None:
            return
        for sample in reversed(self._base_reader.take(256)):
            try:
                rec = BASE_STATE.from_sample(sample)
            except LayoutError:
                continue
            pose = np.concatenate([rec["position"], rec["quaternion"]]).astype(np.float64)
            if BASE_STATE.crc_ok(rec) and np.all(np.isfinite(pose)) and np.linalg.norm(pose[3:]) > 0.5:
                self.base, self.base_at = pose, now
                self.counters.base_received += 1
                return

    def _take_hands(self) -> None:
        from mocapline.robot.unitree.hand import MOTORS, read_hand_state
        from mocapline.robot.unitree.lowlevel import LayoutError

        for side, reader in enumerate(self._hand_readers):
            for sample in reversed(reader.take(64)):
                try:
                    q = np.array(read_hand_state(sample)["motor_state"]["q"], dtype=np.float64)
                except (LayoutError, ValueError):
                    continue
                if np.all(np.isfinite(q)):
                    if self.hand_q is None:
                        self.hand_q = np.zeros(len(self.hand_adr))
                    self.hand_q[side * MOTORS:(side + 1) * MOTORS] = q
                    break

    def _open(self) -> bool:
        if self.unavailable is not None:
            return False
        try:
            if self._dds is None:
                from mocapline.robot.unitree.dds import LowLevel, dds_settings

                self._dds = LowLevel(dds_settings(self.robot, self.domain, self.interface))
            self._reader = self._dds.state_reader(waitable=False)
            self._base_reader = self._dds.base_reader(waitable=False)
            self._hand_readers = [self._dds.hand_reader(t, state=True) for t in self.hand_topics]
        except Exception as exc:  # noqa: BLE001 - no cyclonedds, or no such interface: the page goes on without
            self.unavailable = f"{type(exc).__name__}: {exc}"
            log.warning("no measured robot on the page (LowState on DDS domain %d): %s", self.domain,
                        self.unavailable)
            return False
        self.counters.reader_opens += 1
        log.info("reading LowState on DDS domain %d (%s) while a page is open", self.domain,
                 self.interface or "default interface")
        return True

    def view(self, target: tuple[int, np.ndarray] | None, now: float | None = None) -> MeasuredPose | None:
        """The measured robot at the root pose of ``target`` (avatar_index, its qpos), or standing
        at the origin without one, and its joint error against the target; None before the first
        LowState."""
        if self.latest is None:
            return None
        now = time.monotonic() if now is None else now
        qpos = self.data.qpos
        if self.base is not None and abs(self.base_at - self.latest_at) < 1.0:
            qpos[0:3] = self.base[:3]  # the sim's own base: where the robot is
            qpos[3:7] = self.base[3:] / np.linalg.norm(self.base[3:])
        elif target is not None:
            qpos[0:7] = target[1][0:7]
        else:
            qpos[0:7] = default_qpos(self.robot, self.model)[0:7]
            quat = self.latest.quaternion
            norm = float(np.linalg.norm(quat))
            if norm > 1e-6:
                qpos[3:7] = quat / norm
        qpos[self.joint_adr] = self.latest.q
        if self.hand_q is not None:
            qpos[self.hand_adr] = self.hand_q
        mujoco.mj_kinematics(self.model, self.data)
        errors = group_errors(self.latest.q, target[1][self.joint_adr], self.groups) if target is not None else None
        return MeasuredPose(target[0] if target is not None else -1, now - self.latest_at, errors,
                            self.data.xpos, self.data.xquat)

    def close(self) -> None:
        self._reader = self._base_reader = None
        self._hand_readers = []
        if self._dds is not None:
            self._dds.close()
            self._dds = None
