"""`mocapline ik-config ROBOT`: write a robot build's IK configs from another build's, by its
description's ``[ik_template]`` (``--check``: only say whether the shipped ones are what it writes).

A template config says which of its robot's frames follows which human body, with what weights,
offsets and scales. For the new build, per source skeleton (the template robot's ``ik_configs``)
and per table entry:

- the frame is the description's ``frames[template frame].frame``, its weights the template's
  (``weights`` overrides them);
- the rotation offset keeps the human body's rest rotation: that rotation is the template frame's
  in the template robot's rest pose times the inverse of the template's offset, and the new offset
  is its inverse times the new frame's rotation in the new robot's rest pose (``ik_rest``: the
  T-pose for Axis Studio, CMU and Mixamo, the N-pose for Xsens), both robots at the origin facing
  +X: the heading cancels out;
- the position offset places the new frame where its human joint is: the anchor (the mean of the
  listed joints' anchors, or the frame's origin) seen from the frame, in its own axes; a frame
  named without an anchor keeps the template's offset (a build of the same geometry);
- the scale of a body is the template's times the ratio of its anchor's distance from the root's
  anchor on the two robots (the root's: of the anchors' heights when standing).

The result is a starting point measured like the G1's (``mocapline bench retarget --robot-model``;
docs/retarget.md); tune it by hand afterwards if need be (``--check`` then reports the difference).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.options import EnvArgumentParser
from mocapline.core.paths import IK_CONFIG_DIR
from mocapline.robot.description import RobotDescription, RobotDescriptionError
from mocapline.robot.model import load_ik_model
from mocapline.robot.registry import get_robot, robot_names

REST_POSE = {"xsens": "n_pose"}  # every other source: t_pose
TABLES = ("ik_match_table1", "ik_match_table2")


class RestPose:
    """A robot standing at the origin, facing +X, in one of its rest poses: frames' poses, anchors."""

    def __init__(self, robot: RobotDescription, pose: str) -> None:
        self.robot = robot
        self.model = load_ik_model(robot)
        self.data = mujoco.MjData(self.model)
        q = self.data.qpos
        q[:] = 0.0
        q[3] = 1.0
        for joint, angle in robot.ik_rest.get(pose, {}).items():
            q[7 + robot.index(joint)] = angle
        mujoco.mj_kinematics(self.model, self.data)

    def frame(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(position, quaternion w x y z) of a body or site."""
        body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        if body >= 0:
            return self.data.xpos[body].copy(), self.data.xquat[body].copy()
        site = self.model.site(name).id
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[site])
        return self.data.site_xpos[site].copy(), quat

    def anchor(self, frame: str, joints: tuple[str, ...]) -> np.ndarray:
        if not joints:
            return self.frame(frame)[0]
        return np.mean([self.data.xanchor[self.model.joint(j).id] for j in joints], axis=0)


def _entries(raw: dict[str, Any]) -> dict[str, list[Any]]:
    """Every frame of the enabled tables with its last entry (the tables share offsets)."""
    out: dict[str, list[Any]] = {}
    for table in TABLES:
        out.update(raw[table])
    return out


def derive(raw: dict[str, Any], source: str, template: RobotDescription, robot: RobotDescription) -> dict[str, Any]:
    """The template's config ``raw`` for ``source``, carried over to ``robot``."""
    spec = robot.ik_template
    assert spec is not None
    pose = REST_POSE.get(source, "t_pose")
    old, new = RestPose(template, pose), RestPose(robot, pose)
    entries = _entries(raw)
    missing = sorted(set(entries) - set(spec.frames))
    if missing:
        raise RobotDescriptionError(f"{robot.name}: [ik_template.frames] does not map {', '.join(missing)}")

    def anchors(frame: str) -> tuple[np.ndarray, np.ndarray]:
        """The human joint's place on the template robot (its frame less its offset) and on this one
        (the template's offset kept where the description names no anchor)."""
        p_old, q_old = old.frame(frame)
        offset = np.array(entries[frame][3], dtype=np.float64)
        target = spec.frames[frame]
        if target.anchor is None:
            p_new, q_new = new.frame(target.frame)
            return p_old - Q.rotate(q_old, offset), p_new - Q.rotate(q_new, offset)
        return p_old - Q.rotate(q_old, offset), new.anchor(target.frame, target.anchor)

    def carry(frame: str, entry: list[Any]) -> list[Any]:
        target = spec.frames[frame]
        body, pos_w, rot_w, _, rot_off = entry
        _, q_old = old.frame(frame)
        p_new, q_new = new.frame(target.frame)
        rest = Q.multiply(q_old, Q.conjugate(np.array(rot_off, dtype=np.float64)))  # the human body's
        offset = Q.multiply(Q.conjugate(rest), q_new)
        offset = offset if offset[0] >= 0 else -offset
        position = Q.rotate(Q.conjugate(q_new), p_new - anchors(frame)[1])
        weights = {"position_weight": pos_w, "rotation_weight": rot_w, **target.weights}
        return [body, weights["position_weight"], weights["rotation_weight"], _round(position), _round(offset)]

    root_frame = next(f for f, e in entries.items() if e[0] == raw["human_root_name"])
    root_old, root_new = anchors(root_frame)
    body_frame = {e[0]: f for f, e in entries.items()}
    scales = {}
    for body, scale in raw["human_scale_table"].items():
        if body == raw["human_root_name"] or body not in body_frame:
            ratio = (root_new[2] + robot.standing_height) / (root_old[2] + template.standing_height)
        else:
            a_old, a_new = anchors(body_frame[body])
            ratio = float(np.linalg.norm(a_new - root_new) / np.linalg.norm(a_old - root_old))
        scales[body] = round(float(scale) * ratio, 3)
    out = {key: value for key, value in raw.items() if key not in (*TABLES, "human_scale_table", "description")}
    out["description"] = (f"{source} -> {robot.title}: made by `mocapline ik-config {robot.name}` from the "
                          f"{template.name} config ({template.ik_configs[source]}), by the [ik_template] of "
                          f"mocapline/robot/builds/{robot.name}.toml.")
    out["robot_root_name"] = spec.frames[raw["robot_root_name"]].frame
    out["human_scale_table"] = scales
    for table in TABLES:
        out[table] = {spec.frames[f].frame: carry(f, e) for f, e in raw[table].items()}
    return {"description": out.pop("description"), **out}


def _round(v: np.ndarray) -> list[float]:
    return [round(float(x), 6) + 0.0 for x in v]  # + 0.0: no -0.0 in the file


def dumps(config: dict[str, Any]) -> str:
    """JSON laid out as the shipped configs are: one table entry a line."""
    lines = ["{"]
    items = list(config.items())
    for k, (key, value) in enumerate(items):
        comma = "," if k < len(items) - 1 else ""
        if key in TABLES or key == "human_scale_table":
            rows = [f'        {json.dumps(name)}: {json.dumps(entry)}' for name, entry in value.items()]
            lines.append(f"    {json.dumps(key)}: {{\n" + ",\n".join(rows) + f"\n    }}{comma}")
        else:
            lines.append(f"    {json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join(lines) + "\n}\n"


def configs(robot: RobotDescription) -> dict[Path, str]:
    """Each file this robot's template makes, by path, with its text."""
    if robot.ik_template is None:
        raise RobotDescriptionError(f"{robot.name}: no [ik_template] in its description (its IK configs are "
                                    "written by hand)")
    template = get_robot(robot.ik_template.robot)
    out = {}
    for source, name in robot.ik_configs.items():
        if source not in template.ik_configs:
            raise RobotDescriptionError(f"{robot.name}: the template {template.name} has no {source} config")
        raw = json.loads((IK_CONFIG_DIR / template.ik_configs[source]).read_text())
        out[IK_CONFIG_DIR / name] = dumps(derive(raw, source, template, robot))
    return out


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline ik-config", description=__doc__)
    p.add_argument("robot", choices=robot_names(), help="the build whose configs to write (its description has "
                                                        "an [ik_template])")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a shipped config differs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        made = configs(get_robot(args.robot))
    except RobotDescriptionError as exc:
        print(f"mocapline ik-config: {exc}", file=sys.stderr)
        return 2
    stale = [path for path, text in made.items() if not path.is_file() or path.read_text() != text]
    for path in stale if args.check else []:
        print(f"mocapline ik-config: {path} is not what the template makes", file=sys.stderr)
    if args.check:
        return 1 if stale else 0
    for path, text in made.items():
        path.write_text(text)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
