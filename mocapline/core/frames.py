"""In-process frames (dataclasses over numpy arrays) and their protobuf wire form.

``from_proto`` checks every repeated field's length: a receiver never indexes past what arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mocapline.core import pb
from mocapline.core.bodies import GMR_BODIES, HAND_BODIES

N_BODIES = len(GMR_BODIES)
N_HAND_BODIES = len(HAND_BODIES)


class FrameFieldError(ValueError):
    """A decoded message has a repeated field of the wrong length."""

    reason = "field_length"


class ProtobufDecodeError(ValueError):
    """Bytes that are not a valid protobuf message of the expected type."""

    reason = "protobuf"


def _parse(msg: Any, data: bytes | memoryview) -> Any:
    try:
        msg.ParseFromString(bytes(data))
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError subclasses
        raise ProtobufDecodeError(str(exc)) from None
    return msg


def _check(name: str, values: object, expected: int) -> None:
    n = len(values)  # type: ignore[arg-type]
    if n != expected:
        raise FrameFieldError(f"{name} has {n} values, expected {expected}")


def _rows(name: str, values: Any, width: int, count: int | None = None) -> np.ndarray:
    """A repeated field of ``width``-value rows (``count`` of them, when another field says how many)."""
    n = len(values)
    if n % width or (count is not None and n != count * width):
        raise FrameFieldError(f"{name} has {n} values, expected {'a multiple of ' if count is None else ''}"
                              f"{width if count is None else count * width}")
    return np.array(values, dtype=np.float64).reshape(-1, width)


def _no_rows(width: int) -> Any:
    return field(default_factory=lambda: np.zeros((0, width)))


@dataclass(slots=True)
class HumanFrame:
    """The 23 GMR bodies of one posture_index (and the hands' 40 where the source has them): metres,
    Z-up world, quaternions w x y z."""

    posture_index: int
    capture_timestamp_us: int
    positions: np.ndarray  # (23, 3)
    quaternions: np.ndarray  # (23, 4)
    traceparent: str = ""
    source: str = "axis"
    segment: int = 0
    session_id: str = ""
    source_port: int = 0
    avatar_index: int = 0  # the performer (Axis avatar_index, Xsens character ID)
    avatar_name: str = ""
    # The hand bodies (core/bodies.py HAND_BODIES, 40) where the source has finger bones (Axis: always;
    # Xsens: with gloves), else none: ``has_hands``.
    finger_positions: np.ndarray = _no_rows(3)  # (F, 3)
    finger_quaternions: np.ndarray = _no_rows(4)  # (F, 4)
    prop_character: tuple[int, ...] = ()  # per prop: the character ID it came with
    prop_segment: tuple[int, ...] = ()  # per prop: its segment id
    prop_positions: np.ndarray = _no_rows(3)  # (P, 3)
    prop_quaternions: np.ndarray = _no_rows(4)  # (P, 4)
    human_height: float = 0.0  # m, from the source (Xsens MXTP13 scaling); 0: not known

    @property
    def has_hands(self) -> bool:
        """Every hand body is here (a glove-less take, or a source without finger bones, has none)."""
        return len(self.finger_positions) == N_HAND_BODIES

    def body(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        i = GMR_BODIES.index(name)
        return self.positions[i], self.quaternions[i]

    def to_proto(self) -> pb.HumanFrame:
        return pb.HumanFrame(
            posture_index=self.posture_index,
            capture_timestamp_us=self.capture_timestamp_us,
            positions=self.positions.ravel().tolist(),
            quaternions=self.quaternions.ravel().tolist(),
            traceparent=self.traceparent,
            source=self.source,
            segment=self.segment,
            session_id=self.session_id,
            source_port=self.source_port,
            avatar_index=self.avatar_index,
            avatar_name=self.avatar_name,
            finger_positions=self.finger_positions.ravel().tolist(),
            finger_quaternions=self.finger_quaternions.ravel().tolist(),
            prop_character=list(self.prop_character),
            prop_segment=list(self.prop_segment),
            prop_positions=self.prop_positions.ravel().tolist(),
            prop_quaternions=self.prop_quaternions.ravel().tolist(),
            human_height=self.human_height,
        )

    def to_bytes(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def from_proto(cls, msg: pb.HumanFrame) -> HumanFrame:
        _check("positions", msg.positions, N_BODIES * 3)
        _check("quaternions", msg.quaternions, N_BODIES * 4)
        fingers = _rows("finger_positions", msg.finger_positions, 3)
        props = len(msg.prop_character)
        _check("prop_segment", msg.prop_segment, props)
        return cls(
            posture_index=msg.posture_index,
            capture_timestamp_us=msg.capture_timestamp_us,
            positions=np.array(msg.positions, dtype=np.float64).reshape(N_BODIES, 3),
            quaternions=np.array(msg.quaternions, dtype=np.float64).reshape(N_BODIES, 4),
            traceparent=msg.traceparent,
            source=msg.source,
            segment=msg.segment,
            session_id=msg.session_id,
            source_port=msg.source_port,
            avatar_index=msg.avatar_index,
            avatar_name=msg.avatar_name,
            finger_positions=fingers,
            finger_quaternions=_rows("finger_quaternions", msg.finger_quaternions, 4, len(fingers)),
            prop_character=tuple(msg.prop_character),
            prop_segment=tuple(msg.prop_segment),
            prop_positions=_rows("prop_positions", msg.prop_positions, 3, props),
            prop_quaternions=_rows("prop_quaternions", msg.prop_quaternions, 4, props),
            human_height=msg.human_height,
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> HumanFrame:
        return cls.from_proto(_parse(pb.HumanFrame(), data))


@dataclass(slots=True)
class RobotFrame:
    """One retargeted robot pose: root position (m), root quaternion (w x y z), the robot's joints
    (rad, its stream order; ``robot_model`` names the build)."""

    posture_index: int
    capture_timestamp_us: int
    root_pos: np.ndarray  # (3,)
    root_quat: np.ndarray  # (4,)
    joint_pos: np.ndarray  # (n,)
    ik_failed: bool = False
    traceparent: str = ""
    segment: int = 0
    session_id: str = ""
    avatar_index: int = 0  # the performer, carried from the HumanFrame
    avatar_name: str = ""
    robot_model: str = ""
    hand_joint_pos: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (h,) the build's hands, or none
    has_hands: bool = False  # the HumanFrame had hand bodies (else the hands are at rest)

    def to_proto(self) -> pb.RobotFrame:
        return pb.RobotFrame(
            posture_index=self.posture_index,
            capture_timestamp_us=self.capture_timestamp_us,
            root_pos=self.root_pos.tolist(),
            root_quat=self.root_quat.tolist(),
            joint_pos=self.joint_pos.tolist(),
            ik_failed=self.ik_failed,
            traceparent=self.traceparent,
            segment=self.segment,
            session_id=self.session_id,
            avatar_index=self.avatar_index,
            avatar_name=self.avatar_name,
            robot_model=self.robot_model,
            hand_joint_pos=self.hand_joint_pos.tolist(),
            has_hands=self.has_hands,
        )

    def to_bytes(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def from_proto(cls, msg: pb.RobotFrame, joint_count: int | None = None) -> RobotFrame:
        """``joint_count``: the robot's (None: any, as the link's header already checked it)."""
        _check("root_pos", msg.root_pos, 3)
        _check("root_quat", msg.root_quat, 4)
        if joint_count is not None:
            _check("joint_pos", msg.joint_pos, joint_count)
        return cls(
            posture_index=msg.posture_index,
            capture_timestamp_us=msg.capture_timestamp_us,
            root_pos=np.array(msg.root_pos, dtype=np.float64),
            root_quat=np.array(msg.root_quat, dtype=np.float64),
            joint_pos=np.array(msg.joint_pos, dtype=np.float64),
            ik_failed=msg.ik_failed,
            traceparent=msg.traceparent,
            segment=msg.segment,
            session_id=msg.session_id,
            avatar_index=msg.avatar_index,
            avatar_name=msg.avatar_name,
            robot_model=msg.robot_model,
            hand_joint_pos=np.array(msg.hand_joint_pos, dtype=np.float64),
            has_hands=msg.has_hands,
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, joint_count: int | None = None) -> RobotFrame:
        return cls.from_proto(_parse(pb.RobotFrame(), data), joint_count)


# The MocapFrame's repeated fields of fixed length (docs/protocol.md); joint_pos and joint_vel
# carry the robot's joint count (the header's joint_count).
MOCAP_FIELD_LENGTHS: dict[str, int] = {
    "body_pos_w": 3,
    "body_lin_vel_w": 3,
    "body_quat_w": 4,
    "body_ang_vel_w": 3,
    "left_hand": 7,
    "right_hand": 7,
}
MOCAP_JOINT_FIELDS = ("joint_pos", "joint_vel")


def check_mocap_frame(msg: pb.MocapFrame, joint_count: int | None = None, hand_count: int | None = None) -> None:
    """Raise FrameFieldError unless every repeated field has its length: the fixed ones, the joints
    ``joint_count`` each (None: as many as ``joint_pos`` has), and the hands' joints none or
    ``hand_count`` (None: any even count, two hands of the same joints)."""
    for name, expected in MOCAP_FIELD_LENGTHS.items():
        _check(name, getattr(msg, name), expected)
    joints = len(msg.joint_pos) if joint_count is None else joint_count
    for name in MOCAP_JOINT_FIELDS:
        _check(name, getattr(msg, name), joints)
    hands = len(msg.hand_joint_pos)
    if hands and (hands % 2 if hand_count is None else hands != hand_count):
        raise FrameFieldError(f"hand_joint_pos has {hands} values, expected none or "
                              f"{'an even count' if hand_count is None else hand_count}")


def parse_mocap_frame(data: bytes | memoryview, joint_count: int | None = None,
                      hand_count: int | None = None) -> pb.MocapFrame:
    """Decode and length-check a MocapFrame (``joint_count``: the header's, or the robot's;
    ``hand_count``: the robot's hand joints, see check_mocap_frame); FrameFieldError (reason
    field_length) or ProtobufDecodeError (reason protobuf) on bad bytes."""
    msg = _parse(pb.MocapFrame(), data)
    check_mocap_frame(msg, joint_count, hand_count)
    return msg
