"""The window's side-by-side drawing of several performers (no GL needed: scenes are plain data)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from g1_facts import load_full_model

from mocapline.services.viewer.window import LABEL_HEIGHT_M, SPACING_M, add_labels, add_side_by_side, frame_camera


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return load_full_model(scene=True)


def posed(model: mujoco.MjModel, x: float, shoulder: float) -> mujoco.MjData:
    data = mujoco.MjData(model)
    data.qpos[0] = x
    data.qpos[7 + 15] = shoulder  # left shoulder pitch
    mujoco.mj_kinematics(model, data)
    return data


def geom_positions(model: mujoco.MjModel, others: list[mujoco.MjData]) -> np.ndarray:
    scene = mujoco.MjvScene(model, 2000)
    add_side_by_side(model, others, scene, mujoco.MjvOption())
    return np.array([scene.geoms[g].pos.copy() for g in range(scene.ngeom)])


def test_each_other_performer_is_drawn_one_spacing_further_along_minus_y(model: mujoco.MjModel) -> None:
    a, b = posed(model, 0.2, -1.0), posed(model, -0.1, 0.5)
    alone_a, alone_b = geom_positions(model, [a]), geom_positions(model, [b])
    both = geom_positions(model, [a, b])
    n = len(alone_a)
    assert n > 10 and len(both) == 2 * n
    np.testing.assert_allclose(both[:n], alone_a, atol=1e-6)  # slot 1: one spacing
    shift = np.array([0.0, -SPACING_M, 0.0])
    np.testing.assert_allclose(both[n:], alone_b + shift, atol=1e-6)  # slot 2: two spacings
    assert not np.allclose(alone_a - alone_a.mean(0), alone_b - alone_b.mean(0), atol=1e-3)  # their poses differ


def test_redrawing_replaces_the_geoms_and_leaves_the_floor_to_the_window(model: mujoco.MjModel) -> None:
    data = posed(model, 0.0, 0.0)
    scene = mujoco.MjvScene(model, 2000)
    for _ in range(3):
        add_side_by_side(model, [data, data], scene, mujoco.MjvOption())
    robot_geoms = scene.ngeom // 2
    assert scene.ngeom == 2 * robot_geoms
    types = {int(scene.geoms[g].type) for g in range(scene.ngeom)}
    assert int(mujoco.mjtGeom.mjGEOM_PLANE) not in types
    add_side_by_side(model, [], scene, mujoco.MjvOption())
    assert scene.ngeom == 0


def test_the_camera_looks_at_the_middle_robot_and_backs_off_with_more() -> None:
    camera = mujoco.MjvCamera()
    frame_camera(camera, (0.4, 0.1), 1)
    one = camera.distance
    np.testing.assert_allclose(camera.lookat[:2], (0.4, 0.1))
    frame_camera(camera, (0.4, 0.1), 3)
    np.testing.assert_allclose(camera.lookat[:2], (0.4, 0.1 - SPACING_M))  # robots at 0, -1 and -2 spacings
    assert camera.distance > one


def test_each_robot_gets_its_avatar_name_over_its_head(model: mujoco.MjModel) -> None:
    a, b, c = posed(model, 0.2, -1.0), posed(model, -0.1, 0.5), posed(model, 0.0, 0.0)
    scene = mujoco.MjvScene(model, 2000)
    add_side_by_side(model, [b, c], scene, mujoco.MjvOption())
    robots = scene.ngeom
    add_labels(scene, [a, b, c], ["Alice", "", "Carol"])  # an unnamed performer gets no label
    labels = [scene.geoms[g] for g in range(robots, scene.ngeom)]
    assert [g.label for g in labels] == ["Alice", "Carol"]
    assert all(g.type == mujoco.mjtGeom.mjGEOM_LABEL for g in labels)
    np.testing.assert_allclose(labels[0].pos, [0.2, 0.0, a.qpos[2] + LABEL_HEIGHT_M], atol=1e-6)
    np.testing.assert_allclose(labels[1].pos, [0.0, -2 * SPACING_M, c.qpos[2] + LABEL_HEIGHT_M], atol=1e-6)
    full = mujoco.MjvScene(model, 1)
    full.ngeom = 1
    add_labels(full, [a], ["Alice"])  # no room: nothing added, no error
    assert full.ngeom == 1
