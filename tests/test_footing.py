"""Feet on the ground: contacts, the stance floor, the held foot targets, and the figures."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.robot import model as robot_model
from mocapline.robot.registry import get_robot
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import load_ik_config
from mocapline.services.retarget.footing import (
    ContactDetector,
    FloorEstimate,
    FootingSettings,
    contact_holds,
    foot_geometry,
    plan_contacts,
    stance_floor,
)
from mocapline.services.retarget.ground_quality import human_ground, robot_ground
from mocapline.services.retarget.ik.options import RetargetOptions
from mocapline.services.retarget.ik.retargeter import Retargeter

FPS = 60.0
LEFT = [GMR_BODY_INDEX["LeftFoot"], GMR_BODY_INDEX["LeftToe"]]
RIGHT_FOOT = GMR_BODY_INDEX["RightFoot"]


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return robot_model.load_ik_model(get_robot())


def standing(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic Axis performer's pose with both feet lowest held for ``n`` frames."""
    pos, quat = synthetic.human_motion(120, FPS)
    f = int(np.argmin(pos[:, [LEFT[0], RIGHT_FOOT], 2].max(axis=1)))
    return np.repeat(pos[f:f + 1], n, axis=0), np.repeat(quat[f:f + 1], n, axis=0)


def sliding(n: int, speed: float) -> tuple[np.ndarray, np.ndarray]:
    """Standing, the left foot sliding along x at ``speed`` m/s on the floor from frame 20 on (what a
    capture's skating foot looks like)."""
    pos, quat = standing(n)
    shift = np.clip(np.arange(n) - 20, 0, None) * speed / FPS
    pos[:, LEFT, 0] += shift[:, None]
    return pos, quat


def solve(model: mujoco.MjModel, pos: np.ndarray, quat: np.ndarray, footing: bool,
          config: str = "axis_studio") -> tuple[np.ndarray, Retargeter]:
    rt = Retargeter(load_ik_config(config, model=model), RetargetOptions(fps=FPS, footing=footing), model=model)
    return np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(len(pos))]), rt


def foot_xy(model: mujoco.MjModel, qpos: np.ndarray, body: str = "left_ankle_roll_link") -> np.ndarray:
    data = mujoco.MjData(model)
    out = []
    for q in qpos:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        out.append(data.xpos[model.body(body).id, :2].copy())
    return np.array(out)


def test_contact_hysteresis() -> None:
    s = FootingSettings()
    det = ContactDetector(s)
    assert det.update(0.01, 0.1)  # low and slow: in contact
    assert det.update((s.on_height + s.off_height) / 2, 0.1)  # between the thresholds: stays
    assert not det.update(s.off_height + 0.01, 0.1)  # lifted
    assert not det.update((s.on_height + s.off_height) / 2, 0.1)  # between: stays off
    assert not det.update(0.01, s.on_speed + 0.1)  # low but fast: not yet
    assert det.update(0.01, 0.0)


def test_offline_plan_drops_short_flickers() -> None:
    pos, _ = standing(60)
    pos[30:32, LEFT, 2] += 0.1  # a 2-frame spike up
    pos[:, RIGHT_FOOT, 2] += 0.2  # the right foot never down
    plan = plan_contacts(pos, FPS)
    assert plan[:, 0].all()  # the flicker shorter than min_s is gone
    assert not plan[:, 1].any()
    kept = pos.copy()
    kept[30:40, LEFT, 2] += 0.1  # a real 10-frame lift stays
    assert not plan_contacts(kept, FPS)[32:38, 0].any()


def test_live_floor_meets_the_take_floor() -> None:
    pos, _ = synthetic.human_motion(600, FPS)
    live = FloorEstimate(int(10 * FPS), int(0.25 * FPS), 5.0)
    for p in pos:
        value = live.update(p)
    assert value == pytest.approx(stance_floor(pos), abs=1e-3)


def test_a_skating_stance_foot_is_held_flat_on_the_floor(model) -> None:
    pos, quat = sliding(120, 0.3)  # 0.3 m/s: the skate of a capture, far above jitter
    held, rt = solve(model, pos, quat, footing=True)
    free, _ = solve(model, pos, quat, footing=False)
    slid_held = np.linalg.norm(foot_xy(model, held)[-1] - foot_xy(model, held)[30])
    slid_free = np.linalg.norm(foot_xy(model, free)[-1] - foot_xy(model, free)[30])
    assert slid_free > 0.2  # the human foot slid 0.5 m; without footing the robot's follows
    assert slid_held < 0.05 * slid_free
    geo = foot_geometry(rt.robot)
    data = mujoco.MjData(model)
    data.qpos[:] = held[-1]
    mujoco.mj_kinematics(model, data)
    b = model.body("left_ankle_roll_link").id
    soles = data.xpos[b] + geo.soles[0] @ data.xmat[b].reshape(3, 3).T
    assert np.all(np.abs(soles[:, 2]) < 0.01)  # flat, on the floor: every sole point within 1 cm of z = 0


def test_a_lifted_foot_follows_the_human(model) -> None:
    pos, quat = standing(90)
    pos[40:, LEFT, 2] += 0.15  # lifted 15 cm and moved 20 cm forward
    pos[40:, LEFT, 0] += np.linspace(0, 0.2, 50)[:, None]
    held, _ = solve(model, pos, quat, footing=True)
    free, _ = solve(model, pos, quat, footing=False)
    np.testing.assert_allclose(foot_xy(model, held)[-1], foot_xy(model, free)[-1], atol=0.02)


def test_a_foot_landing_while_it_slides_stops_at_once(model) -> None:
    """The left foot comes down at frame 40 still sliding at 0.5 m/s (a capture's foot lands so):
    the robot's foot is held within the short touchdown blend, not dragged on over lift-off's."""
    n = 90
    pos, quat = standing(n)
    pos[:, LEFT, 0] += (np.arange(n) * 0.5 / FPS)[:, None]
    pos[:40, LEFT, 2] += 0.10
    dragged = {}
    for touchdown_s in (FootingSettings().touchdown_s, FootingSettings().blend_s):
        rt = Retargeter(load_ik_config("axis_studio", model=model), RetargetOptions(fps=FPS), model=model)
        assert rt.footing is not None
        rt.footing.settings.touchdown_s = touchdown_s
        xy = foot_xy(model, np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(n)]))
        dragged[touchdown_s] = float(np.linalg.norm(xy[40:50] - xy[40], axis=1).max())
    short, long = dragged.values()
    assert short < 0.005 < 0.008 < long, dragged


def test_each_contact_holds_its_foot_at_the_mean_of_its_frames() -> None:
    contacts = np.zeros((8, 2), dtype=bool)
    contacts[1:4, 0] = contacts[6:8, 0] = contacts[2:8, 1] = True
    xy = np.arange(32, dtype=float).reshape(8, 2, 2)
    holds = contact_holds(contacts, xy)
    np.testing.assert_array_equal(holds[1:4, 0], np.repeat(xy[1:4, 0].mean(axis=0)[None], 3, axis=0))
    np.testing.assert_array_equal(holds[6:8, 0], np.repeat(xy[6:8, 0].mean(axis=0)[None], 2, axis=0))
    np.testing.assert_array_equal(holds[2:8, 1], np.repeat(xy[2:8, 1].mean(axis=0)[None], 6, axis=0))
    assert np.isnan(holds[[0, 4, 5], 0]).all() and np.isnan(holds[:2, 1]).all()


def test_offline_a_drifting_stance_foot_lands_on_its_mean_and_stays(model) -> None:
    """A capture's standing foot that drifts (0.1 m/s, far below the contact's speed): the whole
    take known, the robot's foot lands where the drift is on average, reached before the
    touchdown, and stays there; live it stays where it landed, further from the performer's."""
    n, down = 150, 40
    pos, quat = standing(n)
    pos[:down, LEFT, 2] += 0.10  # swinging in
    pos[:, LEFT, 0] += (np.arange(n) * 0.1 / FPS)[:, None]
    free, _ = solve(model, pos, quat, footing=False)
    config = load_ik_config("axis_studio", model=model)
    planned = Retargeter(config, RetargetOptions(fps=FPS), model=model)
    planned.plan_take(pos, quat)
    landed = Retargeter(config, RetargetOptions(fps=FPS), model=model)
    assert planned.footing is not None and landed.footing is not None and planned.footing.plan is not None
    landed.footing.set_plan(planned.footing.plan, planned.footing.plan_floor)  # the same contacts, no holds
    xy = {name: foot_xy(model, np.array([rt.retarget(pos[f], quat[f]).qpos for f in range(n)]))
          for name, rt in (("planned", planned), ("landed", landed))}
    first = int(np.flatnonzero(planned.footing.plan[:, 0])[0])
    assert abs(first - down) <= 3, first
    stand = slice(first, n)
    target = foot_xy(model, free)[stand]
    for name, path in xy.items():
        assert np.linalg.norm(path[stand] - path[first], axis=1).max() < 0.003, name  # still while it stands
    miss = {name: float(np.linalg.norm(path[stand] - target, axis=1).mean()) for name, path in xy.items()}
    assert miss["planned"] < 0.6 * miss["landed"], miss
    steps = np.linalg.norm(np.diff(xy["planned"][:first + 1], axis=0), axis=1)
    assert steps.max() < 0.02, steps.max()  # the approach is a blend, not a jump


def test_live_footing_sees_no_future_frame(model) -> None:
    """The live path is causal: a frame's pose is the same whatever frames come after it."""
    pos, quat = sliding(80, 0.3)
    whole, _ = solve(model, pos, quat, footing=True)
    pos2, quat2 = pos.copy(), quat.copy()
    pos2[50:, LEFT, 2] += 0.2  # a different future
    other, _ = solve(model, pos2, quat2, footing=True)
    np.testing.assert_array_equal(whole[:50], other[:50])
    assert not np.allclose(whole[60:], other[60:])


def test_sites_on_a_foot_move_with_it(model) -> None:
    """The Xsens config's toe sites: held with their foot, rigidly."""
    xsens = load_ik_config("xsens", model=model)
    rt = Retargeter(xsens, RetargetOptions(fps=FPS), model=model)
    assert rt.footing is not None
    body, sites = rt.footing.tables[-1][0]
    assert body is not None and len(sites) == 1
    pos, quat = sliding(60, 0.3)
    for f in range(len(pos)):
        rt.retarget(pos[f], quat[f])
    raw = rt.targets(pos[-1], quat[-1])
    done = rt.solved_targets
    assert done is not None
    assert rt.footing.contacts[0]
    # the site's pose in the foot's frame is what the raw targets say
    before = Q.rotate(Q.conjugate(raw[body, :4]), raw[sites[0], 4:] - raw[body, 4:])
    after = Q.rotate(Q.conjugate(done[body, :4]), done[sites[0], 4:] - done[body, 4:])
    np.testing.assert_allclose(after, before, atol=1e-9)
    assert np.linalg.norm(done[body, 4:6] - raw[body, 4:6]) > 0.05  # and the foot was held back


def test_ground_figures_of_a_skate(model) -> None:
    pos, quat = sliding(120, 0.3)
    h = human_ground(pos, FPS)
    # the left ankle in contact (the right stands 3 cm higher), sliding 0.3 m/s for 99 of 119 steps
    assert h.skate_cm_s == pytest.approx(30.0 * 99 / 119, rel=1e-6)
    assert h.slid_m == pytest.approx(0.3 * 99 / FPS, rel=1e-6)
    assert h.float_share == 0.0
    free, _ = solve(model, pos, quat, footing=False)
    held, _ = solve(model, pos, quat, footing=True)
    feet = foot_geometry(get_robot())
    g_free, g_held = robot_ground(model, feet, free, pos, FPS), robot_ground(model, feet, held, pos, FPS)
    assert g_held.skate_cm_s < g_free.skate_cm_s / 3
    assert g_held.penetration_max_cm < 1.0
    lifted = pos.copy()
    lifted[:, :, 2] += 0.3  # the whole robot in the air: floating, every frame
    up = free.copy()
    up[:, 2] += 0.3
    assert robot_ground(model, feet, up, lifted, FPS).float_share == 1.0


def lowest_sole(model: mujoco.MjModel, q: np.ndarray) -> float:
    geo, robot = foot_geometry(get_robot()), get_robot()
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_kinematics(model, data)
    heights = []
    for k, name in enumerate(robot.feet):
        b = model.body(name).id
        heights.append(float((data.xpos[b] + geo.soles[k] @ data.xmat[b].reshape(3, 3).T)[:, 2].min()))
    return min(heights)


def test_a_crouch_deeper_than_the_legs_raises_the_robot_instead_of_sinking_its_feet(model) -> None:
    """The performer's body goes 35 cm down, feet on the floor: the IK's own pose leaves the soles
    centimetres under the floor (its legs cannot reach both the root's target and a flat foot);
    the pose handed out is that one raised, joints unchanged, no sole point under the floor."""
    pos, quat = standing(80)
    feet = [GMR_BODY_INDEX[n] for n in ("LeftFoot", "LeftToe", "RightFoot", "RightToe")]
    pos[30:, [i for i in range(pos.shape[1]) if i not in feet], 2] -= 0.35
    rt = Retargeter(load_ik_config("axis_studio", model=model), RetargetOptions(fps=FPS), model=model)
    sunk = raised = 0.0
    for f in range(len(pos)):
        out = rt.retarget(pos[f], quat[f]).qpos
        np.testing.assert_array_equal(out[3:], rt.qpos[3:])  # only the root's height differs
        sunk, raised = min(sunk, lowest_sole(model, rt.qpos)), min(raised, lowest_sole(model, out))
    assert sunk < -0.02 and raised > -1e-3
    free, _ = solve(model, pos, quat, footing=False)  # without footing: the pose as solved
    assert min(lowest_sole(model, q) for q in free) < -0.02


def test_a_hop_keeps_the_lower_foot_near_the_floor(model) -> None:
    """The performer jumps 15 cm, both feet off the floor for a third of a second: the robot's body
    is lowered instead (the lower sole within flight_cap of the floor, and never under it) and comes
    back to the performer's height once a foot is down; with the flight kept, it leaves the ground."""
    pos, quat = standing(100)
    rise = 0.15 * np.sin(np.pi * np.clip((np.arange(100) - 30) / 20, 0, 1))
    pos[:, :, 2] += rise[:, None]
    rt = Retargeter(load_ik_config("axis_studio", model=model), RetargetOptions(fps=FPS), model=model)
    low = np.array([lowest_sole(model, rt.retarget(pos[f], quat[f]).qpos) for f in range(len(pos))])
    cap = rt.footing.settings.flight_cap
    assert low.max() < cap + rt.footing.settings.soft and low.min() > -1e-3
    assert abs(low[-1] - low[25]) < 0.005  # down again, where it stood
    kept = Retargeter(load_ik_config("axis_studio", model=model), RetargetOptions(fps=FPS), model=model)
    kept.footing.settings.flight_cap = math.inf
    flying = [lowest_sole(model, kept.retarget(pos[f], quat[f]).qpos) for f in range(len(pos))]
    assert max(flying) > 0.06  # the 15 cm, scaled to the robot, less its legs
