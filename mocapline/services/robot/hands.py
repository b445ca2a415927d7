"""`mocapline robot --hands dex3`: the hands' joints of each MocapFrame (``hand_joint_pos``) as
HandCmd_ on both hands' topics (the description's ``[hands]``: ``rt/dex3/{left,right}/cmd``).

A frame's hand target is taken when the body's playback reaches that frame (the bridge's timeline:
the body and the hands of one frame are applied together), then sent at ``rate_hz`` and at once
on a new target. Safety as for the body: the target is clipped into each joint's range less the
margin, each command moves at most ``max_speed`` rad/s from the last (so the start ramps in from
the measured hand, or from rest), a frame with a non-finite hand joint is refused with its body
(``non_finite``), holding keeps the last target, damping sends kp 0 with the description's kd, an
e-stop opens both gains to zero. HandState_ (``rt/dex3/{left,right}/state``) gives the measured
joints: the tracking error is measured - commanded over the last commands.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mocapline.core.counters import RobotHandCounts
from mocapline.robot.description import RobotDescription
from mocapline.robot.unitree.hand import MOTORS, hand_cmd, new_hand_cmd, read_hand_state

HAND_KINDS = ("none", "dex3")
ERROR_WINDOW = 200  # hand states the tracking error is taken over


@dataclass
class HandFrame:
    """What the driver sends this tick: per hand its DDS sample."""

    samples: tuple[bytes, bytes]


@dataclass
class HandDriver:
    robot: RobotDescription
    lower: np.ndarray  # (14,) the joints' ranges less the margin, left then right
    upper: np.ndarray
    rate_hz: float = 100.0
    max_speed: float = 6.0  # rad/s
    target: np.ndarray | None = None
    commanded: np.ndarray | None = None
    measured: np.ndarray | None = None
    frames: int = 0  # hand targets taken (frames applied)
    commands_sent: int = 0  # HandCmd_ pairs written
    states_received: int = 0
    states_rejected: int = 0
    last_posture_index: int | None = None
    _last_sent: float | None = None
    _new: bool = False
    _errors: deque[float] = field(default_factory=lambda: deque(maxlen=ERROR_WINDOW))

    def __post_init__(self) -> None:
        self._cmds = (new_hand_cmd(), new_hand_cmd())
        hands = self.robot.hands
        assert hands is not None
        self.kp, self.kd = hands.kp, hands.kd
        self.rest = np.clip(0.0, self.lower, self.upper)

    @classmethod
    def for_robot(cls, robot: RobotDescription, range_margin: float, rate_hz: float = 100.0) -> HandDriver:
        """The build's hands with their ranges from its model (ValueError: a build without them)."""
        from mocapline.robot.model import joint_ranges, physics_spec

        hands = robot.hands
        if hands is None or hands.kind != "dex3" or len(hands.cmd_topics) != 2:
            raise ValueError(f"--hands dex3: robot model {robot.name!r} has no Dex3-1 hands (try g1_dex3)")
        ranges = joint_ranges(physics_spec(robot).compile(), hands.left + hands.right)
        margin = np.minimum(range_margin, 0.25 * (ranges[:, 1] - ranges[:, 0]))
        return cls(robot, ranges[:, 0] + margin, ranges[:, 1] - margin, rate_hz)

    @property
    def joints(self) -> int:
        return len(self.lower)

    def take(self, q: np.ndarray, posture_index: int) -> None:
        """A frame's hand joints, as the body reaches it."""
        self.target = np.clip(q, self.lower, self.upper)
        self.frames += 1
        self.last_posture_index = posture_index
        self._new = True

    def on_state(self, side: int, sample: bytes) -> None:
        from mocapline.robot.unitree.lowlevel import LayoutError

        try:
            record = read_hand_state(sample)
        except (LayoutError, ValueError):
            self.states_rejected += 1
            return
        self.states_received += 1
        if self.measured is None:
            self.measured = self.rest.copy()
        q = np.array(record["motor_state"]["q"], dtype=np.float64)
        self.measured[side * MOTORS:(side + 1) * MOTORS] = q
        if self.commanded is not None:
            err = q - self.commanded[side * MOTORS:(side + 1) * MOTORS]
            self._errors.append(float(np.abs(err).mean()))

    def tick(self, now: float, state: str) -> HandFrame | None:
        """The HandCmd_ pair to send now (None: nothing due). ``state``: the body controller's."""
        due = self._last_sent is None or now - self._last_sent >= 0.999 / self.rate_hz  # ticks land on it
        if not (due or self._new) or (self.target is None and state not in ("estop", "damping")):
            return None
        dt = 1.0 / self.rate_hz if self._last_sent is None else max(0.0, now - self._last_sent)
        start = self.commanded if self.commanded is not None else (
            self.measured if self.measured is not None else self.rest)
        goal = self.target if self.target is not None else start
        if state == "estop":
            kp = kd = 0.0
            goal = start
        elif state == "damping":
            kp, kd = 0.0, self.kd
            goal = start
        else:
            kp, kd = self.kp, self.kd
        step = self.max_speed * max(dt, 1.0 / self.rate_hz)
        q = np.clip(start + np.clip(goal - start, -step, step), self.lower, self.upper)
        self.commanded = q
        self._last_sent, self._new = now, False
        self.commands_sent += 1
        return HandFrame((hand_cmd(self._cmds[0], q[:MOTORS], kp, kd), hand_cmd(self._cmds[1], q[MOTORS:], kp, kd)))

    def counts(self) -> RobotHandCounts:
        errors = np.array(self._errors) if self._errors else np.zeros(1)
        return RobotHandCounts(kind="dex3", frames=self.frames, commands_sent=self.commands_sent,
                               states_received=self.states_received, states_rejected=self.states_rejected,
                               last_posture_index=self.last_posture_index,
                               tracking_error_mean_rad=round(float(errors.mean()), 5),
                               tracking_error_max_rad=round(float(errors.max()), 5))
