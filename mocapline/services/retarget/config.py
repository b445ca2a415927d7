"""IK configuration: which G1 frame follows which human body, with what weights and offsets.

The JSON schema is GMR's (``general_motion_retargeting/ik_configs/*.json``) so GMR users recognise
it::

    {
      "robot_root_name": "pelvis",          # the G1 body carrying the free joint
      "human_root_name": "Hips",            # the human body positions are scaled about
      "ground_height": 0.0,                 # m; subtracted from every target's z
      "human_height_assumption": 1.75,      # m; the scale table is for a human this tall
      "use_ik_match_table1": true,
      "use_ik_match_table2": true,
      "human_scale_table": {"Hips": 0.72, "LeftFoot": 0.745, ...},
      "ik_match_table1": {"<robot frame>": [human body, position weight, rotation weight,
                                            position offset [x, y, z] m,
                                            rotation offset [w, x, y, z]], ...},
      "ik_match_table2": {...}
    }

plus optional keys of our own (GMR ignores unknown keys, so the files stay loadable by GMR):
``joint_velocity_limits`` ({"default": rad/s, "<joint>": rad/s}; missing: the G1's published
limits, see :data:`mocapline.robot.g1.G1_VELOCITY_LIMITS`), ``description``.

Semantics (GMR's, made explicit):

- Human bodies are the names of :data:`mocapline.formats.skeleton.GMR_BODIES`; robot frames are bodies of
  the G1 IK model or (unlike GMR, which takes bodies only) sites, such as the ones added to it
  (``left_toe``, ``right_toe``, ``left_sole``, ``right_sole``).
- Scaling with ``--human-height H``: every scale is multiplied by ``human_height_assumption / H``
  (a taller human is scaled down more; GMR's code multiplies by ``H / assumption``).
  The root's target position is ``s_root * p_root``; any other body's is
  ``s_root * p_root + s_body * (p_body - p_root)`` (scaled about the root, in the world frame).
- Offsets, per table entry: target rotation ``R = R_human @ R_offset`` (the offset is on the
  right: it maps the human body's frame to the robot frame's), then target position
  ``p = p_scaled + R @ position_offset`` (the offset is in the robot frame's own axes). Unlike
  GMR, which applies table 1's offsets to both tables, each table's own offsets are used; the
  shipped configs use the same offsets in both tables, so the result is the same.
- Every human body a table uses needs a scale (GMR silently drops bodies without one).

Frame conventions of the human data (what the rotation offsets are chosen for):

- HumanFrame: Z-up world, metres, quaternions w x y z (see ``mocapline.core.frames``).
- Axis Studio (``axis_studio_to_g1.json``): capture converts the BVH as GMR does (cm -> m,
  p' = C p, R' = C R with C = [[1,0,0],[0,0,-1],[0,1,0]]). Axis's rest pose is a T-pose whose
  every bone frame is aligned with the BVH world (Y-up, facing +Z, left = +X), so in the T-pose
  every body quaternion equals the quaternion of C and the character faces -Y (left = +X).
  Rotation offsets are ``C^T @ R_robot`` where ``R_robot`` is the G1 body's world rotation in the
  matching robot T-pose: root yawed -90 deg (the robot faces -Y like the human), shoulder roll
  +-90 deg, elbows straight (+90 deg), every other joint 0. So the robot faces where the human
  faces, always: a T-posed human gives a T-posed robot facing -Y.
- Xsens MVN (``xsens_to_g1.json``): segment frames are aligned with the world (X forward, Y left,
  Z up) in the N-pose, the subject facing +X. Offsets are the G1 body's rotation in the matching
  N-pose (zero pose with the elbows straight): identity except the thighs (-10 deg pitch of the
  G1's hip-yaw link at rest) and the forearms / hands (elbow +90 deg).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.paths import IK_CONFIG_DIR
from mocapline.formats.bvh import BvhMotion, SkeletonMap
from mocapline.robot import g1 as robot_model

SHIPPED_CONFIGS: dict[str, str] = {
    "axis_studio": "axis_studio_to_g1.json",
    "axis": "axis_studio_to_g1.json",
    "xsens": "xsens_to_g1.json",
    "cmu": "cmu_to_g1.json",
    "mixamo": "mixamo_to_g1.json",
}
# Shipped configs with BVH skeletons, in detection order (ties go to the first).
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

    def velocity_limits(self, joint_names: tuple[str, ...] = robot_model.G1_JOINT_NAMES) -> np.ndarray:
        """Per-joint velocity limits (rad/s) in ``joint_names`` order."""
        table = dict(robot_model.G1_VELOCITY_LIMITS)
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


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A shipped config name (``axis_studio``, ``xsens``) or a path to a JSON file."""
    key = str(name_or_path)
    if key in SHIPPED_CONFIGS:
        return IK_CONFIG_DIR / SHIPPED_CONFIGS[key]
    path = Path(key)
    if not path.is_file():
        shipped = ", ".join(sorted(SHIPPED_CONFIGS))
        raise IKConfigError(f"IK config {key!r}: no such file and not a shipped config ({shipped})")
    return path


def load_ik_config(name_or_path: str | Path = DEFAULT_CONFIG, *, model: mujoco.MjModel | None = None) -> IKConfig:
    """Load and validate a config file (see :func:`parse_ik_config`)."""
    path = resolve_config_path(name_or_path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise IKConfigError(f"{path}: not valid JSON: {exc}") from None
    return parse_ik_config(raw, model=model, source=str(path))


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


def parse_ik_config(raw: dict[str, Any], *, model: mujoco.MjModel | None = None, source: str = "") -> IKConfig:
    """Validate a decoded config; errors name the file, the entry and the valid choices."""
    where = source or "IK config"
    if not isinstance(raw, dict):
        raise IKConfigError(f"{where}: top level must be a JSON object")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise IKConfigError(f"{where}: missing keys {missing}")
    if model is None:
        model = robot_model.load_ik_model()
    valid_bodies = robot_model.body_names(model)
    valid_sites = robot_model.site_names(model)
    human_valid = ", ".join(GMR_BODIES)

    def human(name: Any, ctx: str) -> str:
        if name not in GMR_BODIES:
            raise IKConfigError(f"{where}: {ctx}: unknown human body {name!r}; valid human bodies: {human_valid}")
        return str(name)

    robot_root = raw["robot_root_name"]
    if _frame_kind(model, robot_root) != "body":
        raise IKConfigError(
            f"{where}: robot_root_name: unknown robot body {robot_root!r}; valid robot bodies: {', '.join(valid_bodies)}"
        )
    human_root = human(raw["human_root_name"], "human_root_name")

    scale_raw = raw["human_scale_table"]
    if not isinstance(scale_raw, dict):
        raise IKConfigError(f"{where}: human_scale_table must be an object")
    scales: dict[str, float] = {}
    for body, value in scale_raw.items():
        human(body, "human_scale_table")
        if not isinstance(value, (int, float)) or not value > 0:
            raise IKConfigError(f"{where}: human_scale_table[{body!r}] must be a number > 0, got {value!r}")
        scales[body] = float(value)
    if human_root not in scales:
        raise IKConfigError(f"{where}: human_scale_table has no entry for the root {human_root!r}")

    height = raw["human_height_assumption"]
    if not isinstance(height, (int, float)) or not height > 0:
        raise IKConfigError(f"{where}: human_height_assumption must be a number > 0, got {height!r}")
    ground = raw["ground_height"]
    if not isinstance(ground, (int, float)):
        raise IKConfigError(f"{where}: ground_height must be a number, got {ground!r}")

    tables: list[tuple[MatchEntry, ...]] = []
    for key in ("ik_match_table1", "ik_match_table2"):
        table = raw[key]
        if not isinstance(table, dict):
            raise IKConfigError(f"{where}: {key} must be an object")
        entries = []
        for frame, entry in table.items():
            ctx = f"{key}[{frame!r}]"
            kind = _frame_kind(model, frame)
            if kind is None:
                raise IKConfigError(
                    f"{where}: {ctx}: unknown robot body {frame!r}; valid robot bodies: "
                    f"{', '.join(valid_bodies)}; valid robot sites: {', '.join(valid_sites)}"
                )
            if not isinstance(entry, (list, tuple)) or len(entry) != 5:
                raise IKConfigError(
                    f"{where}: {ctx}: expected [human body, position weight, rotation weight, "
                    f"position offset [x,y,z], rotation offset [w,x,y,z]], got {entry!r}"
                )
            body, pos_w, rot_w, pos_off, rot_off = entry
            human(body, ctx)
            for label, w in (("position weight", pos_w), ("rotation weight", rot_w)):
                if not isinstance(w, (int, float)) or not np.isfinite(w) or w < 0:
                    raise IKConfigError(f"{where}: {ctx}: {label} must be a number >= 0, got {w!r}")
            offset = _vector(f"{where}: {ctx}: position offset", pos_off, 3)
            quat = _vector(f"{where}: {ctx}: rotation offset (w x y z)", rot_off, 4)
            norm = float(np.linalg.norm(quat))
            if abs(norm - 1.0) > 1e-3:
                raise IKConfigError(f"{where}: {ctx}: rotation offset {rot_off!r} is not a unit quaternion")
            if (pos_w or rot_w) and body not in scales:
                raise IKConfigError(f"{where}: {ctx}: human body {body!r} has no entry in human_scale_table")
            entries.append(
                MatchEntry(frame, kind, body, float(pos_w), float(rot_w), offset, quat / norm)
            )
        tables.append(tuple(entries))

    use1, use2 = bool(raw["use_ik_match_table1"]), bool(raw["use_ik_match_table2"])
    if not (use1 or use2):
        raise IKConfigError(f"{where}: both use_ik_match_table1 and use_ik_match_table2 are false")
    for use, key, table in ((use1, "ik_match_table1", tables[0]), (use2, "ik_match_table2", tables[1])):
        if use and not any(e.active for e in table):
            raise IKConfigError(f"{where}: {key} is enabled but has no entry with a non-zero weight")

    vel_raw = raw.get("joint_velocity_limits", {})
    if not isinstance(vel_raw, dict):
        raise IKConfigError(f"{where}: joint_velocity_limits must be an object")
    joints = robot_model.joint_names(model)
    velocity: dict[str, float] = {}
    for name, value in vel_raw.items():
        if name != "default" and name not in joints:
            raise IKConfigError(
                f"{where}: joint_velocity_limits: unknown joint {name!r}; valid joints: default, {', '.join(joints)}"
            )
        if not isinstance(value, (int, float)) or not value > 0:
            raise IKConfigError(f"{where}: joint_velocity_limits[{name!r}] must be a number > 0 (rad/s)")
        velocity[name] = float(value)

    return IKConfig(
        robot_root_name=robot_root,
        human_root_name=human_root,
        ground_height=float(ground),
        human_height_assumption=float(height),
        use_ik_match_table1=use1,
        use_ik_match_table2=use2,
        human_scale_table=scales,
        ik_match_table1=tables[0],
        ik_match_table2=tables[1],
        joint_velocity_limits=velocity,
        source=source,
        bvh=_bvh_skeletons(raw.get("bvh", []), where),
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
    motion: BvhMotion, name: str = "auto", *, model: mujoco.MjModel | None = None
) -> tuple[IKConfig, SkeletonMap]:
    """The config and skeleton variant to read ``motion`` with: ``name`` is a shipped config
    (``axis``, ``cmu``, ``mixamo``), a config file with a ``bvh`` section, or ``auto`` (the shipped
    variant that has every body the IK needs and the most mapped joints)."""
    names = BVH_SKELETONS if name == "auto" else (name,)
    candidates = []
    for n in names:
        config = load_ik_config(n, model=model)
        if not config.bvh:
            raise IKConfigError(f"{config.source}: no 'bvh' section (skeletons with BVH support: {', '.join(BVH_SKELETONS)})")
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
    )
