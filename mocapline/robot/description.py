"""A robot build as data: what every stage asks about the robot it drives, in one record.

One TOML file per build in ``mocapline/robot/builds/`` (the registry, :mod:`.registry`, reads
them): the model files (MuJoCo Menagerie's, from the assets wheel) and the joints the build lacks,
the joints in stream order with their motor slot, group, velocity limit, PD gains and poses, the
IK configuration per source skeleton, the bodies the stages use by name (root, torso, feet,
wrists), and the low-level interface (the Unitree DDS message family and topics). A file may
``extends = "other"``: its tables are merged over the other's (arrays and values replace), and
joints the build's model locks are dropped from the inherited list, so the 23-DoF G1 is the 29-DoF
one minus its locked joints.

Joint ranges and torque limits are not repeated here: they are the model's
(:func:`mocapline.robot.model.joint_ranges`, :func:`~mocapline.robot.model.torque_limits`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GROUPS = ("legs", "waist", "arms")
FAMILIES = ("unitree_hg", "unitree_go")


class RobotDescriptionError(ValueError):
    """A robot description that is malformed or contradicts itself (or its model)."""


@dataclass(frozen=True)
class Joint:
    """One actuated joint of the stream, in stream order."""

    name: str  # the model's joint name
    motor: int  # the motor slot on the low-level interface (LowCmd_.motor_cmd[motor])
    group: str  # legs | waist | arms
    velocity: float  # rad/s, the vendor's published limit
    kp: float  # PD gains of the vendor's own examples, at ``LowLevel.gains_rate_hz``
    kd: float
    stand: float = 0.0  # rad: the pose the legs are held at (`--joints upper`) and the sim starts in
    rest: float | None = None  # rad: the pose the bridge rests in after the take (default: stand)
    mode: int = 1  # the motor_cmd mode that enables this motor (the H1's strong motors take 0x0A)
    # rad [low, high]: the part of the joint's range the retargeter may use (the model's range
    # elsewhere); the G1's shoulder yaw is kept to a human arm's twist, see docs/retarget.md
    ik_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class ModelFiles:
    """The MuJoCo model, from an installed package (nothing is downloaded at run time)."""

    package: str
    directory: str
    file: str
    scene: str
    lock: tuple[str, ...] = ()  # joints this build does not have: removed, their bodies fixed at 0
    ik_lock: tuple[str, ...] = ()  # joints the IK and the stream leave out (hands: their own stage)


@dataclass(frozen=True)
class Site:
    """A site added to the model for the IK (e.g. the ball of the foot), in its body's frame."""

    body: str
    pos: tuple[float, float, float]


@dataclass(frozen=True)
class LowLevel:
    """The vendor's low-level interface: which DDS message family, on which topics."""

    family: str  # unitree_hg (35 motor slots: G1, H1-2) | unitree_go (20 slots: H1)
    lowcmd_topic: str = "rt/lowcmd"
    lowstate_topic: str = "rt/lowstate"
    arm_sdk_topic: str = ""  # the vendor's arm interface beside its own balance (empty: none)
    arm_sdk_weight_slot: int = -1  # the motor slot whose q carries arm_sdk's blend weight in [0, 1]
    gains_rate_hz: float = 500.0  # the command rate the vendor's examples use with these gains


@dataclass(frozen=True)
class Hands:
    """Hand joints in the model, driven by a hand stage of their own (not in the body's stream)."""

    kind: str  # dex3 | inspire
    left: tuple[str, ...]  # joints, in the hand's motor order
    right: tuple[str, ...]
    # The retargeting (services/retarget/hands.py): each robot finger follows one human finger
    # (core/bodies.py HAND_BONES' finger names: First = thumb, Second = index, ..., Fifth = little);
    # ``*_tips`` are the fingers' last links, in the order of ``fingers``. The fingers named Second
    # and Third (index and middle) set the palm's frame, so a hand has both.
    fingers: tuple[str, ...] = ()
    left_tips: tuple[str, ...] = ()
    right_tips: tuple[str, ...] = ()
    # The hands' low level (``mocapline robot --hands``, ``mocapline sim``): command and state
    # topics (left, right) and the gains of every hand motor.
    cmd_topics: tuple[str, ...] = ()
    state_topics: tuple[str, ...] = ()
    kp: float = 0.0
    kd: float = 0.0


@dataclass(frozen=True)
class IKTemplate:
    """How this build's IK configs derive from another build's (``mocapline ik-config``): each of the
    template's robot frames is this build's ``frames[name].frame``, and the human joint it follows
    sits at the anchor of ``frames[name].anchor`` (the mean of those joints' anchors; an empty list:
    the frame's origin; none given: where the template has it, for a frame of the same geometry);
    ``weights`` override the template entry's (``rotation_weight = 0`` for a frame without the
    joints to turn it)."""

    robot: str
    frames: dict[str, TemplateFrame]


@dataclass(frozen=True)
class TemplateFrame:
    frame: str
    anchor: tuple[str, ...] | None = None
    weights: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class RobotDescription:
    """Compared and hashed by identity: the registry hands out one instance per build."""

    name: str
    title: str
    model: ModelFiles
    root_body: str
    standing_height: float  # m: the root's height standing with every joint at 0
    torso_body: str  # the upper body's link: a band pulls here, the shoulder pole's frame
    feet: tuple[str, str]  # the foot links (left, right)
    wrists: tuple[str, str]  # where the hands are mounted: MocapFrame.left_hand / right_hand
    joints: tuple[Joint, ...]
    low_level: LowLevel
    ik_configs: dict[str, str]  # source skeleton (axis_studio, xsens, cmu, mixamo) -> file in assets/ik_configs
    ik_sites: dict[str, Site] = field(default_factory=dict)
    shoulder_pitch: tuple[str, str] | None = None  # joints whose gimbal pole the IK keeps a branch at
    hands: Hands | None = None
    # The robot in the source skeletons' rest poses, joint -> rad (the rest 0): ``t_pose`` (Axis
    # Studio, CMU, Mixamo: arms out sideways, elbows straight), ``n_pose`` (Xsens: arms down, elbows
    # straight). An IK config's rotation offsets are the robot's body rotations there.
    ik_rest: dict[str, dict[str, float]] = field(default_factory=dict)
    ik_template: IKTemplate | None = None

    # -- the joints as arrays, in stream order --------------------------------------------------------

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    @property
    def joint_count(self) -> int:
        return len(self.joints)

    @property
    def motor_index(self) -> np.ndarray:
        return np.array([j.motor for j in self.joints], dtype=np.intp)

    @property
    def velocity_limits(self) -> np.ndarray:
        return np.array([j.velocity for j in self.joints], dtype=np.float64)

    @property
    def kp(self) -> np.ndarray:
        return np.array([j.kp for j in self.joints], dtype=np.float64)

    @property
    def kd(self) -> np.ndarray:
        return np.array([j.kd for j in self.joints], dtype=np.float64)

    @property
    def stand(self) -> np.ndarray:
        return np.array([j.stand for j in self.joints], dtype=np.float64)

    @property
    def rest(self) -> np.ndarray:
        return np.array([j.stand if j.rest is None else j.rest for j in self.joints], dtype=np.float64)

    @property
    def motor_modes(self) -> np.ndarray:
        return np.array([j.mode for j in self.joints], dtype=np.uint8)

    def group(self, name: str) -> np.ndarray:
        """Stream indices of the joints of one group (legs, waist, arms)."""
        if name not in GROUPS:
            raise KeyError(f"joint group {name!r}: choose from {GROUPS}")
        return np.array([i for i, j in enumerate(self.joints) if j.group == name], dtype=np.intp)

    @property
    def groups(self) -> dict[str, np.ndarray]:
        return {g: self.group(g) for g in GROUPS}

    @property
    def upper(self) -> np.ndarray:
        """Waist and arms: what ``--joints upper`` and the arm interface take from the stream."""
        return np.concatenate([self.group("waist"), self.group("arms")])

    def index(self, joint: str) -> int:
        """The stream index of a joint by name."""
        try:
            return self.joint_names.index(joint)
        except ValueError:
            raise KeyError(f"{self.name}: no joint {joint!r}") from None


def _table(cls: type, raw: Any, where: str, **values: Any) -> Any:
    """``cls`` from a TOML table: unknown keys refused by name, lists made tuples, ``values`` over it."""
    if not isinstance(raw, dict):
        raise RobotDescriptionError(f"{where}: expected a table, got {raw!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    if set(raw) - known:
        raise RobotDescriptionError(f"{where}: unknown keys {sorted(set(raw) - known)} (known: {sorted(known)})")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    try:
        return cls(**{**fields, **values})
    except TypeError as exc:
        raise RobotDescriptionError(f"{where}: {exc}") from None


def _pair(value: Any, where: str) -> tuple[str, str]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise RobotDescriptionError(f"{where}: expected [left, right], got {value!r}")
    return value


def _template_frame(name: str, value: Any) -> TemplateFrame:
    """``"frame"``, ``["frame", [anchor joints]]``, ``["frame", [joints], {weights}]``, or
    ``{ weights }`` alone (the same frame, the template's anchor)."""
    if isinstance(value, dict):
        return TemplateFrame(name, None, dict(value))
    if isinstance(value, str):
        return TemplateFrame(value)
    value = list(value)
    return TemplateFrame(str(value[0]), tuple(value[1]) if len(value) > 1 else None,
                         dict(value[2]) if len(value) > 2 else {})


def parse_description(raw: dict[str, Any]) -> RobotDescription:
    """A description from its TOML table (inheritance already merged, see :mod:`.registry`),
    checked in itself; :func:`mocapline.robot.model.load_ik_model` checks it against its model."""
    raw = {k: v for k, v in raw.items() if k != "extends"}
    name = str(raw.get("name", "?"))
    for key in ("model", "joints", "low_level"):
        if key not in raw:
            raise RobotDescriptionError(f"{name}: missing {key!r}")
    model = _table(ModelFiles, raw["model"], f"{name}: [model]")
    locked = set(model.lock) | set(model.ik_lock)
    joints = tuple(_table(Joint, j, f"{name}: joints[{i}]") for i, j in enumerate(raw["joints"])
                   if not (isinstance(j, dict) and j.get("name") in locked))
    sites = {k: _table(Site, v, f"{name}: ik_sites.{k}") for k, v in dict(raw.get("ik_sites", {})).items()}
    hands = _table(Hands, raw["hands"], f"{name}: [hands]") if "hands" in raw else None
    if hands is not None and hands.fingers and not (
            len(hands.left_tips) == len(hands.right_tips) == len(hands.fingers)
            and {"Second", "Third"} <= set(hands.fingers)):
        raise RobotDescriptionError(f"{name}: [hands]: left_tips and right_tips need one link per finger of "
                                    f"fingers {list(hands.fingers)}, which names Second and Third (the palm's frame)")
    template = None
    if "ik_template" in raw:
        t = raw["ik_template"]
        frames = {k: _template_frame(k, v) for k, v in dict(t.get("frames", {})).items()}
        template = _table(IKTemplate, {"robot": t.get("robot")}, f"{name}: [ik_template]", frames=frames)
    special = ("model", "joints", "ik_sites", "hands", "ik_template")
    desc = _table(RobotDescription, {k: v for k, v in raw.items() if k not in special},
                  name, model=model, joints=joints, ik_sites=sites, hands=hands, ik_template=template,
                  low_level=_table(LowLevel, raw["low_level"], f"{name}: [low_level]"),
                  ik_configs=dict(raw.get("ik_configs", {})))
    _pair(desc.feet, f"{name}: feet")
    _pair(desc.wrists, f"{name}: wrists")
    if desc.shoulder_pitch is not None:
        _pair(desc.shoulder_pitch, f"{name}: shoulder_pitch")
    _check(desc)
    return desc


def _check(desc: RobotDescription) -> None:
    from mocapline.robot.unitree.family import family

    where = desc.name
    if not desc.joints:
        raise RobotDescriptionError(f"{where}: no joints")
    names = desc.joint_names
    if len(set(names)) != len(names):
        raise RobotDescriptionError(f"{where}: a joint is listed twice")
    if desc.low_level.family not in FAMILIES:
        raise RobotDescriptionError(f"{where}: low_level.family {desc.low_level.family!r}: choose from {FAMILIES}")
    slots = family(desc.low_level.family).motor_slots
    motors = [j.motor for j in desc.joints]
    if len(set(motors)) != len(motors) or not all(0 <= m < slots for m in motors):
        raise RobotDescriptionError(f"{where}: motor slots must be distinct and in 0..{slots - 1} "
                                    f"({desc.low_level.family}): {motors}")
    ll = desc.low_level
    if ll.arm_sdk_topic and not (0 <= ll.arm_sdk_weight_slot < slots and ll.arm_sdk_weight_slot not in motors):
        raise RobotDescriptionError(f"{where}: low_level.arm_sdk_weight_slot must be a free slot in 0..{slots - 1}")
    for j in desc.joints:
        if j.group not in GROUPS:
            raise RobotDescriptionError(f"{where}: joint {j.name}: group {j.group!r}: choose from {GROUPS}")
        if not (j.velocity > 0 and j.kp >= 0 and j.kd >= 0):
            raise RobotDescriptionError(f"{where}: joint {j.name}: velocity must be > 0, kp and kd >= 0")
        if j.ik_range is not None and not (len(j.ik_range) == 2 and all(isinstance(v, (int, float)) for v in j.ik_range)
                                           and math.isfinite(j.ik_range[0]) and math.isfinite(j.ik_range[1])
                                           and j.ik_range[0] < j.ik_range[1]):
            raise RobotDescriptionError(f"{where}: joint {j.name}: ik_range must be [low, high] with low < high, "
                                        f"got {list(j.ik_range)}")
