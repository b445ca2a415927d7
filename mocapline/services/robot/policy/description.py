"""A learned controller as data: a policy description (TOML) says everything the runner needs to
feed an ONNX policy and turn its output into motor commands, so a user with their own policy writes
a file, not code (docs/robot.md, "Policy descriptions"; the shipped ones are in
``mocapline/robot/policies/``, beside the robot builds).

- ``joints``: the policy's joint order, by the robot description's names, each with its default
  pose (the action's offset and the reference at rest), PD gains and torque limit;
- ``[action]``: ``targets = default + scale * clip(action, -clip, clip)``;
- ``[observation]``: term groups (each term a source, a name and its options), one frame made of
  groups in order, ``history`` frames before it (oldest first, initialised with zeros or the first
  frame), then groups again ("after");
- ``rate_hz``: how often the policy runs (the bridge's LowCmd keeps its own rate).

The width of the observation follows from the terms: a description whose width is not the ONNX
input's is refused, both widths named (:mod:`.runner`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.robot.description import RobotDescription

POLICIES_DIR = Path(__file__).resolve().parents[3] / "robot" / "policies"

# (source, term) -> how wide it is: an int, "joints" (one per policy joint) or "axes" (one per axis
# named). Stream terms are the reference at the timeline's playback time; lowstate terms the newest
# LowState; policy terms the runner's own.
TERMS: dict[tuple[str, str], int | str] = {
    ("stream", "root_lin_vel"): "axes",  # the root's linear velocity (central differences), m/s
    ("stream", "root_ang_vel"): "axes",  # the root's angular velocity (central differences), rad/s
    ("stream", "root_height"): 1,  # the root's absolute height, m
    ("stream", "root_roll_pitch"): 2,  # rad, from the root's orientation
    ("stream", "joint_pos"): "joints",
    ("lowstate", "gyro"): "axes",  # the IMU's angular rate, its own frame, rad/s
    ("lowstate", "roll_pitch"): 2,  # rad, from the IMU's orientation
    ("lowstate", "projected_gravity"): 3,  # gravity's direction in the IMU's frame
    ("lowstate", "joint_pos"): "joints",
    ("lowstate", "joint_vel"): "joints",
    ("policy", "last_action"): "joints",  # the policy's previous output, raw (before clip and scale)
}
FRAMES = ("root", "heading", "world")  # what a velocity term is expressed in
HISTORY_INIT = ("zeros", "first")


class PolicyDescriptionError(ValueError):
    """A policy description that is malformed, contradicts itself, or does not fit its robot."""


@dataclass(frozen=True)
class PolicyJoint:
    name: str  # the robot description's joint name
    default: float  # rad: the action's offset, the reference's pose at rest
    kp: float
    kd: float
    torque: float  # N m: the PD torque is kept within this (by the target, see controller.py)


@dataclass(frozen=True)
class Term:
    """One observation term: ``clip((value - offset) * scale)``, ``zero``'d joints set to 0 first."""

    source: str
    name: str
    width: int
    axes: tuple[int, ...] = (0, 1, 2)  # for "axes" terms: which of x, y, z
    frame: str = "root"  # for the stream's velocities
    scale: float = 1.0
    offset_default: bool = False  # joint terms: minus the policy's default pose
    clip: tuple[float, float] | None = None
    zero: tuple[int, ...] = ()  # policy joint indices set to 0 (e.g. the ankles' velocities)


@dataclass(frozen=True)
class PolicyDescription:
    name: str
    title: str
    robot: str  # the robot build it was trained for
    rate_hz: float
    joints: tuple[PolicyJoint, ...]
    action_scale: float
    action_clip: float
    groups: dict[str, tuple[Term, ...]]
    frame: tuple[str, ...]  # group names making one observation frame
    after: tuple[str, ...]  # group names after the history
    history: int
    history_init: str
    stand_height: float  # m: the reference root height at rest
    checkpoint: str = ""  # where users get the weights (documentation only)
    source: str = ""  # the file it was read from

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    @property
    def default(self) -> np.ndarray:
        return np.array([j.default for j in self.joints], dtype=np.float64)

    @property
    def kp(self) -> np.ndarray:
        return np.array([j.kp for j in self.joints], dtype=np.float64)

    @property
    def kd(self) -> np.ndarray:
        return np.array([j.kd for j in self.joints], dtype=np.float64)

    @property
    def torque(self) -> np.ndarray:
        return np.array([j.torque for j in self.joints], dtype=np.float64)

    def terms(self, groups: tuple[str, ...]) -> tuple[Term, ...]:
        return tuple(t for g in groups for t in self.groups[g])

    @property
    def frame_width(self) -> int:
        return sum(t.width for t in self.terms(self.frame))

    @property
    def width(self) -> int:
        """The observation's width: the frame, its history, the terms after."""
        return self.frame_width * (1 + self.history) + sum(t.width for t in self.terms(self.after))

    def indices(self, robot: RobotDescription) -> np.ndarray:
        """The robot's stream index of each policy joint, in the policy's order."""
        missing = [n for n in self.joint_names if n not in robot.joint_names]
        if missing:
            raise PolicyDescriptionError(f"{self.name}: joints {missing} are not the {robot.name}'s "
                                         f"({robot.title}): this policy is for {self.robot!r}")
        return np.array([robot.index(n) for n in self.joint_names], dtype=np.intp)


def _known(raw: dict[str, Any], keys: set[str], where: str) -> None:
    if set(raw) - keys:
        raise PolicyDescriptionError(f"{where}: unknown keys {sorted(set(raw) - keys)} (known: {sorted(keys)})")


def _term(raw: Any, joints: tuple[str, ...], where: str) -> Term:
    if not isinstance(raw, dict):
        raise PolicyDescriptionError(f"{where}: expected a table, got {raw!r}")
    _known(raw, {"source", "term", "axes", "frame", "scale", "offset", "clip", "zero"}, where)
    source, name = str(raw.get("source", "")), str(raw.get("term", ""))
    kind = TERMS.get((source, name))
    if kind is None:
        known = ", ".join(f"{s}.{t}" for s, t in TERMS)
        raise PolicyDescriptionError(f"{where}: no term {source}.{name} (known: {known})")
    axes = tuple("xyz".index(a) for a in str(raw.get("axes", "xyz")) if a in "xyz")
    if kind == "axes" and not axes:
        raise PolicyDescriptionError(f"{where}: axes must name some of x, y, z")
    width = len(axes) if kind == "axes" else len(joints) if kind == "joints" else int(kind)
    frame = str(raw.get("frame", "root"))
    if frame not in FRAMES:
        raise PolicyDescriptionError(f"{where}: frame {frame!r}: choose from {FRAMES}")
    offset = raw.get("offset")
    if offset not in (None, "default") or (offset and kind != "joints"):
        raise PolicyDescriptionError(f"{where}: offset may only be \"default\", on a joint term")
    clip = raw.get("clip")
    if clip is not None:
        clip = (-float(clip), float(clip)) if isinstance(clip, int | float) else (float(clip[0]), float(clip[1]))
    zero = tuple(raw.get("zero", ()))
    unknown = [z for z in zero if z not in joints]
    if unknown or (zero and kind != "joints"):
        raise PolicyDescriptionError(f"{where}: zero names joints of a joint term; not policy joints: {unknown}")
    return Term(source, name, width, axes, frame, float(raw.get("scale", 1.0)), offset == "default", clip,
                tuple(joints.index(z) for z in zero))


def parse_policy(raw: dict[str, Any], source: str = "") -> PolicyDescription:
    name = str(raw.get("name", Path(source).stem or "?"))
    _known(raw, {"name", "title", "robot", "rate_hz", "joints", "action", "observation", "stand_height",
                 "checkpoint"}, name)
    for key in ("robot", "rate_hz", "joints", "action", "observation"):
        if key not in raw:
            raise PolicyDescriptionError(f"{name}: missing {key!r}")
    joints = []
    for i, j in enumerate(raw["joints"]):
        where = f"{name}: joints[{i}]"
        if not isinstance(j, dict):
            raise PolicyDescriptionError(f"{where}: expected a table")
        _known(j, {"name", "default", "kp", "kd", "torque"}, where)
        try:
            joints.append(PolicyJoint(str(j["name"]), float(j.get("default", 0.0)), float(j["kp"]), float(j["kd"]),
                                      float(j["torque"])))
        except KeyError as exc:
            raise PolicyDescriptionError(f"{where}: missing {exc}") from None
    names = tuple(j.name for j in joints)
    if not names or len(set(names)) != len(names):
        raise PolicyDescriptionError(f"{name}: joints must be listed, each once")
    action = raw["action"]
    _known(action, {"scale", "clip"}, f"{name}: [action]")
    obs = raw["observation"]
    _known(obs, {"groups", "frame", "after", "history", "history_init"}, f"{name}: [observation]")
    groups = {g: tuple(_term(t, names, f"{name}: observation.groups.{g}[{k}]") for k, t in enumerate(terms))
              for g, terms in dict(obs.get("groups", {})).items()}
    frame, after = tuple(obs.get("frame", ())), tuple(obs.get("after", ()))
    for g in (*frame, *after):
        if g not in groups:
            raise PolicyDescriptionError(f"{name}: [observation]: no group {g!r} (groups: {sorted(groups)})")
    init = str(obs.get("history_init", "zeros"))
    if init not in HISTORY_INIT:
        raise PolicyDescriptionError(f"{name}: history_init {init!r}: choose from {HISTORY_INIT}")
    rate = float(raw["rate_hz"])
    if rate <= 0:
        raise PolicyDescriptionError(f"{name}: rate_hz must be > 0")
    return PolicyDescription(name=name, title=str(raw.get("title", name)), robot=str(raw["robot"]), rate_hz=rate,
                             joints=tuple(joints), action_scale=float(action.get("scale", 1.0)),
                             action_clip=float(action.get("clip", np.inf)), groups=groups, frame=frame, after=after,
                             history=int(obs.get("history", 0)), history_init=init,
                             stand_height=float(raw.get("stand_height", 0.0)),
                             checkpoint=str(raw.get("checkpoint", "")), source=source)


def policy_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in POLICIES_DIR.glob("*.toml")))


def load_policy(name_or_path: str | Path) -> PolicyDescription:
    """A shipped description by name (``twist2_g1``) or a TOML file."""
    path = Path(name_or_path)
    if not str(name_or_path).endswith(".toml"):
        path = POLICIES_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise PolicyDescriptionError(f"policy description {str(name_or_path)!r}: not a shipped one "
                                     f"({', '.join(policy_names())}) and no such .toml file")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PolicyDescriptionError(f"{path}: not valid TOML: {exc}") from None
    return parse_policy(raw, str(path))
