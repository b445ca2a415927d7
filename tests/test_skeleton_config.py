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
