"""The robot as the browser draws it: the model's visual meshes once, then body poses per update.

The web viewer renders nothing on the server. A page fetches the robot once (``describe``: which
body each visual mesh hangs on, where, in what colour; ``mesh_bytes``: the vertices and triangles)
and then receives only body poses (``pose_bytes``: position and orientation of every body of
every performer's robot, a few hundred bytes each) over a WebSocket, and draws them at its own
display rate with three.js.

Compiling the model with its meshes takes hundreds of MB that the allocator keeps afterwards, and
the viewer itself only needs the kinematics (the mesh-free model, a few MB; docs/benchmarks.md).
So the meshes are extracted
by a short-lived child process (``python -m mocapline.services.viewer.scene DIR ROBOT``), the first
time a page asks for them, into a cache folder keyed by the robot, its model file and the MuJoCo version
(``RobotAssets``); the viewer process never holds them beyond the gzipped bytes it serves.

MuJoCo is z-up and quaternions are (w, x, y, z); the page sets its camera up-vector to +z and
reorders the quaternions, so no conversion happens here.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

VISUAL_GROUP = 2  # Menagerie's visual meshes (collision geoms are group 3, the floor group 0)
ERROR_GROUPS = ("legs", "waist", "arms")


@dataclass(frozen=True)
class MeasuredPose:
    """The measured robot of a pose update (see ``RobotScene.pose_bytes``)."""

    avatar_index: int  # the performer whose target it is compared with; -1: none
    age_s: float
    errors: dict[str, dict[str, float]] | None
    xpos: np.ndarray
    xquat: np.ndarray


@dataclass
class RobotScene:
    model: mujoco.MjModel

    @cached_property
    def _visual_geoms(self) -> list[int]:
        m = self.model
        mesh = mujoco.mjtGeom.mjGEOM_MESH
        return [g for g in range(m.ngeom) if m.geom_group[g] == VISUAL_GROUP and m.geom_type[g] == mesh]

    @cached_property
    def _meshes(self) -> list[int]:
        return sorted({int(self.model.geom_dataid[g]) for g in self._visual_geoms})

    def describe(self) -> dict[str, Any]:
        """Bodies, visual geoms and mesh layout in ``mesh_bytes`` (byte offsets), as JSON."""
        m = self.model
        meshes, offset = [], 0
        for k in self._meshes:
            nv, nf = int(m.mesh_vertnum[k]), int(m.mesh_facenum[k])
            meshes.append({"vert_offset": offset, "vert_count": nv})
            offset += nv * 3 * 4
        for entry, k in zip(meshes, self._meshes, strict=True):
            nf = int(m.mesh_facenum[k])
            entry.update(face_offset=offset, face_count=nf)
            offset += nf * 3 * 4
        index = {k: i for i, k in enumerate(self._meshes)}
        geoms = []
        for g in self._visual_geoms:
            mat = int(m.geom_matid[g])
            rgba = m.mat_rgba[mat] if mat >= 0 else m.geom_rgba[g]
            geoms.append({"body": int(m.geom_bodyid[g]), "mesh": index[int(m.geom_dataid[g])],
                          "pos": [round(float(v), 6) for v in m.geom_pos[g]],
                          "quat": [round(float(v), 6) for v in m.geom_quat[g]],
                          "rgba": [round(float(v), 3) for v in rgba]})
        bodies = [m.body(b).name for b in range(m.nbody)]
        return {"bodies": bodies, "pelvis": bodies.index("pelvis") if "pelvis" in bodies else 1,
                "geoms": geoms, "meshes": meshes, "bytes": offset}

    @cached_property
    def mesh_bytes(self) -> bytes:
        """Every visual mesh's vertices (float32 xyz) then every mesh's triangles (uint32), gzipped
        (served with Content-Encoding: gzip; built on the first request, then kept)."""
        m = self.model
        parts = []
        for k in self._meshes:
            a, n = int(m.mesh_vertadr[k]), int(m.mesh_vertnum[k])
            parts.append(np.ascontiguousarray(m.mesh_vert[a:a + n], dtype="<f4").tobytes())
        for k in self._meshes:
            a, n = int(m.mesh_faceadr[k]), int(m.mesh_facenum[k])
            parts.append(np.ascontiguousarray(m.mesh_face[a:a + n], dtype="<u4").tobytes())
        return gzip.compress(b"".join(parts), compresslevel=6, mtime=0)

    @staticmethod
    def pose_bytes(performers: list[tuple[int, int | None, np.ndarray, np.ndarray]],
                   measured: MeasuredPose | None = None) -> bytes:
        """One update of every performer's robot, float32: the number of performers, then per
        performer its avatar_index, its posture_index (or -1) and per body x y z qw qx qy qz.
        ``performers``: (avatar_index, posture_index, xpos, xquat), in avatar_index order.
        Then, where the viewer reads LowState, the measured robot: 1, the avatar_index it is
        compared with (-1: none), the age of its LowState (ms), the tracking error mean per joint
        group (legs, waist, arms; rad; NaN without a target), the max per group, its bodies."""
        parts = [np.array([len(performers)], dtype="<f4").tobytes()]
        for avatar_index, posture_index, xpos, xquat in performers:
            head = np.array([avatar_index, -1.0 if posture_index is None else float(posture_index)], dtype="<f4")
            parts.append(head.tobytes() + np.concatenate([xpos, xquat], axis=1).astype("<f4", copy=False).tobytes())
        if measured is not None:
            err = measured.errors or {}
            means = [err[g]["mean"] if g in err else np.nan for g in ERROR_GROUPS]
            maxes = [err[g]["max"] if g in err else np.nan for g in ERROR_GROUPS]
            head = np.array([1, measured.avatar_index, measured.age_s * 1000.0, *means, *maxes], dtype="<f4")
            parts.append(head.tobytes() + np.concatenate([measured.xpos, measured.xquat], axis=1)
                         .astype("<f4", copy=False).tobytes())
        return b"".join(parts)


FORMAT = 1  # bump when describe() / mesh_bytes() change shape: old caches are then ignored


def build(out_dir: Path, robot_model: str) -> None:
    """Compile the robot with its meshes and write robot.json and robot.bin (gzip) into ``out_dir``."""
    from mocapline.robot.model import load_full_model
    from mocapline.robot.registry import get_robot

    scene = RobotScene(load_full_model(get_robot(robot_model)))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "robot.bin").write_bytes(scene.mesh_bytes)
    (out_dir / "robot.json").write_text(json.dumps(scene.describe()))


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mocapline"


@dataclass
class RobotAssets:
    """robot.json / robot.bin for the page, extracted once by a child process and cached."""

    robot_model: str = "g1"
    cache: Path = field(default_factory=cache_root)
    timeout_s: float = 180.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @cached_property
    def folder(self) -> Path:
        from mocapline.robot.model import reference_xml_path
        from mocapline.robot.registry import get_robot

        robot = get_robot(self.robot_model)
        key = hashlib.sha256(reference_xml_path(robot).read_bytes())
        key.update(f"{mujoco.__version__}/{FORMAT}/{robot.model.lock}".encode())
        return self.cache / f"{robot.name}-{key.hexdigest()[:16]}"

    def _ensure(self) -> Path:
        with self._lock:
            if not (self.folder / "robot.json").is_file():
                self.cache.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix="robot-", dir=self.cache))
                try:
                    subprocess.run([sys.executable, "-m", "mocapline.services.viewer.scene", str(tmp),
                                    self.robot_model],
                                   check=True, timeout=self.timeout_s, stdout=subprocess.DEVNULL)
                    with contextlib.suppress(OSError):  # whole or not at all; another viewer may have won
                        tmp.rename(self.folder)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            return self.folder

    def describe_bytes(self) -> bytes:
        return (self._ensure() / "robot.json").read_bytes()

    def mesh_bytes(self) -> bytes:
        return (self._ensure() / "robot.bin").read_bytes()


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "g1")
