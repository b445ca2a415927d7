"""The G1 as the browser draws it: the model's visual meshes once, then body poses per update.

The web viewer renders nothing on the server. A page fetches the robot once (``describe``: which
body each visual mesh hangs on, where, in what colour; ``mesh_bytes``: the vertices and triangles)
and then receives only body poses (``pose_bytes``: position and orientation of every body, a few
hundred bytes) over a WebSocket, and draws them at its own display rate with three.js.

MuJoCo is z-up and quaternions are (w, x, y, z); the page sets its camera up-vector to +z and
reorders the quaternions, so no conversion happens here.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import mujoco
import numpy as np

VISUAL_GROUP = 2  # the G1 model's visual meshes (collision geoms are group 3, the floor group 0)


@dataclass
class RobotScene:
    model: mujoco.MjModel

    @cached_property
    def _visual_geoms(self) -> list[int]:
        m = self.model
        return [g for g in range(m.ngeom) if m.geom_group[g] == VISUAL_GROUP and m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH]

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
        for entry, k in zip(meshes, self._meshes):
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
    def pose_bytes(posture_index: int | None, xpos: np.ndarray, xquat: np.ndarray) -> bytes:
        """One update: float32 [posture_index (or -1), then per body x y z qw qx qy qz]."""
        head = np.array([-1.0 if posture_index is None else float(posture_index)], dtype="<f4")
        body = np.concatenate([xpos, xquat], axis=1).astype("<f4", copy=False)
        return head.tobytes() + body.tobytes()
