"""Biovision BVH files of any skeleton: hierarchy, motion, forward kinematics, and the 23 GMR bodies.

What varies between exporters and is handled here: per-joint channel counts and orders (any of
X/Y/Z position and rotation, e.g. 6 on the root only, 6 on every joint, 3 in ZXY on some joints
and ZYX on others), namespaced joint names (``mixamorig:Hips``), ``End Site`` leaves (kept out
of the joint list, their offsets are not needed for FK of the joints), any ``Frame Time``,
tabs or spaces, blank lines, Windows line endings.

Conventions (the BVH ones, as bvhio reads them): a joint's local rotation is the product of its
rotation channels in the order they are listed (``Zrotation Xrotation Yrotation``: R = Rz Rx Ry),
angles in degrees; its local translation is its OFFSET, except along the axes it has position
channels for, where the channel's value is the translation (exporters that key positions on every
joint write the whole translation there); world pose = parent world pose * local pose. Units are
the file's (no scaling).
``tests/test_bvh.py`` checks the forward kinematics against bvhio.

:func:`gmr_bodies` turns a motion into HumanFrame arrays (the 23 :data:`GMR_BODIES`, Z-up metres)
through a :class:`SkeletonMap` (which joint is which body, the file's unit), normalised to the Axis
Studio convention that the IK configs' rotation offsets are written for: every body frame equals
the world frame when the performer stands in a T-pose with straight legs, facing +Z (BVH, Y-up).
A BVH's zero pose has every joint frame equal to the world frame too, but its *shape* is the
exporter's: CMU's spreads the legs by ~20 deg, others droop the arms. So each body gets the
smallest rotation that turns its bone, as drawn in the zero pose, onto its T-pose direction (up
for the spine and neck, +-X for the arms, down for the legs; hands, feet, toes and head follow
their parent bone) and its frame is rotated by it: ``R_body = R_world @ R_rest``. Then GMR's
conversion (as capture does for Axis Studio): ``p' = C p * unit``, ``R' = C R``,
C = [[1,0,0],[0,0,-1],[0,1,0]].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX

_AXES = {"X": 0, "Y": 1, "Z": 2}


class BvhError(ValueError):
    """The file is not a BVH this reader understands; the message says where and why."""


@dataclass(frozen=True)
class BvhJoint:
    name: str
    parent: int  # index into the joint list, -1 for the root
    offset: tuple[float, float, float]
    channels: tuple[str, ...]  # e.g. ("Xposition", "Yposition", "Zposition", "Zrotation", ...)

    @property
    def short_name(self) -> str:
        """The name without a namespace prefix (``mixamorig:Hips`` -> ``Hips``)."""
        return self.name.rsplit(":", 1)[-1]


@dataclass
class BvhMotion:
    joints: tuple[BvhJoint, ...]
    frame_time: float  # s
    values: np.ndarray  # (frames, channels), in the joints' channel order
    source: str = ""

    @property
    def fps(self) -> float:
        return 1.0 / self.frame_time

    @property
    def frames(self) -> int:
        return len(self.values)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    def index(self, name: str) -> int:
        """Joint index by full name or by name without namespace; KeyError if absent."""
        for i, j in enumerate(self.joints):
            if j.name == name or j.short_name == name:
                return i
        raise KeyError(name)

    def find(self, name: str) -> int | None:
        try:
            return self.index(name)
        except KeyError:
            return None

    def slice(self, start: int, stop: int | None = None) -> BvhMotion:
        return BvhMotion(self.joints, self.frame_time, self.values[start:stop].copy(), self.source)

    def local_poses(self) -> tuple[np.ndarray, np.ndarray]:
        """Local translations (F, J, 3) and rotations (F, J, 4, w x y z) per frame."""
        n_frames, n_joints = self.frames, len(self.joints)
        trans = np.broadcast_to(np.array([j.offset for j in self.joints]), (n_frames, n_joints, 3)).copy()
        rots = np.zeros((n_frames, n_joints, 4))
        rots[..., 0] = 1.0
        col = 0
        for k, joint in enumerate(self.joints):
            for name in joint.channels:
                axis = _AXES[name[0]]
                v = self.values[:, col]
                if name.endswith("position"):
                    trans[:, k, axis] = v
                else:
                    half = np.radians(v) * 0.5
                    q = np.zeros((n_frames, 4))
                    q[:, 0] = np.cos(half)
                    q[:, 1 + axis] = np.sin(half)
                    rots[:, k] = Q.multiply(rots[:, k], q)
                col += 1
        return trans, rots

    def forward_kinematics(self) -> tuple[np.ndarray, np.ndarray]:
        """World positions (F, J, 3) in file units and rotations (F, J, 4, w x y z)."""
        trans, rots = self.local_poses()
        pos = np.empty_like(trans)
        quat = np.empty_like(rots)
        for k, joint in enumerate(self.joints):  # parents come first in a BVH
            p = joint.parent
            if p < 0:
                pos[:, k] = trans[:, k]
                quat[:, k] = rots[:, k]
            else:
                pos[:, k] = pos[:, p] + Q.rotate(quat[:, p], trans[:, k])
                quat[:, k] = Q.multiply(quat[:, p], rots[:, k])
        return pos, quat


def _tokens(text: str) -> list[tuple[int, list[str]]]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if words:
            out.append((number, words))
    return out


class _Hierarchy:
    """The HIERARCHY section, read one line at a time: joints, their offsets and channels."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.joints: list[BvhJoint] = []
        self.stack: list[int] = []  # open joints; -2 marks an End Site
        self.pending: dict[str, object] | None = None

    def read(self, number: int, words: list[str]) -> None:
        where = f"{self.source}: line {number}"
        key = words[0].upper()
        if key in ("ROOT", "JOINT"):
            self._joint(where, key, words)
        elif key == "END":
            self.pending = {"end": True}
        elif key == "{":
            self._open(where)
        elif key == "}":
            if not self.stack:
                raise BvhError(f"{where}: unbalanced '}}'")
            self.stack.pop()
        elif key == "OFFSET":
            self._offset(where, words)
        elif key == "CHANNELS":
            self._channels(where, words)
        else:
            raise BvhError(f"{where}: unexpected {words[0]!r} in the hierarchy")

    def finish(self) -> list[BvhJoint]:
        if self.stack:
            raise BvhError(f"{self.source}: hierarchy not closed (missing '}}')")
        if not self.joints:
            raise BvhError(f"{self.source}: no joints")
        return self.joints

    def _joint(self, where: str, key: str, words: list[str]) -> None:
        if len(words) < 2:
            raise BvhError(f"{where}: {words[0]} without a name")
        if key == "ROOT" and (self.joints and self.stack):
            raise BvhError(f"{where}: ROOT inside another joint")
        parent = next((s for s in reversed(self.stack) if s >= 0), -1)
        if key == "JOINT" and parent < 0:
            raise BvhError(f"{where}: JOINT outside any ROOT")
        self.pending = {"name": " ".join(words[1:]), "parent": parent}

    def _open(self, where: str) -> None:
        if self.pending is None:
            raise BvhError(f"{where}: '{{' without a joint")
        if self.pending.get("end"):
            self.stack.append(-2)
        else:
            name, parent = str(self.pending["name"]), int(str(self.pending["parent"]))
            self.joints.append(BvhJoint(name, parent, (0.0, 0.0, 0.0), ()))
            self.stack.append(len(self.joints) - 1)
        self.pending = None

    def _offset(self, where: str, words: list[str]) -> None:
        if len(words) != 4:
            raise BvhError(f"{where}: OFFSET needs 3 numbers")
        try:
            x, y, z = (float(w) for w in words[1:])
        except ValueError:
            raise BvhError(f"{where}: OFFSET needs 3 numbers, got {' '.join(words[1:])}") from None
        if self.stack and self.stack[-1] >= 0:  # an End Site's offset is not kept
            j = self.joints[self.stack[-1]]
            self.joints[self.stack[-1]] = BvhJoint(j.name, j.parent, (x, y, z), j.channels)

    def _channels(self, where: str, words: list[str]) -> None:
        if not self.stack or self.stack[-1] < 0:
            raise BvhError(f"{where}: CHANNELS outside a joint")
        try:
            count = int(words[1])
        except (IndexError, ValueError):
            raise BvhError(f"{where}: CHANNELS needs a count") from None
        names = tuple(words[2:])
        if len(names) != count:
            raise BvhError(f"{where}: CHANNELS {count} lists {len(names)} channels")
        for c in names:
            if len(c) != 9 or c[0] not in _AXES or c[1:] not in ("position", "rotation"):
                raise BvhError(f"{where}: unknown channel {c!r} (expected Xposition ... Zrotation)")
        j = self.joints[self.stack[-1]]
        self.joints[self.stack[-1]] = BvhJoint(j.name, j.parent, j.offset, names)


def _motion(lines: list[tuple[int, list[str]]], n_channels: int, source: str) -> tuple[float, np.ndarray]:
    """The MOTION section after its keyword: (frame time, values of shape (frames, channels))."""
    try:
        (n1, w1), (n2, w2) = lines[0], lines[1]
    except (IndexError, ValueError):
        raise BvhError(f"{source}: MOTION without Frames / Frame Time") from None
    try:
        if w1[0].lower() != "frames:" or [w.lower() for w in w2[:2]] != ["frame", "time:"]:
            raise ValueError
        n_frames, frame_time = int(w1[1]), float(w2[2])
    except (ValueError, IndexError):
        raise BvhError(f"{source}: line {n1}-{n2}: expected 'Frames: N' and 'Frame Time: T'") from None
    if not frame_time > 0:
        raise BvhError(f"{source}: line {n2}: Frame Time must be > 0, got {frame_time}")
    rows = lines[2:]
    if len(rows) < n_frames:
        raise BvhError(f"{source}: Frames: {n_frames} but {len(rows)} frame lines (file truncated?)")
    rows = rows[:n_frames]
    for number, words in rows:
        if len(words) != n_channels:
            raise BvhError(f"{source}: line {number}: {len(words)} values, the hierarchy has {n_channels} channels")
    try:
        values = np.array([words for _, words in rows], dtype=np.float64).reshape(n_frames, n_channels)
    except ValueError:
        bad = next(n for n, w in rows if not _all_numbers(w))
        raise BvhError(f"{source}: line {bad}: a value is not a number") from None
    if not np.all(np.isfinite(values)):
        raise BvhError(f"{source}: non-finite values in MOTION")
    if n_frames == 0:
        raise BvhError(f"{source}: no frames")
    return frame_time, values


def parse_bvh(text: str, source: str = "BVH") -> BvhMotion:
    """Parse BVH text; raises :class:`BvhError` naming the line of the first problem."""
    lines = _tokens(text)
    if not lines or lines[0][1][0].upper() != "HIERARCHY":
        raise BvhError(f"{source}: not a BVH file (it does not start with HIERARCHY)")
    hierarchy = _Hierarchy(source)
    for k, (number, words) in enumerate(lines[1:], start=1):
        if words[0].upper() == "MOTION":
            joints = hierarchy.finish()
            frame_time, values = _motion(lines[k + 1:], sum(len(j.channels) for j in joints), source)
            return BvhMotion(tuple(joints), frame_time, values, source)
        hierarchy.read(number, words)
    hierarchy.finish()
    raise BvhError(f"{source}: no MOTION section")


def _all_numbers(words: list[str]) -> bool:
    try:
        [float(w) for w in words]
    except ValueError:
        return False
    return True


def load_bvh(path: str | Path) -> BvhMotion:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BvhError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_bvh(text, str(path))


def format_bvh(motion: BvhMotion, decimals: int = 4) -> str:
    """BVH text of ``motion`` (tabs, End Sites omitted: a leaf gets a zero-length End Site)."""
    out = ["HIERARCHY"]
    children: dict[int, list[int]] = {}
    for k, j in enumerate(motion.joints):
        children.setdefault(j.parent, []).append(k)

    def emit(k: int, depth: int) -> None:
        j = motion.joints[k]
        pad = "\t" * depth
        out.append(f"{pad}{'ROOT' if j.parent < 0 else 'JOINT'} {j.name}")
        out.append(f"{pad}{{")
        out.append(f"{pad}\tOFFSET " + " ".join(f"{v:.{decimals}f}" for v in j.offset))
        if j.channels:
            out.append(f"{pad}\tCHANNELS {len(j.channels)} " + " ".join(j.channels))
        kids = children.get(k, [])
        for c in kids:
            emit(c, depth + 1)
        if not kids:
            out.extend([f"{pad}\tEnd Site", f"{pad}\t{{", f"{pad}\t\tOFFSET 0 0 0", f"{pad}\t}}"])
        out.append(f"{pad}}}")

    for root in children.get(-1, []):
        emit(root, 0)
    out += ["MOTION", f"Frames: {motion.frames}", f"Frame Time: {motion.frame_time:.7g}"]
    out += [" ".join(f"{v:.{decimals}f}" for v in row) for row in motion.values]
    return "\n".join(out) + "\n"


# -- the 23 GMR bodies ---------------------------------------------------------------------------

# GMR's BVH loader's conversion (and capture's): Y-up BVH world -> Z-up world.
Y_UP_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
_C_QUAT = np.array([np.sqrt(0.5), np.sqrt(0.5), 0.0, 0.0])  # quaternion of Y_UP_TO_Z_UP

# Each body's parent in the GMR body tree: an unmapped body takes its parent's pose.
GMR_PARENT: dict[str, str | None] = {
    "Hips": None, "Spine": "Hips", "Spine1": "Spine", "Spine2": "Spine1", "Spine3": "Spine2",
    "Neck": "Spine3", "Head": "Neck",
    "LeftShoulder": "Spine3", "LeftArm": "LeftShoulder", "LeftForeArm": "LeftArm", "LeftHand": "LeftForeArm",
    "RightShoulder": "Spine3", "RightArm": "RightShoulder", "RightForeArm": "RightArm", "RightHand": "RightForeArm",
    "LeftUpLeg": "Hips", "LeftLeg": "LeftUpLeg", "LeftFoot": "LeftLeg", "LeftToe": "LeftFoot",
    "RightUpLeg": "Hips", "RightLeg": "RightUpLeg", "RightFoot": "RightLeg", "RightToe": "RightFoot",
}
# Bone direction in the T-pose (BVH frame: Y up, facing +Z, left = +X), measured towards the
# first mapped body of the list. Bodies not listed keep their parent's rest correction.
_UP, _LEFT, _RIGHT, _DOWN = (0.0, 1.0, 0.0), (1.0, 0.0, 0.0), (-1.0, 0.0, 0.0), (0.0, -1.0, 0.0)
T_POSE_BONES: dict[str, tuple[tuple[float, float, float], tuple[str, ...]]] = {
    "Spine": (_UP, ("Spine1", "Spine2", "Spine3", "Neck")),
    "Spine1": (_UP, ("Spine2", "Spine3", "Neck")),
    "Spine2": (_UP, ("Spine3", "Neck")),
    "Spine3": (_UP, ("Neck",)),
    "Neck": (_UP, ("Head",)),
    "LeftShoulder": (_LEFT, ("LeftArm",)),
    "LeftArm": (_LEFT, ("LeftForeArm",)),
    "LeftForeArm": (_LEFT, ("LeftHand",)),
    "RightShoulder": (_RIGHT, ("RightArm",)),
    "RightArm": (_RIGHT, ("RightForeArm",)),
    "RightForeArm": (_RIGHT, ("RightHand",)),
    "LeftUpLeg": (_DOWN, ("LeftLeg",)),
    "LeftLeg": (_DOWN, ("LeftFoot",)),
    "RightUpLeg": (_DOWN, ("RightLeg",)),
    "RightLeg": (_DOWN, ("RightFoot",)),
}


@dataclass(frozen=True)
class SkeletonMap:
    """Which BVH joint carries each GMR body, and the file's length unit."""

    name: str
    joints: Mapping[str, str]  # GMR body -> BVH joint name (with or without namespace)
    unit_m: float  # metres per file unit

    def missing(self, motion: BvhMotion, required: tuple[str, ...] = ()) -> list[str]:
        """The BVH joint names of ``required`` bodies (default: all mapped) the file lacks."""
        bodies = required or tuple(self.joints)
        return [self.joints[b] for b in bodies if b in self.joints and motion.find(self.joints[b]) is None]


def _shortest_arc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Unit quaternion of the smallest rotation taking direction a onto direction b."""
    a = a / np.linalg.norm(a)
    b = b / np.linalg.norm(b)
    w = 1.0 + float(a @ b)
    if w < 1e-9:  # opposite: any perpendicular axis
        axis = np.cross(a, (1.0, 0.0, 0.0) if abs(a[0]) < 0.9 else (0.0, 1.0, 0.0))
        return np.concatenate(([0.0], axis / np.linalg.norm(axis)))
    q = np.concatenate(([w], np.cross(a, b)))
    return q / np.linalg.norm(q)


def rest_corrections(motion: BvhMotion, skeleton: SkeletonMap) -> np.ndarray:
    """(23, 4) per GMR body: the rotation from its zero-pose bone to its T-pose bone (see module doc)."""
    zero = BvhMotion(motion.joints, motion.frame_time, np.zeros((1, motion.values.shape[1])))
    pos, _ = zero.forward_kinematics()
    index = {b: motion.find(n) for b, n in skeleton.joints.items()}
    out = np.tile([1.0, 0.0, 0.0, 0.0], (len(GMR_BODIES), 1))
    for k, body in enumerate(GMR_BODIES):  # parents come first
        parent = GMR_PARENT[body]
        if parent is not None:
            out[k] = out[GMR_BODY_INDEX[parent]]
        spec = T_POSE_BONES.get(body)
        if spec is None or index.get(body) is None:
            continue
        direction, towards = spec
        child = next((index[c] for c in towards if index.get(c) is not None), None)
        if child is None:
            continue
        bone = pos[0, child] - pos[0, index[body]]
        if np.linalg.norm(bone) > 1e-9:
            out[k] = _shortest_arc(np.asarray(direction), bone)
    return out


def gmr_bodies(motion: BvhMotion, skeleton: SkeletonMap) -> tuple[np.ndarray, np.ndarray]:
    """HumanFrame arrays for every frame: positions (F, 23, 3) m and quaternions (F, 23, 4), Z-up.

    Raises :class:`BvhError` if the skeleton's hip joint is missing; other unmapped or missing
    bodies take their GMR parent's pose (as capture's stand-ins do).
    """
    root = skeleton.joints.get("Hips")
    if root is None or motion.find(root) is None:
        raise BvhError(f"{motion.source}: no hip joint {root!r} (skeleton {skeleton.name})")
    pos, quat = motion.forward_kinematics()
    rest = rest_corrections(motion, skeleton)
    source = np.empty(len(GMR_BODIES), dtype=np.int64)
    for k, body in enumerate(GMR_BODIES):
        j = motion.find(skeleton.joints[body]) if body in skeleton.joints else None
        parent = GMR_PARENT[body]
        source[k] = j if j is not None else source[GMR_BODY_INDEX[parent]]  # type: ignore[index]
    positions = (pos[:, source] @ Y_UP_TO_Z_UP.T) * skeleton.unit_m
    quaternions = Q.multiply(_C_QUAT, Q.multiply(quat[:, source], rest))
    untwist_upper_arms(quaternions)
    quaternions *= np.where(quaternions[..., :1] < 0, -1.0, 1.0)
    return positions, quaternions


# The elbow's hinge axis in the upper arm's frame in the T-pose convention (palms down: the
# forearm swings forward about the vertical).
ELBOW_AXIS = {"Left": np.array([0.0, -1.0, 0.0]), "Right": np.array([0.0, 1.0, 0.0])}
ELBOW_BENT_RAD = 0.3  # frames with the elbow bent more than this show its axis


def untwist_upper_arms(quaternions: np.ndarray) -> None:
    """Fix each upper arm's twist about its own axis, in place, from the motion itself.

    A zero pose with the arms down (CMU's 3dsMax conversion) or a skeleton whose humerus frame is
    turned about the bone (CMU's, by ~30 deg) leaves the twist of the T-pose frame undefined, and a
    twisted upper-arm target makes the robot bend its elbow in the wrong plane (hands 10+ cm off).
    The elbow is a hinge: its mean axis over the frames where it is bent, seen from the upper
    arm, must be :data:`ELBOW_AXIS`; the arm's frames (upper arm, forearm, hand: they share the
    rest convention) are turned about the bone (X) until it is.
    Takes without a bent elbow are left alone.
    """
    for side, want in ELBOW_AXIS.items():
        arm = quaternions[:, GMR_BODY_INDEX[f"{side}Arm"]]
        rel = Q.log(Q.multiply(Q.conjugate(arm), quaternions[:, GMR_BODY_INDEX[f"{side}ForeArm"]]))
        angle = np.linalg.norm(rel, axis=1)
        bent = angle > ELBOW_BENT_RAD
        if bent.sum() < 3:
            continue
        axis = np.sum(rel[bent] / angle[bent, None], axis=0)
        if np.hypot(axis[1], axis[2]) < 1e-6:
            continue
        twist = np.arctan2(axis[2], axis[1]) - np.arctan2(want[2], want[1])  # from want to axis, about X
        turn = Q.from_axis_angle(np.array([1.0, 0.0, 0.0]), twist)
        for body in ("Arm", "ForeArm", "Hand"):  # one rest convention: the whole arm turns
            k = GMR_BODY_INDEX[side + body]
            quaternions[:, k] = Q.multiply(quaternions[:, k], turn)


# Axis Studio's default skeleton (the IK configs' reference human, 1.75 m): hips 83.74 cm above the
# ankles in the T-pose.
HIP_ABOVE_ANKLE_PER_HEIGHT = 0.8374 / 1.75


def estimate_height(positions: np.ndarray) -> float:
    """A performer's height (m) from HumanFrame positions (F, 23, 3): the hips' height above the
    lower ankle while standing (95th percentile over the take), scaled like the reference human.

    Checked against each Axis skeleton's own offsets (tests/test_height_estimate.py): Axis Studio's
    and Perception Neuron's default skeletons (legs 41.87 + 41.87 cm in both) give 1.75 m, and a
    take whose offsets are k times larger gives k times that; so an estimate far from a person's
    height comes from the take's own bone lengths, not from the skeleton it uses."""
    hips = positions[:, GMR_BODY_INDEX["Hips"], 2]
    ankles = np.minimum(positions[:, GMR_BODY_INDEX["LeftFoot"], 2], positions[:, GMR_BODY_INDEX["RightFoot"], 2])
    return float(np.percentile(hips - ankles, 95)) / HIP_ABOVE_ANKLE_PER_HEIGHT


# A take whose standing estimate is below this share of its skeleton's leg measure never stands
# straight (crouched, kneeling, lying, a clip cut from the middle of a crouch).
STANDING_SHARE = 0.85


def skeleton_height(motion: BvhMotion, skeleton: SkeletonMap) -> float | None:
    """A performer's height (m) from the skeleton's bone lengths (the zero pose: thigh + shin, the
    longer leg), scaled like the reference human; None without both legs mapped. Blind to what
    the take does, unlike :func:`estimate_height`."""
    zero = BvhMotion(motion.joints, motion.frame_time, np.zeros((1, motion.values.shape[1])))
    pos, _ = zero.forward_kinematics()
    legs = []
    for side in ("Left", "Right"):
        ids = [motion.find(skeleton.joints.get(side + part, "")) for part in ("UpLeg", "Leg", "Foot")]
        if any(i is None for i in ids):
            continue
        hip, knee, ankle = (pos[0, i] for i in ids)
        legs.append(float(np.linalg.norm(knee - hip) + np.linalg.norm(ankle - knee)) * skeleton.unit_m)
    return max(legs) / HIP_ABOVE_ANKLE_PER_HEIGHT if legs and max(legs) > 0 else None


def take_height(motion: BvhMotion, skeleton: SkeletonMap, positions: np.ndarray) -> tuple[float, str]:
    """The performer's height and where it came from: the take standing (:func:`estimate_height`),
    unless that is below ``STANDING_SHARE`` of the skeleton's leg measure, i.e. the take never
    stands straight; then the skeleton's (:func:`skeleton_height`). A clip cut from a deep crouch
    gave 0.98 m from the motion (1.79 m from its whole take), and every target too short: 170 mm
    mean error instead of 82."""
    moving = estimate_height(positions)
    bones = skeleton_height(motion, skeleton)
    if bones is not None and moving < STANDING_SHARE * bones:
        return bones, "skeleton"
    return moving, "motion"
