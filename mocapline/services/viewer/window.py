"""The MuJoCo window (``--display window``): one G1 per performer, side by side.

The window draws the model's own ``MjData``: the first performer's robot. Every other performer's
robot is added to the window's user scene at each redraw, ``SPACING_M`` further along -y for each
(the web page's spacing), so the window needs no model with several robots in it. Each robot gets
its performer's avatar name above its head (a label geom), as on the web page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco

SPACING_M = 1.3
LABEL_HEIGHT_M = 0.85  # above the pelvis: over the G1's head


def add_side_by_side(model: mujoco.MjModel, others: Sequence[mujoco.MjData], scene: mujoco.MjvScene,
                     option: mujoco.MjvOption) -> None:
    """Replace ``scene``'s geoms by the robots of ``others``, the k-th one ``k * SPACING_M`` along -y.
    Only moving bodies are drawn (the floor is the window's own); a full scene drops the rest, as
    MuJoCo does, with a warning."""
    scene.ngeom = 0
    perturb = mujoco.MjvPerturb()
    for slot, data in enumerate(others, start=1):
        first = scene.ngeom
        mujoco.mjv_addGeoms(model, data, option, perturb, mujoco.mjtCatBit.mjCAT_DYNAMIC, scene)
        for g in range(first, scene.ngeom):
            scene.geoms[g].pos[1] -= SPACING_M * slot


def add_labels(scene: mujoco.MjvScene, robots: Sequence[mujoco.MjData], names: Sequence[str]) -> None:
    """Append a text label with ``names[k]`` over the k-th robot (k * SPACING_M along -y, its
    pelvis at the data's qpos[0:3]); empty names are skipped, and labels that no longer fit."""
    identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    for slot, (data, name) in enumerate(zip(robots, names, strict=False)):
        if not name or scene.ngeom >= scene.maxgeom:
            continue
        geom = scene.geoms[scene.ngeom]
        pos = [data.qpos[0], data.qpos[1] - SPACING_M * slot, data.qpos[2] + LABEL_HEIGHT_M]
        mujoco.mjv_initGeom(geom, mujoco.mjtGeom.mjGEOM_LABEL, [0.05, 0.05, 0.05], pos, identity,
                            [1.0, 1.0, 1.0, 1.0])
        geom.label = name[:99]
        scene.ngeom += 1


def frame_camera(camera: mujoco.MjvCamera, pelvis: Sequence[float], robots: int) -> None:
    """Look at the middle of ``robots`` side-by-side G1s from their front, all of them in view."""
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.lookat[:] = (pelvis[0], pelvis[1] - SPACING_M * (robots - 1) / 2, 0.75)
    camera.distance = 3.0 + 1.1 * SPACING_M * (robots - 1)
    camera.azimuth, camera.elevation = 180.0, -12.0


class Window:
    """MuJoCo's passive viewer on the first performer's data, redrawn with the others beside it.
    The camera is framed when the number of robots changes; in between the user moves it freely."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        from mujoco import viewer as mujoco_viewer

        self.model, self.data = model, data
        self.handle: Any = mujoco_viewer.launch_passive(model, data, show_left_ui=False, show_right_ui=False)
        self._robots = 0

    def is_running(self) -> bool:
        return bool(self.handle.is_running())

    def show(self, others: Sequence[mujoco.MjData], names: Sequence[str] = ()) -> None:
        """Redraw with ``others`` beside the first robot; ``names``: the avatar names of the first
        robot and of ``others``, in order."""
        with self.handle.lock():
            add_side_by_side(self.model, others, self.handle.user_scn, self.handle.opt)
            add_labels(self.handle.user_scn, [self.data, *others], names)
            if 1 + len(others) != self._robots:
                self._robots = 1 + len(others)
                frame_camera(self.handle.cam, self.data.qpos[:2], self._robots)
        self.handle.sync()

    def close(self) -> None:
        self.handle.close()
