"""`mocapline skeleton-config FILE.bvh`: a starting IK config for a BVH skeleton no shipped
config knows (what ``retarget-file`` and ``retarget-dataset`` refuse it with).

Each GMR body is mapped to a joint of the file by its name (a namespace such as ``mixamorig:``
dropped, case, ``_``, ``-``, ``.``, spaces and leading zeros ignored; a side as ``Left``/``L`` before or after
the part; the part by its usual names: ``UpLeg``, ``Thigh``, ``Hip`` for the thigh, ``Collar``,
``Clavicle`` before ``Shoulder`` for the clavicle...), each joint used once; then by the hierarchy:
the spine is the chain from the hips to the neck (or the head), a hand the forearm's first child. The file's unit is
measured from its rest pose: its legs (thigh + shin in the zero pose) against the reference
human's (0.8374 m in 1.75 m), snapped to centimetres, metres, millimetres or inches when within
25% of one. The IK tables are the robot's shipped config for ``--template`` (default
axis_studio: every BVH is normalised to its T-pose convention before the IK). Written to ``-o``
(default ``./STEM_skeleton.json``), then checked as ``--skeleton FILE.json`` would read it; one
JSON line on stdout: mapped and unmapped bodies, the unit, whether the IK can use it.

Exit codes: 0 written and usable, 1 written but bodies the IK needs are unmapped (edit its
``bvh`` section's ``joints``), 2 bad input.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.options import EnvArgumentParser
from mocapline.formats.bvh import HIP_ABOVE_ANKLE_PER_HEIGHT, BvhError, BvhMotion, load_bvh
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.retarget.config import (
    DEFAULT_CONFIG,
    IKConfigError,
    detect_bvh_skeleton,
    load_ik_config,
    required_bodies,
    resolve_config_path,
)

PROG = "mocapline skeleton-config"

# Names of each body's part, most specific first (a sided part takes a side around it).
CENTRE = {
    "Hips": ("hips", "hip", "pelvis", "root"),
    "Spine": ("spine", "lowerback", "spine0", "abdomen", "waist"),
    "Spine1": ("spine1", "chest", "middleback"),
    "Spine2": ("spine2", "chest2", "upperchest", "upperback"),
    "Spine3": ("spine3", "chest3"),
    "Neck": ("neck", "neck1", "lowerneck"),
    "Head": ("head",),
}
SIDED = {  # matched in this order: the clavicle before the upper arm takes "shoulder"
    "Shoulder": ("collar", "clavicle", "shoulder"),
    "ForeArm": ("forearm", "lowerarm", "elbow"),
    "Hand": ("hand", "wrist"),
    "Arm": ("upperarm", "arm", "uparm", "shoulder", "shldr", "humerus"),
    "UpLeg": ("upleg", "upperleg", "thigh", "hip", "femur"),
    "Leg": ("leg", "lowerleg", "knee", "shin", "calf", "tibia"),
    "Foot": ("foot", "ankle"),
    "Toe": ("toebase", "toe", "toes", "ball"),
}
SIDES = {"Left": ("left", "l"), "Right": ("right", "r")}
UNITS = (1.0, 0.01, 0.001, 0.0254)
LEG_M = HIP_ABOVE_ANKLE_PER_HEIGHT * 1.75


def normalise(name: str) -> str:
    """``mixamorig:Left_Arm`` -> ``leftarm``; ``neck_01`` -> ``neck1``."""
    return re.sub(r"0+(\d)", r"\1", re.sub(r"[^a-z0-9]", "", re.split(r"[:|]", name)[-1].lower()))


def map_bones(motion: BvhMotion) -> dict[str, str]:
    """GMR body -> the file's joint name, by name (see the module doc)."""
    joints: dict[str, str] = {}
    for j in motion.joints:
        joints.setdefault(normalise(j.name), j.name)
    used: set[str] = set()
    out: dict[str, str] = {}

    def take(body: str, candidates: list[str]) -> None:
        for c in candidates:
            if c in joints and c not in used:
                used.add(c)
                out[body] = joints[c]
                return

    for body, names in CENTRE.items():
        take(body, list(names))
    for part, names in SIDED.items():
        for side, marks in SIDES.items():
            take(side + part, [m + n if before else n + m for n in names for m in marks for before in (True, False)])
    _by_structure(motion, out)
    return {b: out[b] for b in GMR_BODIES if b in out}


def _by_structure(motion: BvhMotion, out: dict[str, str]) -> None:
    """What the hierarchy says better than names: the spine is the chain of joints from the hips
    to the neck, or to the head where the file has no neck (first = Spine, last = Spine2, the
    torso; a third between = Spine1), a hand is the forearm's first child, an upper arm the
    clavicle's."""
    for body in ("Spine", "Spine1", "Spine2", "Spine3"):
        out.pop(body, None)
    hips, neck = (motion.find(out[b]) if b in out else None for b in ("Hips", "Neck" if "Neck" in out else "Head"))
    if hips is not None and neck is not None:
        chain, j = [], motion.joints[neck].parent
        while j not in (-1, hips):
            if "neck" not in normalise(motion.joints[j].name):  # a lower neck is no spine
                chain.append(j)
            j = motion.joints[j].parent
        chain.reverse()
        if j == hips and chain:
            out["Spine"], out["Spine2"] = motion.joints[chain[0]].name, motion.joints[chain[-1]].name
            if len(chain) >= 3:
                out["Spine1"] = motion.joints[chain[1]].name
    children: dict[int, list[int]] = {}
    for k, joint in enumerate(motion.joints):
        children.setdefault(joint.parent, []).append(k)
    for side in SIDES:
        for parent, child in (("ForeArm", "Hand"), ("Shoulder", "Arm")):
            p = motion.find(out.get(side + parent, ""))
            kids = children.get(p, []) if p is not None else []
            if kids and (child == "Hand" or side + child not in out):
                out[side + child] = motion.joints[kids[0]].name


def measure_unit(motion: BvhMotion, joints: dict[str, str]) -> float:
    """Metres per file unit, from the legs' length in the zero pose (see the module doc)."""
    zero = BvhMotion(motion.joints, motion.frame_time, np.zeros((1, motion.values.shape[1])))
    pos, _ = zero.forward_kinematics()
    legs = []
    for side in SIDES:
        ids = [motion.find(joints.get(side + p, "")) for p in ("UpLeg", "Leg", "Foot")]
        if all(i is not None for i in ids):
            a, b, c = (pos[0, i] for i in ids)
            legs.append(float(np.linalg.norm(b - a) + np.linalg.norm(c - b)))
    if not legs or max(legs) <= 0:
        return 0.01
    unit = LEG_M / max(legs)
    near = min(UNITS, key=lambda u: abs(np.log(unit / u)))
    return near if abs(unit / near - 1.0) < 0.25 else unit


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("take", type=Path, help="a .bvh file of the skeleton")
    p.add_argument("--out", "-o", type=Path, default=None, help="the config to write (default ./STEM_skeleton.json)")
    p.add_argument("--template", default=DEFAULT_CONFIG,
                   help="the shipped config whose IK tables to start from (axis_studio, cmu, mixamo, xsens)")
    add_robot_model_argument(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        motion = load_bvh(args.take)
        robot = get_robot(args.robot_model)
        template = json.loads(resolve_config_path(args.template, robot).read_text())
    except (BvhError, IKConfigError, OSError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    joints = map_bones(motion)
    if "Hips" not in joints:
        print(f"{PROG}: {args.take}: no joint is named like the hips ({', '.join(CENTRE['Hips'])}); "
              f"the file's joints: {', '.join(j.name for j in motion.joints)}", file=sys.stderr)
        return 2
    unit = measure_unit(motion, joints)
    config = {**{k: v for k, v in template.items() if k != "bvh"},
              "description": f"written by {PROG} from {args.take.name} (bones mapped by name, unit measured); "
                             f"IK tables from {args.template}'s config for {robot.name}: check and edit",
              "bvh": [{"name": args.take.stem, "unit_m": unit, "joints": joints}]}
    out = args.out or Path(f"{args.take.stem}_skeleton.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(config, indent=2) + "\n")
    needed = required_bodies(load_ik_config(out, robot=robot))
    missing = [b for b in needed if b not in joints]
    usable = False
    if not missing:
        try:
            detect_bvh_skeleton(motion, str(out), robot=robot)
            usable = True
        except IKConfigError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
    unmapped_joints = sorted(set(j.name for j in motion.joints) - set(joints.values()))
    print(json.dumps({"config": str(out), "unit_m": unit, "mapped": joints,
                      "unmapped_bodies": [b for b in GMR_BODIES if b not in joints],
                      "needed_unmapped": missing, "unused_joints": unmapped_joints, "usable": usable}))
    if missing:
        print(f"{PROG}: {out}: the IK needs {', '.join(missing)}, which no joint's name gave: set them in its "
              "bvh section's joints", file=sys.stderr)
        return 1
    return 0 if usable else 1


if __name__ == "__main__":
    sys.exit(main())
