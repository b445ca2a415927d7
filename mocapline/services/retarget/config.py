"""IK configuration: which robot frame follows which human body, with what weights and offsets.

GMR's JSON schema, plus keys of our own that GMR ignores; the format, its semantics and the frame
conventions of each source are in docs/retarget.md ("IK config format"). A robot's description
names its shipped config per source skeleton (``ik_configs``); the BVH skeleton variants of a
source (which BVH joint is which body) are the source's, shared by every robot
(``assets/skeletons/<source>.json``), unless a config file carries its own ``bvh`` section.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.paths import IK_CONFIG_DIR, SKELETON_DIR
from mocapline.formats.bvh import BvhMotion, SkeletonMap
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import get_robot

SOURCES = ("axis_studio", "xsens", "cmu", "mixamo")  # the source skeletons every robot has a config for
ALIASES = {"axis": "axis_studio"}
# Sources with BVH skeleton variants (assets/skeletons), in detection order (ties go to the first).
BVH_SKELETONS = ("axis", "mixamo", "cmu")
DEFAULT_CONFIG = "axis_studio"

_REQUIRED = (
    "robot_root_name",
    "human_root_name",
    "ground_height",
    "human_height_assumption",
    "use_ik_match_table1",
    "use_ik_match_table2",
    "human_scale_table",
    "ik_match_table1",
    "ik_match_table2",
)


class IKConfigError(ValueError):
    """The IK configuration is malformed or names something that does not exist."""


@dataclass(frozen=True)
class MatchEntry:
    robot_frame: str
    frame_type: str  # "body" or "site"
    human_body: str
    position_weight: float
    rotation_weight: float
    position_offset: np.ndarray  # (3,) m, in the robot frame's axes
    rotation_offset: np.ndarray  # (4,) w x y z, unit

    @property
    def active(self) -> bool:
        return self.position_weight != 0.0 or self.rotation_weight != 0.0


@dataclass(frozen=True)
class IKConfig:
    robot_root_name: str
    human_root_name: str
    ground_height: float
    human_height_assumption: float
    use_ik_match_table1: bool
    use_ik_match_table2: bool
    human_scale_table: dict[str, float]
    ik_match_table1: tuple[MatchEntry, ...]
    ik_match_table2: tuple[MatchEntry, ...]
    joint_velocity_limits: dict[str, float] = field(default_factory=dict)
    source: str = ""
    bvh: tuple[SkeletonMap, ...] = ()
    robot_velocity_limits: dict[str, float] = field(default_factory=dict)  # the robot's own, by joint

    def scaled(self, human_height: float | None) -> dict[str, float]:
        """The scale table for a human of ``human_height`` m (None: the assumed height).

        A human k times taller than assumed has every body k times further from the root, so the
        scales are divided by k (``human_height_assumption / human_height``). (GMR's code multiplies
        by ``actual / assumption``, which scales a taller human up instead of down.)
        """
        if human_height is None:
            return dict(self.human_scale_table)
        if not human_height > 0:
            raise IKConfigError(f"human height must be > 0 m, got {human_height}")
        ratio = self.human_height_assumption / human_height
        return {k: v * ratio for k, v in self.human_scale_table.items()}

    def velocity_limits(self, joint_names: tuple[str, ...]) -> np.ndarray:
        """Per-joint velocity limits (rad/s) in ``joint_names`` order: the robot's published ones
        (its description), unless the config's ``joint_velocity_limits`` says otherwise."""
        table = dict(self.robot_velocity_limits)
        default = self.joint_velocity_limits.get("default")
        if default is not None:
            table = {name: float(default) for name in joint_names}
        for name, value in self.joint_velocity_limits.items():
            if name != "default":
                table[name] = float(value)
        return np.array([table[name] for name in joint_names], dtype=np.float64)

    def tables(self) -> list[tuple[MatchEntry, ...]]:
        """The enabled tables in solve order (table 1 then table 2), inactive entries dropped."""
        out = []
        if self.use_ik_match_table1:
            out.append(tuple(e for e in self.ik_match_table1 if e.active))
        if self.use_ik_match_table2:
            out.append(tuple(e for e in self.ik_match_table2 if e.active))
        return out


def shipped_names() -> tuple[str, ...]:
    """The names ``--ik-config`` takes besides a path: the sources and their aliases."""
    return (*SOURCES, *ALIASES)


def resolve_config_path(name_or_path: str | Path, robot: RobotDescription | None = None) -> Path:
    """A shipped config name (``axis_studio``, ``xsens``, ...: the robot's config for that source)
    or a path to a JSON file."""
    robot = robot or get_robot()
    key = ALIASES.get(str(name_or_path), str(name_or_path))
    if key in robot.ik_configs:
        return IK_CONFIG_DIR / robot.ik_configs[key]
    path = Path(str(name_or_path))
    if not path.is_file():
        shipped = ", ".join(sorted((*robot.ik_configs, *ALIASES)))
        raise IKConfigError(f"IK config {str(name_or_path)!r}: no such file and not a config shipped for "
                            f"{robot.name} ({shipped})")
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise IKConfigError(f"{path}: not valid JSON: {exc}") from None


def load_ik_config(name_or_path: str | Path = DEFAULT_CONFIG, *, robot: RobotDescription | None = None,
                   model: mujoco.MjModel | None = None) -> IKConfig:
    """Load and validate a config file for ``robot`` (default: the registry's default build; see
    :func:`parse_ik_config`). A shipped config without a ``bvh`` section gets its source's skeleton
    variants (``assets/skeletons``)."""
    robot = robot or get_robot()
    path = resolve_config_path(name_or_path, robot)
    raw = _read_json(path)
    key = ALIASES.get(str(name_or_path), str(name_or_path))
    skeletons = SKELETON_DIR / f"{key}.json"
    if isinstance(raw, dict) and "bvh" not in raw and key in robot.ik_configs and skeletons.is_file():
        raw = {**raw, "bvh": _read_json(skeletons)["bvh"]}
    return parse_ik_config(raw, robot=robot, model=model, source=str(path))


def _frame_kind(model: mujoco.MjModel, name: str) -> str | None:
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name) >= 0:
        return "body"
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name) >= 0:
        return "site"
    return None


def _vector(where: str, value: Any, n: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise IKConfigError(f"{where}: expected {n} numbers, got {value!r}") from None
    if arr.shape != (n,) or not np.all(np.isfinite(arr)):
        raise IKConfigError(f"{where}: expected {n} finite numbers, got {value!r}")
    return arr


class _Checker:
    """Validation of one decoded config; every error names the file, the entry and the choices."""

    def __init__(self, model: mujoco.MjModel, where: str) -> None:
        self.model = model
        self.where = where

    def fail(self, message: str) -> IKConfigError:
        return IKConfigError(f"{self.where}: {message}")

    def human(self, name: Any, ctx: str) -> str:
        if name not in GMR_BODIES:
            raise self.fail(f"{ctx}: unknown human body {name!r}; valid human bodies: {', '.join(GMR_BODIES)}")
        return str(name)

    def positive(self, value: Any, ctx: str) -> float:
        if not isinstance(value, (int, float)) or not value > 0:
            raise self.fail(f"{ctx} must be a number > 0, got {value!r}")
        return float(value)

    def robot_root(self, name: Any) -> str:
        if _frame_kind(self.model, name) != "body":
            bodies = ", ".join(robot_model.body_names(self.model))
            raise self.fail(f"robot_root_name: unknown robot body {name!r}; valid robot bodies: {bodies}")
        return str(name)

    def scales(self, raw: Any, root: str) -> dict[str, float]:
        if not isinstance(raw, dict):
            raise self.fail("human_scale_table must be an object")
        scales = {self.human(body, "human_scale_table"): self.positive(v, f"human_scale_table[{body!r}]")
                  for body, v in raw.items()}
        if root not in scales:
            raise self.fail(f"human_scale_table has no entry for the root {root!r}")
        return scales

    def table(self, key: str, raw: Any, scales: dict[str, float]) -> tuple[MatchEntry, ...]:
        if not isinstance(raw, dict):
            raise self.fail(f"{key} must be an object")
        return tuple(self.entry(f"{key}[{frame!r}]", frame, entry, scales) for frame, entry in raw.items())

    def entry(self, ctx: str, frame: str, entry: Any, scales: dict[str, float]) -> MatchEntry:
        kind = _frame_kind(self.model, frame)
        if kind is None:
            raise self.fail(f"{ctx}: unknown robot body {frame!r}; valid robot bodies: "
                            f"{', '.join(robot_model.body_names(self.model))}; valid robot sites: "
                            f"{', '.join(robot_model.site_names(self.model))}")
        if not isinstance(entry, (list, tuple)) or len(entry) != 5:
            raise self.fail(f"{ctx}: expected [human body, position weight, rotation weight, "
                            f"position offset [x,y,z], rotation offset [w,x,y,z]], got {entry!r}")
        body, pos_w, rot_w, pos_off, rot_off = entry
        self.human(body, ctx)
        for label, w in (("position weight", pos_w), ("rotation weight", rot_w)):
            if not isinstance(w, (int, float)) or not np.isfinite(w) or w < 0:
                raise self.fail(f"{ctx}: {label} must be a number >= 0, got {w!r}")
        offset = _vector(f"{self.where}: {ctx}: position offset", pos_off, 3)
        quat = _vector(f"{self.where}: {ctx}: rotation offset (w x y z)", rot_off, 4)
        norm = float(np.linalg.norm(quat))
        if abs(norm - 1.0) > 1e-3:
            raise self.fail(f"{ctx}: rotation offset {rot_off!r} is not a unit quaternion")
        if (pos_w or rot_w) and body not in scales:
            raise self.fail(f"{ctx}: human body {body!r} has no entry in human_scale_table")
        return MatchEntry(frame, kind, body, float(pos_w), float(rot_w), offset, quat / norm)

    def velocity_limits(self, raw: Any) -> dict[str, float]:
        if not isinstance(raw, dict):
            raise self.fail("joint_velocity_limits must be an object")
        joints = robot_model.joint_names(self.model)
        for name in raw:
            if name != "default" and name not in joints:
                raise self.fail(f"joint_velocity_limits: unknown joint {name!r}; valid joints: default, "
                                f"{', '.join(joints)}")
        return {name: self.positive(v, f"joint_velocity_limits[{name!r}] (rad/s)") for name, v in raw.items()}


def parse_ik_config(raw: dict[str, Any], *, robot: RobotDescription | None = None,
                    model: mujoco.MjModel | None = None, source: str = "") -> IKConfig:
    """Validate a decoded config against ``robot``'s IK model (default: the registry's default
    build); errors name the file, the entry and the valid choices."""
    robot = robot or get_robot()
    where = source or "IK config"
    if not isinstance(raw, dict):
        raise IKConfigError(f"{where}: top level must be a JSON object")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise IKConfigError(f"{where}: missing keys {missing}")
    check = _Checker(model if model is not None else robot_model.load_ik_model(robot), where)
    human_root = check.human(raw["human_root_name"], "human_root_name")
    scales = check.scales(raw["human_scale_table"], human_root)
    height = check.positive(raw["human_height_assumption"], "human_height_assumption")
    if not isinstance(raw["ground_height"], (int, float)):
        raise check.fail(f"ground_height must be a number, got {raw['ground_height']!r}")
    table1 = check.table("ik_match_table1", raw["ik_match_table1"], scales)
    table2 = check.table("ik_match_table2", raw["ik_match_table2"], scales)
    use1, use2 = bool(raw["use_ik_match_table1"]), bool(raw["use_ik_match_table2"])
    if not (use1 or use2):
        raise check.fail("both use_ik_match_table1 and use_ik_match_table2 are false")
    for use, key, table in ((use1, "ik_match_table1", table1), (use2, "ik_match_table2", table2)):
        if use and not any(e.active for e in table):
            raise check.fail(f"{key} is enabled but has no entry with a non-zero weight")
    return IKConfig(
        robot_root_name=check.robot_root(raw["robot_root_name"]),
        human_root_name=human_root,
        ground_height=float(raw["ground_height"]),
        human_height_assumption=height,
        use_ik_match_table1=use1,
        use_ik_match_table2=use2,
        human_scale_table=scales,
        ik_match_table1=table1,
        ik_match_table2=table2,
        joint_velocity_limits=check.velocity_limits(raw.get("joint_velocity_limits", {})),
        source=source,
        bvh=_bvh_skeletons(raw.get("bvh", []), where),
        robot_velocity_limits={j.name: j.velocity for j in robot.joints},
    )


def _bvh_skeletons(raw: Any, where: str) -> tuple[SkeletonMap, ...]:
    if not isinstance(raw, list):
        raise IKConfigError(f"{where}: bvh must be a list of skeleton variants")
    out = []
    for i, v in enumerate(raw):
        ctx = f"{where}: bvh[{i}]"
        if not isinstance(v, dict) or not {"name", "unit_m", "joints"} <= v.keys():
            raise IKConfigError(f"{ctx}: expected {{\"name\", \"unit_m\", \"joints\"}}")
        unit, joints = v["unit_m"], v["joints"]
        if not isinstance(unit, (int, float)) or not unit > 0:
            raise IKConfigError(f"{ctx}: unit_m must be a number > 0, got {unit!r}")
        if not isinstance(joints, dict) or "Hips" not in joints:
            raise IKConfigError(f"{ctx}: joints must map GMR bodies to BVH joints, Hips included")
        bad = sorted(set(joints) - set(GMR_BODIES))
        if bad:
            raise IKConfigError(f"{ctx}: unknown GMR bodies {bad}; valid: {', '.join(GMR_BODIES)}")
        out.append(SkeletonMap(str(v["name"]), {str(k): str(n) for k, n in joints.items()}, float(unit)))
    return tuple(out)


def required_bodies(config: IKConfig) -> tuple[str, ...]:
    """The human bodies the config's enabled tables use, root first."""
    used = {e.human_body for t in config.tables() for e in t}
    return (config.human_root_name, *sorted(used - {config.human_root_name}))


def detect_bvh_skeleton(
    motion: BvhMotion, name: str = "auto", *, robot: RobotDescription | None = None,
    model: mujoco.MjModel | None = None,
) -> tuple[IKConfig, SkeletonMap]:
    """The config and skeleton variant to read ``motion`` with: ``name`` is a shipped config
    (``axis``, ``cmu``, ``mixamo``), a config file with a ``bvh`` section, or ``auto`` (the shipped
    variant that has every body the IK needs and the most mapped joints)."""
    names = BVH_SKELETONS if name == "auto" else (name,)
    candidates = []
    for n in names:
        config = load_ik_config(n, robot=robot, model=model)
        if not config.bvh:
            shipped = ", ".join(BVH_SKELETONS)
            raise IKConfigError(f"{config.source}: no 'bvh' section (skeletons with BVH support: {shipped})")
        for skeleton in config.bvh:
            missing = skeleton.missing(motion, required_bodies(config))
            found = len(skeleton.joints) - len(skeleton.missing(motion))
            candidates.append((not missing, found, n, config, skeleton, missing))
    usable = [c for c in candidates if c[0]]
    if usable:
        best = max(usable, key=lambda c: c[1])  # max keeps the first of equals
        return best[3], best[4]
    closest = max(candidates, key=lambda c: c[1])
    raise IKConfigError(
        f"{motion.source}: no {'known ' if name == 'auto' else name + ' '}skeleton fits its joints; closest is "
        f"{closest[4].name} ({closest[2]}), which lacks {', '.join(closest[5])}. "
        f"The file's joints: {', '.join(j.name for j in motion.joints[:40])}"
        + (" ..." if len(motion.joints) > 40 else "")
        + f". `mocapline skeleton-config {motion.source}` writes a starting config for its skeleton"
    )
