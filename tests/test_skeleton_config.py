"""`mocapline skeleton-config`: bones mapped by name and hierarchy, the unit measured, a config
that retarget-file reads for a skeleton no shipped config knows."""

from __future__ import annotations

import json
import re

import pytest

from mocapline.core.paths import ASSETS_DIR, SKELETON_DIR
from mocapline.formats.bvh import format_bvh, load_bvh
from mocapline.tools import retarget_file, skeleton_config

MOTION = ASSETS_DIR / "motion"
SHIPPED = {v["name"]: v for v in json.loads((SKELETON_DIR / "cmu.json").read_text())["bvh"]}

# CMU's 3ds Max skeleton renamed the way Unreal's mannequin names its bones: no shipped config knows it.
UNREAL = {"Hips": "pelvis", "lowerback": "spine_01", "Chest": "spine_02", "Chest2": "spine_03", "Neck": "neck_01",
          "Head": "head", **{f"{side}{a}": f"{b}_{side[0].lower()}" for side in ("Left", "Right") for a, b in (
              ("Collar", "clavicle"), ("Shoulder", "upperarm"), ("Elbow", "lowerarm"), ("Wrist", "hand"),
              ("Hip", "thigh"), ("Knee", "calf"), ("Ankle", "foot"), ("Toe", "ball"))}}


def renamed(text: str, names: dict[str, str]) -> str:
    return re.sub(r"^(\s*(?:ROOT|JOINT)\s+)(\S+)", lambda m: m.group(1) + names.get(m.group(2), m.group(2)), text,
                  flags=re.MULTILINE)


@pytest.mark.parametrize("take, variant", [("cmu_14_19_arms", "cmu_daz"), ("cmu_131_02_walk", "cmu_3dsmax")])
def test_the_bundled_skeletons_are_mapped_as_their_shipped_configs_map_them(take, variant) -> None:
    motion = load_bvh(MOTION / f"{take}.bvh")
    assert skeleton_config.map_bones(motion) == SHIPPED[variant]["joints"]
    assert skeleton_config.measure_unit(motion, SHIPPED[variant]["joints"]) == pytest.approx(
        SHIPPED[variant]["unit_m"], rel=0.05)


def test_an_unknown_skeleton_is_refused_then_converted_with_the_config_written_for_it(tmp_path, capsys) -> None:
    take = tmp_path / "mannequin.bvh"
    take.write_text(renamed(format_bvh(load_bvh(MOTION / "cmu_131_02_walk.bvh").slice(0, 60)), UNREAL))
    assert retarget_file.main([str(take), "--no-progress", "--out", str(tmp_path / "x.npz")]) == 2
    refusal = capsys.readouterr().err
    assert "thigh_l" in refusal and f"mocapline skeleton-config {take}" in refusal

    config = tmp_path / "mannequin.json"
    assert skeleton_config.main([str(take), "-o", str(config)]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["usable"] and not written["needed_unmapped"]
    shipped = SHIPPED["cmu_3dsmax"]["joints"]
    assert written["mapped"] == {body: UNREAL.get(joint, joint) for body, joint in shipped.items()}

    assert retarget_file.main([str(take), "--skeleton", str(config), "--no-progress", "--out",
                               str(tmp_path / "new.npz")]) == 0
    new = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    original = tmp_path / "original.bvh"
    original.write_text(format_bvh(load_bvh(MOTION / "cmu_131_02_walk.bvh").slice(0, 60)))
    assert retarget_file.main([str(original), "--no-progress", "--out", str(tmp_path / "old.npz")]) == 0
    old = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert abs(new["err_mm"] - old["err_mm"]) < 3.0 and abs(new["hands_mm"] - old["hands_mm"]) < 3.0, (new, old)


def test_bones_no_name_gives_are_said_and_a_file_without_hips_is_refused(tmp_path, capsys) -> None:
    text = format_bvh(load_bvh(MOTION / "cmu_131_02_walk.bvh").slice(0, 4))
    armless = tmp_path / "armless.bvh"
    armless.write_text(renamed(text, {"LeftCollar": "a1", "LeftShoulder": "a2", "LeftElbow": "a3", "LeftWrist": "a4"}))
    assert skeleton_config.main([str(armless), "-o", str(tmp_path / "a.json")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert "LeftArm" in out["needed_unmapped"] and "a2" in out["unused_joints"] and (tmp_path / "a.json").is_file()
    hipless = tmp_path / "hipless.bvh"
    hipless.write_text(renamed(text, {"Hips": "base"}))
    assert skeleton_config.main([str(hipless), "-o", str(tmp_path / "h.json")]) == 2
    assert "no joint is named like the hips" in capsys.readouterr().err



def _joint(name: str, offset: str, children: tuple = (), depth: int = 1) -> str:
    """A BVH JOINT block (rotations only) with its children, an End Site where it has none."""
    pad = "\t" * depth
    inner = "".join(_joint(*child, depth=depth + 1) for child in children) or f"{pad}\tEnd Site {{ OFFSET 0 0 1 }}\n"
    head = f"{pad}JOINT {name}\n{pad}{{\n{pad}\tOFFSET {offset}\n{pad}\tCHANNELS 3 Zrotation Xrotation Yrotation\n"
    return f"{head}{inner}{pad}}}\n"


def _limb(names: list[str], offsets: list[str]) -> tuple:
    """``names`` each the child of the one before."""
    return (names[0], offsets[0], (_limb(names[1:], offsets[1:]),) if len(names) > 1 else ())


def test_a_spine_of_one_joint_without_a_neck_is_the_torso(tmp_path, capsys) -> None:
    """A skeleton such as PyMO's public walk take (inches): Hips - Spine - Head and the shoulders,
    no neck. Its one spine joint is the torso the IK needs (Spine2)."""
    sides = (("Left", ""), ("Right", "-"))
    arms = tuple(_limb([f"{s}Shoulder", f"{s}Arm", f"{s}ForeArm", f"{s}Hand"], ["0 10 0", f"{x}7.3 0 0", f"{x}10.7 0 0",
                                                                               f"{x}8.5 0 0"]) for s, x in sides)
    legs = tuple(_limb([f"{s}UpLeg", f"{s}Leg", f"{s}Foot", f"{s}ToeBase"], [f"{x}4 0 0", "0 -16.8 0", "0 -15.5 0",
                                                                           "0 -1.5 5.4"]) for s, x in sides)
    body = _joint("Spine", "0 8.5 0", (("Head", "0 13.8 0"), *arms)) + "".join(_joint(*leg) for leg in legs)
    frame = " ".join(["0", "35.5", "0"] + ["0"] * (3 + 3 * 18))
    take = tmp_path / "one_spine.bvh"
    take.write_text("HIERARCHY\nROOT Hips\n{\n\tOFFSET 0 0 0\n\tCHANNELS 6 Xposition Yposition Zposition "
                    f"Zrotation Xrotation Yrotation\n{body}}}\nMOTION\nFrames: 2\nFrame Time: 0.008333\n"
                    f"{frame}\n{frame}\n")
    mapped = skeleton_config.map_bones(load_bvh(take))
    assert mapped["Spine2"] == mapped["Spine"] == "Spine" and "Neck" not in mapped
    assert skeleton_config.main([str(take), "-o", str(tmp_path / "one_spine.json")]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["usable"] and written["unit_m"] == pytest.approx(0.0254)
