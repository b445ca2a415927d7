"""The retargeter: config loading, frame conventions, accuracy, limits, failure handling."""

import json

import g1_facts as rm
import mink
import mujoco
import numpy as np
import pytest

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.core.frames import HumanFrame
from mocapline.formats.skeleton import AXIS_STUDIO_BONES
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import (
    IK_CONFIG_DIR,
    IKConfigError,
    load_ik_config,
    parse_ik_config,
)
from mocapline.services.retarget.ik.options import RetargetOptions
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.ik.smoothing import OneFrameSmoother

C = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
J = {name: i for i, name in enumerate(rm.G1_JOINT_NAMES)}
# The known-answer takes are the robot's own poses, many off any floor: the IK alone, without the
# stance feet held on the floor (footing: tests/test_footing.py)
NO_FLOOR = RetargetOptions(footing=False)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return rm.load_ik_model()


@pytest.fixture(scope="module")
def axis(model):
    return load_ik_config("axis_studio", model=model)


@pytest.fixture(scope="module")
def xsens(model):
    return load_ik_config("xsens", model=model)


def raw_axis() -> dict:
    return json.loads((IK_CONFIG_DIR / "axis_studio_to_g1.json").read_text())


def body_errors(model, truth: np.ndarray, got: np.ndarray) -> np.ndarray:
    return np.linalg.norm(synthetic.all_body_positions(model, truth) - synthetic.all_body_positions(model, got), axis=2)


# -- config -----------------------------------------------------------------------------------------


def test_shipped_configs_load(axis, xsens) -> None:
    for cfg in (axis, xsens):
        assert cfg.robot_root_name == "pelvis" and cfg.human_root_name == "Hips"
        assert len(cfg.tables()) == 2
        assert all(e.human_body in GMR_BODIES for t in cfg.tables() for e in t)
    assert any(e.frame_type == "site" for e in xsens.ik_match_table2)  # the toe sites
    limits = axis.velocity_limits(rm.G1_JOINT_NAMES)
    np.testing.assert_allclose(limits[J["left_knee_joint"]], rm.G1_VELOCITY_LIMITS["left_knee_joint"])


def test_unknown_human_body_lists_the_valid_names(model) -> None:
    raw = raw_axis()
    raw["ik_match_table2"]["left_knee_link"][0] = "LeftKnee"
    with pytest.raises(IKConfigError) as exc:
        parse_ik_config(raw, model=model, source="test.json")
    msg = str(exc.value)
    assert "'LeftKnee'" in msg and "ik_match_table2['left_knee_link']" in msg
    assert all(name in msg for name in GMR_BODIES)

    raw = raw_axis()
    raw["human_scale_table"]["Pelvis"] = 1.0
    with pytest.raises(IKConfigError, match="unknown human body 'Pelvis'.*valid human bodies: Hips"):
        parse_ik_config(raw, model=model)


def test_unknown_robot_body_lists_the_valid_names(model) -> None:
    raw = raw_axis()
    raw["ik_match_table1"]["left_knee"] = raw["ik_match_table1"].pop("left_knee_link")
    with pytest.raises(IKConfigError) as exc:
        parse_ik_config(raw, model=model)
    msg = str(exc.value)
    assert "unknown robot body 'left_knee'" in msg
    assert "left_knee_link" in msg and "pelvis" in msg and "left_toe" in msg  # bodies and sites listed

    raw = raw_axis()
    raw["robot_root_name"] = "base_link"
    with pytest.raises(IKConfigError, match="robot_root_name: unknown robot body 'base_link'"):
        parse_ik_config(raw, model=model)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("human_scale_table"), "missing keys"),
        (lambda r: r["ik_match_table2"]["pelvis"].__setitem__(4, [1, 1, 0, 0]), "not a unit quaternion"),
        (lambda r: r["ik_match_table2"]["pelvis"].__setitem__(1, -1), "position weight must be a number >= 0"),
        (lambda r: r["ik_match_table2"]["pelvis"].__setitem__(3, [0, 0]), "position offset"),
        (lambda r: r["ik_match_table2"]["pelvis"].pop(), "expected \\[human body"),
        (lambda r: r["human_scale_table"].pop("LeftHand"), "'LeftHand' has no entry in human_scale_table"),
        (lambda r: r.__setitem__("joint_velocity_limits", {"knee": 3.0}), "unknown joint 'knee'"),
        (lambda r: r.__setitem__("human_height_assumption", 0), "human_height_assumption"),
        (lambda r: (r.__setitem__("use_ik_match_table1", False), r.__setitem__("use_ik_match_table2", False)), "both"),
    ],
)
def test_malformed_configs_are_rejected_clearly(model, mutate, message) -> None:
    raw = raw_axis()
    mutate(raw)
    with pytest.raises(IKConfigError, match=message):
        parse_ik_config(raw, model=model)


def test_config_path_errors(tmp_path) -> None:
    with pytest.raises(IKConfigError, match="not a config shipped for g1"):
        load_ik_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(IKConfigError, match="not valid JSON"):
        load_ik_config(bad)


# -- frame conventions ------------------------------------------------------------------------------


def axis_t_pose() -> tuple[np.ndarray, np.ndarray]:
    """The Axis Studio rest pose as capture delivers it: T-pose, every quaternion = quat(C)."""
    names = [b.name for b in AXIS_STUDIO_BONES]
    world = {}
    for i, b in enumerate(AXIS_STUDIO_BONES):
        world[i] = np.array(b.offset_cm) if b.parent < 0 else world[b.parent] + np.array(b.offset_cm)
    qc = np.empty(4)
    mujoco.mju_mat2Quat(qc, C.reshape(9))
    stand_in = {"Spine3": "Spine2", "LeftToe": "LeftFoot", "RightToe": "RightFoot"}
    pos = np.array([C @ world[names.index(stand_in.get(b, b))] / 100 for b in GMR_BODIES])
    return pos, np.tile(qc, (len(GMR_BODIES), 1))


def yaw_of(quat: np.ndarray) -> float:
    forward = Q.rotate(quat, np.array([1.0, 0.0, 0.0]))
    return float(np.arctan2(forward[1], forward[0]))


def test_axis_t_pose_gives_a_t_posed_robot_facing_like_the_human(axis, model) -> None:
    pos, quat = axis_t_pose()
    rt = Retargeter(axis, model=model)
    r = rt.retarget(pos, quat)
    assert not r.ik_failed
    assert yaw_of(r.root_quat) == pytest.approx(-np.pi / 2, abs=0.02)  # the Axis character faces -Y
    q = r.joint_pos
    assert q[J["left_shoulder_roll_joint"]] == pytest.approx(np.pi / 2, abs=0.05)
    assert q[J["right_shoulder_roll_joint"]] == pytest.approx(-np.pi / 2, abs=0.05)
    assert q[J["left_elbow_joint"]] == pytest.approx(np.pi / 2, abs=0.05)
    assert q[J["right_elbow_joint"]] == pytest.approx(np.pi / 2, abs=0.05)
    for name in ("left_knee_joint", "right_knee_joint", "waist_yaw_joint", "left_shoulder_pitch_joint"):
        assert abs(q[J[name]]) < 0.05, name
    assert r.root_pos[2] == pytest.approx(0.79, abs=0.03)  # standing, feet on the ground

    # turn the human by 90 deg about z: the robot turns with it
    turn = Q.from_axis_angle(np.array([0.0, 0.0, 1.0]), np.pi / 2)
    rt.reset()
    r2 = rt.retarget(Q.rotate(turn, pos), Q.multiply(turn, quat))
    assert yaw_of(r2.root_quat) == pytest.approx(0.0, abs=0.02)
    np.testing.assert_allclose(r2.joint_pos, r.joint_pos, atol=0.02)


def test_xsens_n_pose_gives_a_standing_robot_facing_plus_x(xsens, model) -> None:
    """MVN segment frames = world in the N-pose, subject facing +X."""
    pos = {"Hips": (0, 0, 0.95), "Spine": (0, 0, 1.05), "Spine1": (0, 0, 1.15), "Spine2": (0, 0, 1.25),
           "Spine3": (0, 0, 1.35), "Neck": (0, 0, 1.5), "Head": (0, 0, 1.6)}
    for side, y in (("Left", 1.0), ("Right", -1.0)):
        pos.update({
            f"{side}Shoulder": (0, 0.03 * y, 1.45), f"{side}Arm": (0, 0.18 * y, 1.42),
            f"{side}ForeArm": (0, 0.18 * y, 1.13), f"{side}Hand": (0, 0.18 * y, 0.87),
            f"{side}UpLeg": (0, 0.09 * y, 0.95), f"{side}Leg": (0, 0.09 * y, 0.52),
            f"{side}Foot": (0, 0.09 * y, 0.09), f"{side}Toe": (0.14, 0.09 * y, 0.02),
        })
    p = np.array([pos[b] for b in GMR_BODIES], dtype=float)
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (len(GMR_BODIES), 1))
    r = Retargeter(xsens, model=model).retarget(p, quats)
    assert not r.ik_failed
    assert yaw_of(r.root_quat) == pytest.approx(0.0, abs=0.02)
    q = r.joint_pos
    assert q[J["left_elbow_joint"]] == pytest.approx(np.pi / 2, abs=0.1)  # arms hang straight
    assert abs(q[J["left_shoulder_roll_joint"]]) < 0.2 and abs(q[J["right_shoulder_roll_joint"]]) < 0.2
    assert abs(q[J["left_knee_joint"]]) < 0.1


# -- accuracy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_name", ["axis", "xsens"])
def test_round_trip_recovers_random_reachable_poses(model, axis, xsens, config_name) -> None:
    """Targets from the G1's own FK (the answer is known) at random reachable poses: < 1 cm."""
    cfg = axis if config_name == "axis" else xsens
    rng = np.random.default_rng(7)
    keys = synthetic.random_poses(6, rng, model=model, spread=0.5)
    keys[:, 0:2] = keys[0, 0:2] + np.cumsum(rng.uniform(-0.1, 0.1, size=(6, 2)), axis=0)  # a take, not a teleport
    truth = synthetic.interpolate_poses(keys, 30)
    pos, quat = synthetic.human_from_robot(truth, cfg, model=model)
    rt = Retargeter(cfg, NO_FLOOR, model=model)
    got = np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(len(truth))])
    err = body_errors(model, truth, got)
    assert rt.stats.failures == 0
    assert err[1:].mean() < 0.01, err.mean()  # the first frame starts from the default pose
    assert err[5:].mean() < 0.001


def test_both_backends_agree(model, axis) -> None:
    truth = synthetic.robot_motion(30, 60.0, 2.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    out = {}
    for backend in ("fast", "mink"):
        rt = Retargeter(axis, RetargetOptions(backend=backend, footing=False), model=model)
        rt.reset(truth[0])
        out[backend] = np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(len(truth))])
        assert body_errors(model, truth, out[backend]).mean() < 0.002, backend
    assert body_errors(model, out["fast"], out["mink"]).max() < 0.005


def test_human_height_scaling_is_invariant_to_the_human_size(model, axis) -> None:
    truth = synthetic.robot_motion(3, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, model=model)
    expected = rt.targets(pos[1], quat[1])
    k = 1.9 / axis.human_height_assumption  # the same motion by a 1.9 m human
    rt.set_human_height(1.9)
    np.testing.assert_allclose(rt.targets(pos[1] * k, quat[1]), expected, atol=1e-12)
    assert not np.allclose(rt.targets(pos[1], quat[1]), expected, atol=1e-3)
    # and human_from_robot's inverse honours the height
    big_pos, big_quat = synthetic.human_from_robot(truth, axis, human_height=1.9, model=model)
    np.testing.assert_allclose(rt.targets(big_pos[1], big_quat[1]), expected, atol=1e-9)


def test_ground_offset_shifts_the_targets_down(model, axis) -> None:
    pos, quat = axis_t_pose()
    a = Retargeter(axis, model=model).targets(pos, quat)
    b = Retargeter(axis, RetargetOptions(ground_offset=0.05), model=model).targets(pos, quat)
    np.testing.assert_allclose(b[:, 6], a[:, 6] - 0.05)
    np.testing.assert_allclose(b[:, :6], a[:, :6])


# -- limits -----------------------------------------------------------------------------------------


def fast_take(model, cfg, n_keys: int = 12, frames_between: int = 3, seed: int = 3):
    rng = np.random.default_rng(seed)
    keys = synthetic.random_poses(n_keys, rng, model=model, spread=1.0)  # joints over their full range
    keys[:, 0:3] = keys[0, 0:3]
    truth = synthetic.interpolate_poses(keys, frames_between)
    return truth, *synthetic.human_from_robot(truth, cfg, model=model)


@pytest.mark.parametrize("backend", ["fast", "mink"])
def test_joint_and_velocity_limits_hold_on_a_fast_motion(model, axis, backend) -> None:
    raw = raw_axis()
    raw["joint_velocity_limits"] = {"default": 6.0}  # rad/s: far below what the take asks for
    cfg = parse_ik_config(raw, model=model)
    fps = 60.0
    truth, pos, quat = fast_take(model, cfg)
    ranges = rm.joint_ranges(model)
    true_speed = np.abs(np.diff(truth[:, 7:], axis=0)).max() * fps
    assert true_speed > 20.0  # the motion itself breaks the limit many times over

    rt = Retargeter(cfg, RetargetOptions(fps=fps, backend=backend, footing=False), model=model)
    rt.reset(truth[0])
    got = np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(len(truth))])
    assert rt.stats.failures == 0
    joints = got[:, 7:]
    assert np.all(joints >= ranges[:, 0] - 1e-9) and np.all(joints <= ranges[:, 1] + 1e-9)
    speed = np.abs(np.diff(joints, axis=0)) * fps
    assert speed.max() <= 6.0 + 1e-6
    assert speed.max() > 5.9  # the limit binds: the test would see a violation

    # without the velocity limit the same take moves faster: the limit is what held it
    free = Retargeter(cfg, RetargetOptions(fps=fps, backend=backend, velocity_limit=False, footing=False),
                      model=model)
    free.reset(truth[0])
    got_free = np.array([free.retarget(pos[f], quat[f]).qpos for f in range(len(truth))])
    assert (np.abs(np.diff(got_free[:, 7:], axis=0)) * fps).max() > 12.0


def test_elapsed_frames_widen_the_velocity_bound(model, axis) -> None:
    raw = raw_axis()
    raw["joint_velocity_limits"] = {"default": 3.0}
    cfg = parse_ik_config(raw, model=model)
    truth, pos, quat = fast_take(model, cfg, n_keys=3, frames_between=10)
    rt = Retargeter(cfg, RetargetOptions(fps=60.0), model=model)
    rt.reset(truth[0])
    rt.retarget(pos[0], quat[0])
    q0 = rt.qpos
    q1 = rt.retarget(pos[10], quat[10], elapsed_frames=4).qpos  # 3 frames lost upstream
    moved = np.abs(q1[7:] - q0[7:]).max()
    assert 3.0 / 60 * 1.5 < moved <= 3.0 / 60 * 4 + 1e-9


# -- failures -------------------------------------------------------------------------------------


def test_no_solution_found_keeps_the_last_good_pose(model, axis, monkeypatch) -> None:
    truth = synthetic.robot_motion(6, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, NO_FLOOR, model=model)
    good = [rt.retarget(pos[f], quat[f]) for f in range(3)]
    original = rt.backend.step

    def fail(table: int, final_share: float = 0.0) -> None:
        raise mink.NoSolutionFound("daqp")

    monkeypatch.setattr(rt.backend, "step", fail)
    bad = rt.retarget(pos[3], quat[3])
    assert bad.ik_failed and "NoSolutionFound" in bad.error
    np.testing.assert_array_equal(bad.qpos, good[-1].qpos)
    assert rt.stats.failures == 1 and rt.stats.frames == 4
    monkeypatch.setattr(rt.backend, "step", original)
    after = rt.retarget(pos[4], quat[4])
    assert not after.ik_failed
    assert body_errors(model, truth[4:5], after.qpos[None]).mean() < 0.002


@pytest.mark.parametrize("backend", ["fast", "mink"])
def test_only_numeric_failures_are_counted_a_bug_raises(model, axis, monkeypatch, backend) -> None:
    """A singular system or a non-finite value is a counted ik_failed frame; a TypeError or an
    AttributeError (a coding bug) propagates instead of hiding among the counted failures."""
    truth = synthetic.robot_motion(4, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, RetargetOptions(backend=backend), model=model)
    last = rt.retarget(pos[0], quat[0]).qpos

    def raising(exc: Exception):
        def step(table: int, final_share: float = 0.0) -> None:
            raise exc
        return step

    for exc in (np.linalg.LinAlgError("Singular matrix"), FloatingPointError("overflow")):
        monkeypatch.setattr(rt.backend, "step", raising(exc))
        r = rt.retarget(pos[1], quat[1])
        assert r.ik_failed and type(exc).__name__ in r.error
        np.testing.assert_array_equal(r.qpos, last)
    assert rt.stats.failures == 2
    for bug in (TypeError("unsupported operand"), AttributeError("no attribute 'qpos'")):
        monkeypatch.setattr(rt.backend, "step", raising(bug))
        with pytest.raises(type(bug)):
            rt.retarget(pos[1], quat[1])
    assert rt.stats.failures == 2


def test_nan_input_is_a_counted_failure(model, axis) -> None:
    truth = synthetic.robot_motion(4, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, model=model)
    last = rt.retarget(pos[0], quat[0]).qpos
    bad_pos = pos[1].copy()
    bad_pos[GMR_BODY_INDEX["LeftHand"], 1] = np.nan
    r = rt.retarget(bad_pos, quat[1])
    assert r.ik_failed and "non-finite" in r.error
    np.testing.assert_array_equal(r.qpos, last)
    zero_quat = quat[1].copy()
    zero_quat[GMR_BODY_INDEX["Hips"]] = 0.0
    assert rt.retarget(pos[1], zero_quat).ik_failed
    # a body the config does not use may be anything
    junk = pos[1].copy()
    junk[GMR_BODY_INDEX["Head"]] = np.nan
    assert not rt.retarget(junk, quat[1]).ik_failed
    assert rt.stats.failures == 2


def test_nan_or_infeasible_solver_output_is_a_counted_failure(model, axis, monkeypatch) -> None:
    import mocapline.services.retarget.ik.fast_backend as module

    truth = synthetic.robot_motion(4, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, model=model)
    last = rt.retarget(pos[0], quat[0]).qpos
    real_solve = module.daqp.solve
    # the Cholesky fast path reports failure, so each step goes to daqp
    monkeypatch.setattr(module, "dposv", lambda H, g: (H, g, 1))

    def daqp_result(x: np.ndarray, exitflag: int):  # daqp.solve's (x, fval, exitflag, info)
        return lambda H, f, *a, **k: (x, 0.0, exitflag, {"lam": np.zeros(len(f))})

    monkeypatch.setattr(module.daqp, "solve", daqp_result(np.full(35, np.nan), 1))
    r = rt.retarget(pos[1], quat[1])
    assert r.ik_failed and "non-finite" in r.error
    np.testing.assert_array_equal(r.qpos, last)
    monkeypatch.setattr(module.daqp, "solve", daqp_result(np.zeros(35), -1))
    r = rt.retarget(pos[1], quat[1])
    assert r.ik_failed and "NoSolutionFound" in r.error
    monkeypatch.setattr(module.daqp, "solve", real_solve)
    assert not rt.retarget(pos[2], quat[2]).ik_failed
    assert rt.stats.failures == 2
    np.testing.assert_array_equal(rt.backend.qpos, rt.qpos)


def test_the_cholesky_step_is_the_qp_solution_when_no_bound_binds(model, monkeypatch) -> None:
    """The fast backend solves H x = -f by Cholesky and calls daqp only when a bound binds (and
    directly after a step whose solution had a bound active): the same trajectory as daqp on every
    step, and as trying Cholesky first on every step, on a take that touches joint and velocity
    limits."""
    import mocapline.services.retarget.ik.fast_backend as module

    raw = raw_axis()
    raw["joint_velocity_limits"] = {"default": 6.0}  # rad/s: the take asks for more, the bound binds
    cfg = parse_ik_config(raw, model=model)
    _, pos, quat = fast_take(model, cfg)
    real_dposv = module.dposv
    calls = {"dposv": 0}

    def counted_dposv(H, g):
        calls["dposv"] += 1
        return real_dposv(H, g)

    out, dposv_calls = {}, {}
    for path in ("cholesky", "cholesky_always_first", "daqp"):
        calls["dposv"] = 0
        monkeypatch.setattr(module, "dposv", (lambda H, g: (H, g, 1)) if path == "daqp" else counted_dposv)
        rt = Retargeter(cfg, model=model)
        if path == "cholesky_always_first":  # without the shortcut to daqp after an active bound
            step = rt.backend.step

            def no_shortcut(table: int, final_share: float = 0.0, step=step, backend=rt.backend):
                backend._bound_binds = False
                return step(table, final_share)

            monkeypatch.setattr(rt.backend, "step", no_shortcut)
        out[path] = np.array([rt.retarget(p, q).qpos for p, q in zip(pos, quat, strict=True)])
        dposv_calls[path] = calls["dposv"]
    np.testing.assert_allclose(out["cholesky"], out["daqp"], atol=1e-9)
    np.testing.assert_allclose(out["cholesky"], out["cholesky_always_first"], atol=1e-9)
    assert dposv_calls["cholesky"] < dposv_calls["cholesky_always_first"]  # the shortcut was taken


def test_a_last_step_taken_on_the_predicted_drop_keeps_the_poses(model) -> None:
    """The fast backend takes a frame's last step without evaluating after it when the Gauss-Newton
    model predicts a drop < tolerance: the same number of steps and the same poses as deciding on
    the measured drop, one error evaluation a frame fewer."""
    pos, quat = synthetic.human_motion(120, 30.0)  # fast motion: several steps a frame
    runs = {}
    for predicted in (True, False):
        rt = Retargeter("axis_studio", RetargetOptions(fps=30.0), model=model)
        backend = rt.backend
        step, evaluate = backend.step, backend._evaluate
        evaluations = [0]

        def counted(t, evaluate=evaluate, evaluations=evaluations):
            evaluations[0] += 1
            return evaluate(t)

        backend._evaluate = counted
        if not predicted:
            backend.step = lambda table, final_share=0.0, step=step: step(table, 0.0)
        q = np.array([rt.retarget(p, qq).qpos for p, qq in zip(pos, quat, strict=True)])
        runs[predicted] = (q, rt.stats.steps, evaluations[0])
    (q1, steps1, evals1), (q0, steps0, evals0) = runs[True], runs[False]
    assert abs(steps1 - steps0) <= 0.02 * steps0
    assert evals1 <= evals0 - 0.8 * len(pos)
    assert body_errors(model, q0, q1).mean() < 0.001


def test_mink_backend_failure_is_counted(model, axis) -> None:
    truth = synthetic.robot_motion(3, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, axis, model=model)
    rt = Retargeter(axis, RetargetOptions(backend="mink"), model=model)
    rt.retarget(pos[0], quat[0])

    def no_solution(*args, **kwargs):
        raise mink.NoSolutionFound("daqp")

    rt.backend.solve = no_solution
    assert rt.retarget(pos[1], quat[1]).ik_failed
    assert rt.stats.failures == 1


def test_retarget_frame_keeps_the_frame_identity(model, axis) -> None:
    pos, quat = axis_t_pose()
    hf = HumanFrame(posture_index=9368, capture_timestamp_us=123456789, positions=pos, quaternions=quat,
                    traceparent="00-abc-def-01", segment=2, session_id="s1")
    rf = Retargeter(axis, model=model).retarget_frame(hf)
    assert (rf.posture_index, rf.capture_timestamp_us, rf.traceparent, rf.segment, rf.session_id) == (
        9368, 123456789, "00-abc-def-01", 2, "s1")
    assert rf.root_pos.shape == (3,) and rf.root_quat.shape == (4,) and rf.joint_pos.shape == (29,)
    assert not rf.ik_failed


# -- output filter ----------------------------------------------------------------------------------


def test_one_frame_smoother_delays_by_exactly_one_frame() -> None:
    sm = OneFrameSmoother()
    base = np.zeros(36)
    base[3] = 1.0
    frames = []
    for k in range(6):
        q = base.copy()
        q[7:] = 0.1 * k  # linear in time: a centred [1, 2, 1] filter returns it unchanged
        q[0] = k**2  # quadratic: the filter adds exactly 0.5 (second difference 2, times 1/4)
        frames.append(q)
    outs = [sm.push(q, tag=i) for i, q in enumerate(frames)]
    assert outs[0] is None
    for k in range(1, 6):
        q, tag = outs[k]
        assert tag == k - 1
        if k >= 2:
            np.testing.assert_allclose(q[7:], frames[k - 1][7:])
            assert q[0] == pytest.approx((k - 1) ** 2 + 0.5)
    q, tag = sm.flush()
    assert tag == 5
    np.testing.assert_allclose(q[7:], 0.25 * frames[4][7:] + 0.75 * frames[5][7:])
    assert sm.flush() is None and not sm.pending


def test_one_frame_smoother_kills_alternation() -> None:
    sm = OneFrameSmoother()
    out = []
    for k in range(10):
        q = np.zeros(36)
        q[3] = 1.0
        q[7:] = 0.3 + (0.01 if k % 2 else -0.01)
        r = sm.push(q)
        if r is not None:
            out.append(r[0])
    np.testing.assert_allclose(np.array(out)[1:, 7:], 0.3)
