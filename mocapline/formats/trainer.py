"""A reference clip in the layouts that motion-tracking trainers read (``retarget-dataset --format``).

Each writer takes the clip's arrays (``build_clip``: ``time``, ``root_pose`` x y z + w x y z,
``q`` in ``joint_names`` order, ``body_pos_w`` ...) and writes to an open binary file, so that the
caller decides where (a temporary name renamed into place). The layouts were read off each
consumer's public loader; none of their code is here:

- ``npz``: the project's clip contract (docs/recording.md), what ``export`` and ``retarget-file`` write.
- ``gmr-pkl``: GMR's motion pickle (``scripts/bvh_to_robot.py`` and its SMPL-X twin save it; TWIST
  and others load it): a dict ``fps`` (float), ``root_pos`` (T, 3), ``root_rot`` (T, 4) **x y z w**
  (GMR turns MuJoCo's w x y z around before saving), ``dof_pos`` (T, J) in the model's joint order,
  ``local_body_pos`` (T, B, 3) and ``link_body_list`` (B names). GMR itself saves the last two as
  None; here they are filled: each body's position in the root's frame (``R_root^T (p - p_root)``),
  which is what its consumers compute from forward kinematics.
- ``beyondmimic-csv``: the CSV that BeyondMimic's ``csv_to_npz.py`` (HybridRobotics/whole_body_tracking)
  reads with ``numpy.loadtxt(delimiter=",")``: no header, one row per sample, ``x y z`` of the
  root, its quaternion **x y z w**, then the joints in the robot's joint order (for the G1, the
  29 joints in Unitree's order, which is its ``joint_names`` list). It carries no rate: give
  ``--input_fps`` the clip's (``retarget-dataset --fps``, default 50).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from mocapline.core import quat as Q

FORMATS = ("npz", "gmr-pkl", "beyondmimic-csv")
SUFFIX = {"npz": ".npz", "gmr-pkl": ".pkl", "beyondmimic-csv": ".csv"}


def xyzw(wxyz: np.ndarray) -> np.ndarray:
    return np.asarray(wxyz)[..., [1, 2, 3, 0]]


def gmr_motion(clip: dict[str, np.ndarray]) -> dict[str, Any]:
    """The clip as GMR's motion dict."""
    root = clip["root_pose"]
    rot = root[:, 3:7]
    rel = clip["body_pos_w"] - root[:, None, 0:3]
    inv = np.repeat(Q.conjugate(rot)[:, None, :], rel.shape[1], axis=1)
    local = Q.rotate(inv, rel)
    return {
        "fps": float(clip["fps"]),
        "root_pos": np.ascontiguousarray(root[:, 0:3]),
        "root_rot": np.ascontiguousarray(xyzw(rot)),
        "dof_pos": np.ascontiguousarray(clip["q"]),
        "local_body_pos": np.ascontiguousarray(local),
        "link_body_list": [str(n) for n in clip["body_names"]],
    }


def write_gmr_pickle(fh: IO[bytes], clip: dict[str, np.ndarray]) -> None:
    pickle.dump(gmr_motion(clip), fh, protocol=pickle.HIGHEST_PROTOCOL)


def beyondmimic_rows(clip: dict[str, np.ndarray]) -> np.ndarray:
    """(T, 7 + J): root x y z, root x y z w, joints."""
    root = clip["root_pose"]
    return np.concatenate((root[:, 0:3], xyzw(root[:, 3:7]), clip["q"]), axis=1)


def write_beyondmimic_csv(fh: IO[bytes], clip: dict[str, np.ndarray]) -> None:
    np.savetxt(fh, beyondmimic_rows(clip), delimiter=",", fmt="%.9g")


def write_npz(fh: IO[bytes], clip: dict[str, np.ndarray]) -> None:
    # numpy's stubs cannot tell these keyword arrays from its allow_pickle flag
    np.savez_compressed(fh, **clip)  # type: ignore[arg-type]


WRITERS: dict[str, Callable[[IO[bytes], dict[str, np.ndarray]], None]] = {
    "npz": write_npz, "gmr-pkl": write_gmr_pickle, "beyondmimic-csv": write_beyondmimic_csv,
}


def parse_formats(text: str) -> tuple[str, ...]:
    """``npz,gmr-pkl`` -> ("npz", "gmr-pkl"); ValueError naming the choices."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in FORMATS]
    if bad or not names:
        raise ValueError(f"unknown format(s) {', '.join(bad) or '(none)'}: choose from {', '.join(FORMATS)}")
    return names
