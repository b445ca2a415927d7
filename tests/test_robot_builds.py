"""Each robot build as data (mocapline/robot/builds): its description holds together and agrees with
its model, its IK configs load and retarget real motion within its ranges, a description with a
mistake is refused with the mistake named."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from mocapline.core.paths import ASSETS_DIR
from mocapline.formats.bvh import estimate_height, gmr_bodies, load_bvh
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescriptionError
from mocapline.robot.registry import get_robot, robot_names
from mocapline.robot.unitree.family import family
from mocapline.services.retarget.config import SOURCES, detect_bvh_skeleton, load_ik_config
from mocapline.services.retarget.ik.options import RetargetOptions
from mocapline.services.retarget.ik.retargeter import Retargeter

BUILDS = robot_names()  # every description in mocapline/robot/builds, a new one included


def test_the_shipped_builds() -> None:
    assert BUILDS[0] == "g1" and {"g1", "g1_23", "g1_dex3", "h1"} <= set(BUILDS)


@pytest.mark.parametrize("name", BUILDS)
def test_a_description_agrees_with_its_model(name: str) -> None:
    robot = get_robot(name)
    ik = robot_model.load_ik_model(robot)  # refuses joints other than the model's
    assert robot_model.joint_names(ik) == robot.joint_names
    assert ik.nq == 7 + robot.joint_count
    slots = family(robot.low_level.family).motor_slots
    assert len(set(robot.motor_index)) == robot.joint_count and robot.motor_index.max() < slots
    assert sorted(np.concatenate(list(robot.groups.values()))) == list(range(robot.joint_count))
    physics = robot_model.physics_spec(robot).compile()
    assert np.all(robot_model.torque_limits(physics, robot.joint_names) > 0)
    ranges = robot_model.joint_ranges(ik, robot.joint_names)
    assert np.all((ranges[:, 0] <= robot.stand) & (robot.stand <= ranges[:, 1]))
    for body in (robot.root_body, robot.torso_body, *robot.feet):
        assert mujoco.mj_name2id(ik, mujoco.mjtObj.mjOBJ_BODY, body) >= 0, body
    for frame in robot.wrists:
        assert (mujoco.mj_name2id(ik, mujoco.mjtObj.mjOBJ_BODY, frame) >= 0
                or mujoco.mj_name2id(ik, mujoco.mjtObj.mjOBJ_SITE, frame) >= 0), frame


@pytest.mark.parametrize("name", BUILDS)
def test_the_standing_height_puts_the_soles_on_the_floor(name: str) -> None:
    """At the description's standing height, zero pose, the lowest collision geom of the feet
    touches z = 0 (within 1 cm): the retarget, the sim and the viewer all stand the robot there."""
    robot = get_robot(name)
    model = robot_model.physics_spec(robot).compile()
    data = mujoco.MjData(model)
    data.qpos[:] = robot_model.default_qpos(robot, model)
    mujoco.mj_forward(model, data)
    feet = {model.body(f).id for f in robot.feet}
    lowest = min(_lowest_point(model, data, g) for g in range(model.ngeom) if model.geom_bodyid[g] in feet)
    assert abs(lowest) < 0.01, lowest


def _lowest_point(model: mujoco.MjModel, data: mujoco.MjData, g: int) -> float:
    """z of a sphere's or capsule's lowest point (the feet's collision geoms are those)."""
    size, centre, axis = model.geom_size[g], data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3)[:, 2]
    if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return float(centre[2] - abs(axis[2]) * size[1] - size[0])
    return float(centre[2] - size[0])


def test_the_23_dof_build_is_the_29_without_its_locked_joints() -> None:
    g1, g23 = get_robot("g1"), get_robot("g1_23")
    assert g23.joint_count == 23 and set(g23.joint_names) < set(g1.joint_names)
    absent = set(g1.joint_names) - set(g23.joint_names)
    assert absent == set(g23.model.lock) and len(absent) == 6
    # the same motor slot for every joint it has; the absent joints' slots unused
    for joint in g23.joints:
        assert joint.motor == g1.joints[g1.index(joint.name)].motor
    assert {g1.joints[g1.index(j)].motor for j in absent} == {13, 14, 20, 21, 27, 28}
    # the locked links stay where the 29-DoF G1 has them at 0
    m29, m23 = robot_model.load_ik_model(g1), robot_model.load_ik_model(g23)
    d29, d23 = mujoco.MjData(m29), mujoco.MjData(m23)
    d29.qpos[:] = robot_model.default_qpos(g1, m29)
    d23.qpos[:] = robot_model.default_qpos(g23, m23)
    mujoco.mj_kinematics(m29, d29)
    mujoco.mj_kinematics(m23, d23)
    for body in ("torso_link", "left_wrist_yaw_link"):
        np.testing.assert_allclose(d23.xpos[m23.body(body).id], d29.xpos[m29.body(body).id], atol=1e-12)


def test_the_dex3_build_streams_the_body_and_models_the_hands() -> None:
    robot = get_robot("g1_dex3")
    assert robot.joint_names == get_robot("g1").joint_names
    assert robot.hands is not None and len(robot.hands.left) == len(robot.hands.right) == 7
    full = robot_model.load_full_model(robot)
    assert len(robot_model.joint_names(full)) == 43
    assert set(robot.hands.left + robot.hands.right) <= set(robot_model.joint_names(full))
    assert robot_model.load_ik_model(robot).nq == 36  # the IK leaves the hands to their own stage


def test_the_h1_is_a_unitree_go_robot_with_its_own_motor_order() -> None:
    h1 = get_robot("h1")
    assert h1.joint_count == 19 and h1.low_level.family == "unitree_go"
    slots = dict(zip(h1.joint_names, h1.motor_index.tolist(), strict=True))
    # unitree_sdk2_python's H1JointIndex: right hip roll 0 .. left elbow 19, slot 9 unused
    assert slots["right_hip_roll"] == 0 and slots["left_hip_yaw"] == 7 and slots["torso"] == 6
    assert slots["left_ankle"] == 10 and slots["right_shoulder_pitch"] == 12 and slots["left_elbow"] == 19
    assert 9 not in slots.values()
    assert {j.mode for j in h1.joints} == {1, 10}  # weak motors 0x01, the others 0x0A


@pytest.mark.parametrize("name", BUILDS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_build_has_a_config_for_every_source(name: str, source: str) -> None:
    robot = get_robot(name)
    config = load_ik_config(source, robot=robot)
    assert config.source.endswith(robot.ik_configs[source])
    assert config.velocity_limits(robot.joint_names).shape == (robot.joint_count,)
    if source != "xsens":
        assert config.bvh, "the source's BVH skeleton variants (assets/skeletons)"


@pytest.mark.parametrize("name", [n for n in BUILDS if get_robot(n).ik_template is not None])
def test_the_configs_of_a_templated_build_are_what_its_template_makes(name: str) -> None:
    """assets/ik_configs/*_to_NAME.json are `mocapline ik-config NAME`'s output (regenerate after a
    change to the template's configs or the build's [ik_template])."""
    from mocapline.tools.ik_config import configs, main

    for path, text in configs(get_robot(name)).items():
        assert path.read_text() == text, path.name
    assert main([name, "--check"]) == 0


def test_the_23_dof_configs_are_the_g1s_without_the_hands_rotation() -> None:
    for source in ("axis_studio", "xsens"):
        g1 = json.loads((ASSETS_DIR / "ik_configs" / get_robot("g1").ik_configs[source]).read_text())
        g23 = json.loads((ASSETS_DIR / "ik_configs" / get_robot("g1_23").ik_configs[source]).read_text())
        assert g23["human_scale_table"] == g1["human_scale_table"]
        for frame, entry in g1["ik_match_table2"].items():
            got = g23["ik_match_table2"][frame]
            assert got[0] == entry[0] and got[1] == entry[1]
            assert got[2] == (0 if frame.endswith("wrist_yaw_link") else entry[2])
            np.testing.assert_allclose(np.hstack(got[3:]), np.hstack(entry[3:]), atol=1e-6)


def test_a_template_keeps_the_rotation_offsets_of_its_own_robot() -> None:
    """The derivation on the G1 itself (frames mapped to themselves) gives back the G1's offsets:
    the human bodies' rest rotations are kept."""
    from mocapline.robot.description import IKTemplate, TemplateFrame
    from mocapline.tools.ik_config import derive

    g1 = get_robot("g1")
    raw = json.loads((ASSETS_DIR / "ik_configs" / g1.ik_configs["axis_studio"]).read_text())
    entries = {**raw["ik_match_table1"], **raw["ik_match_table2"]}
    frames = {f: TemplateFrame(f) for f in entries}
    same = type(g1).__new__(type(g1))
    same.__dict__.update({**g1.__dict__, "ik_template": IKTemplate("g1", frames)})
    out = derive(raw, "axis_studio", g1, same)
    for f, entry in raw["ik_match_table2"].items():
        got, want = np.array(out["ik_match_table2"][f][4]), np.array(entry[4])
        assert min(np.abs(got - want).max(), np.abs(got + want).max()) < 2e-3, f


@pytest.mark.integration
@pytest.mark.parametrize("name", BUILDS)
def test_a_real_take_retargets_within_each_builds_ranges(name: str) -> None:
    robot = get_robot(name)
    model = robot_model.load_ik_model(robot)
    motion = load_bvh(ASSETS_DIR / "motion" / "cmu_131_02_walk.bvh")
    config, skeleton = detect_bvh_skeleton(motion, robot=robot, model=model)
    pos, quat = gmr_bodies(motion, skeleton)
    ik = Retargeter(config, RetargetOptions(fps=motion.fps, human_height=estimate_height(pos)), robot=robot,
                    model=model)
    q = np.array([ik.retarget(pos[f], quat[f]).qpos for f in range(len(pos))])
    ranges = robot_model.joint_ranges(model)
    assert np.all(q[:, 7:] >= ranges[:, 0] - 1e-6) and np.all(q[:, 7:] <= ranges[:, 1] + 1e-6)
    assert ik.stats.failures == 0
    root = next(k for k, e in enumerate(ik.table_entries()) if e.robot_frame == robot.root_body)
    first, last = ik.targets(pos[0], quat[0])[root, 4:], ik.targets(pos[-1], quat[-1])[root, 4:]
    travel, wanted = np.linalg.norm(q[-1, 0:2] - q[0, 0:2]), np.linalg.norm(last[0:2] - first[0:2])
    assert wanted > 0.3 and abs(travel / wanted - 1) < 0.1, (travel, wanted)  # it walks where its target goes
    assert abs(q[:, 2].mean() - robot.standing_height) < 0.15  # the pelvis at about its standing height


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "robot.toml"
    path.write_text(text)
    return str(path)


def test_a_description_with_a_mistake_is_refused_by_name(tmp_path: Path) -> None:
    base = (Path(robot_model.__file__).parent / "builds" / "g1.toml").read_text()
    with pytest.raises(RobotDescriptionError, match="unknown keys \\['colour'\\]"):
        get_robot(_write(tmp_path, base.replace('title = "Unitree G1 29-DoF"', 'title = "x"\ncolour = "red"')))
    (tmp_path / "b").mkdir()
    clash = base.replace('motor = 1, group = "legs"', 'motor = 0, group = "legs"', 1)
    with pytest.raises(RobotDescriptionError, match="motor slots must be distinct"):
        get_robot(_write(tmp_path / "b", clash))
    (tmp_path / "c").mkdir()
    with pytest.raises(RobotDescriptionError, match="not a shipped build"):
        get_robot(str(tmp_path / "c" / "none.toml"))
    (tmp_path / "d").mkdir()
    wrong = base.replace('"left_knee_joint"', '"left_knee"')
    with pytest.raises(RobotDescriptionError, match="are not the IK model's"):
        robot_model.load_ik_model(get_robot(_write(tmp_path / "d", wrong)))


def test_an_ik_range_narrows_a_copy_of_the_model_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    g1 = get_robot("g1")
    model = robot_model.load_ik_model(g1)
    narrowed = robot_model.with_ik_ranges(g1, model)
    yaw = model.joint("left_shoulder_yaw_joint").id
    assert list(narrowed.jnt_range[yaw]) == [-1.4, 1.4]
    assert list(model.jnt_range[yaw]) == pytest.approx([-2.618, 2.618], abs=1e-3)  # left as it was
    others = [j for j in range(model.njnt) if "shoulder_yaw" not in model.joint(j).name]
    assert np.array_equal(narrowed.jnt_range[others], model.jnt_range[others])
    base = (Path(robot_model.__file__).parent / "builds" / "g1.toml").read_text()
    assert base.count("ik_range = [-1.4, 1.4]") == 2
    with pytest.raises(RobotDescriptionError, match="ik_range must be \\[low, high\\]"):
        get_robot(_write(tmp_path, base.replace("ik_range = [-1.4, 1.4]", "ik_range = [1.4, -1.4]", 1)))
    (tmp_path / "b").mkdir()
    apart = get_robot(_write(tmp_path / "b", base.replace("ik_range = [-1.4, 1.4]", "ik_range = [3.0, 4.0]", 1)))
    with pytest.raises(RobotDescriptionError, match="does not meet the model's range"):
        robot_model.with_ik_ranges(apart, model)
