"""Hand retargeting: the HumanFrame's hand bodies -> the robot hand's joints (Dex3-1: 7 a hand).

Vector retargeting, as dex-retargeting's "vector" optimiser and DexPilot do, solved here by a few
projected Gauss-Newton steps on the robot's own MuJoCo model (the build's, ``g1_with_hands.xml``)
rather than by dex-retargeting, which wants a URDF of the hand, pinocchio, nlopt and pytransform3d
(docs/retarget.md, "Hands").

Per hand and frame:

1. Each hand gets a frame from its own keypoints, the same rule on both sides of the mapping:
   origin at the wrist (the human carpus, the robot's palm link), x towards the mean of the index
   and middle fingers' bases (their MCP joints), y from the middle finger's base towards the
   index's, z = x x y. So no source convention (Axis T-pose, MVN N-pose) enters: only positions.
2. Each robot finger follows one human finger (the description's ``[hands] fingers``): its tip
   target, in the palm frame, is the robot finger's base plus the human finger's base-to-tip
   vector, scaled by the ratio of the two fingers' lengths (robot straight, human along its bones).
   The human tip is the distal phalanx's origin continued along the distal bone by
   ``DISTAL_SHARE`` of the bone before it (MVN and Axis send joints, not tips).
3. When the human thumb tip is within ``pinch_m`` of a finger's tip, the robot's thumb-to-finger
   vector is pulled to the human's (scaled), more the closer they are (DexPilot's pinch term): a
   pinch closes on the robot even where its thumb cannot reach the vectors of step 2.
4. ``iterations`` damped Gauss-Newton steps from the last frame's solution, each a box-constrained
   QP (daqp, as the body's IK): within the joints' ranges (so is every output) and ``max_step`` of
   where it starts, with a small pull to the last solution.
5. Smoothing: a causal binomial filter [1, 2, 1] / 4 over the last three solutions: exactly one
   frame of delay at every frequency (linear phase), frame-to-frame alternation removed completely,
   every output a convex combination of in-range solutions (so in range). Under ``--filter
   smooth3`` the service smooths the hands with the body instead (centred, the body's one frame).

A frame without hand bodies (an Xsens take without gloves, a source without finger bones) puts
the hands at rest (every joint at 0, or the nearest end of its range) and restarts the filter.
"""

from __future__ import annotations

from dataclasses import dataclass

import daqp
import mujoco
import numpy as np

from mocapline.core import quat
from mocapline.core.bodies import HAND_BONES, N_HAND_BONES
from mocapline.core.frames import HumanFrame
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription

DISTAL_SHARE = 0.8  # a distal phalanx's length over the bone before it (the thumb's: its proximal)
SIDES = ("Left", "Right")
_BONE = {name: i for i, name in enumerate(HAND_BONES)}
_CYCLE1, _CYCLE2 = [1, 2, 0], [2, 0, 1]  # a x b = a[c1] b[c2] - a[c2] b[c1]


@dataclass(frozen=True)
class HandOptions:
    iterations: int = 3
    damping: float = 1e-5  # LM damping (m^2 per rad^2)
    pull: float = 1e-5  # towards the last solution (m^2 per rad^2): conditioning at a singular pose
    pinch_m: float = 0.04  # human thumb-to-finger tip distance below which the pinch term acts
    pinch_weight: float = 3.0  # at zero distance, relative to a tip's own
    max_step: float = 0.6  # rad a joint moves in one step (a trust region: the tips' cost is far from quadratic)
    smooth: bool = True


def human_finger_points(finger: str) -> tuple[int, int, int]:
    """The hand-body indices (within one hand) of a human finger's base joint, the joint before its
    last, and its last (thumb: MC, PP, DP; fingers: PP, MP, DP)."""
    if finger == "First":
        return _BONE["FirstMC"], _BONE["FirstPP"], _BONE["FirstDP"]
    return _BONE[f"{finger}PP"], _BONE[f"{finger}MP"], _BONE[f"{finger}DP"]


def hand_frame(origin: np.ndarray, index_base: np.ndarray, middle_base: np.ndarray) -> np.ndarray:
    """The palm frame's axes as columns (step 1 of the module's docstring); (..., 3) -> (..., 3, 3)."""
    x = 0.5 * (index_base + middle_base) - origin
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    y = index_base - middle_base
    y = y - x * np.sum(x * y, axis=-1, keepdims=True)
    y = y / np.linalg.norm(y, axis=-1, keepdims=True)
    z = x[..., _CYCLE1] * y[..., _CYCLE2] - x[..., _CYCLE2] * y[..., _CYCLE1]
    return np.stack([x, y, z], axis=-1)


@dataclass
class HumanHands:
    """Both hands' followed fingers, each in its own palm frame (m): base, tip, length (2, k, ...)."""

    bases: np.ndarray
    tips: np.ndarray
    lengths: np.ndarray


class HumanKeypoints:
    """Reads the followed fingers' keypoints out of a HumanFrame's 40 hand bodies."""

    def __init__(self, fingers: tuple[str, ...]) -> None:
        points = np.array([human_finger_points(f) for f in fingers])  # (k, 3): base, before, last
        sides = N_HAND_BONES * np.arange(2)[:, None]
        self.base, self.before, self.last = (points[:, i][None] + sides for i in range(3))  # (2, k)
        self.frame_points = np.array([_BONE["Carpus"], _BONE["SecondPP"], _BONE["ThirdPP"]])[None] + sides

    def hands(self, positions: np.ndarray, quaternions: np.ndarray) -> HumanHands:
        last = positions[self.last]
        distal = last - positions[self.before]  # (2, k, 3)
        # the distal bone's direction: the bone before it turned by the last joint (R_last R_before^T)
        along = quat.rotate(quat.multiply(quaternions[self.last], quat.conjugate(quaternions[self.before])), distal)
        tips = last + DISTAL_SHARE * along
        origin, index, middle = (positions[self.frame_points[:, i]] for i in range(3))  # (2, 3)
        frame = hand_frame(origin, index, middle)  # (2, 3, 3)
        base = positions[self.base]
        lengths = (np.linalg.norm(positions[self.before] - base, axis=-1)
                   + (1 + DISTAL_SHARE) * np.linalg.norm(distal, axis=-1))
        to_hand = np.einsum("sji,skj->ski", frame, np.concatenate([base, tips], axis=1) - origin[:, None])
        k = base.shape[1]
        return HumanHands(to_hand[:, :k], to_hand[:, k:], lengths)


class HandModel:
    """The robot's hands from its description and model: joints, ranges, tips, palm frames."""

    def __init__(self, robot: RobotDescription, model: mujoco.MjModel | None = None) -> None:
        hands = robot.hands
        if hands is None or not hands.fingers:
            raise ValueError(f"robot model {robot.name!r} has no hands to retarget ([hands] fingers)")
        self.robot = robot
        self.fingers = hands.fingers
        self.model = model if model is not None else robot_model.load_reference_model(robot)
        m = self.model
        self.data = mujoco.MjData(m)
        self.data.qpos[:] = robot_model.neutral_qpos(m)
        self.joint_names = hands.left + hands.right
        self.n_left = len(hands.left)
        self.joint_ids = robot_model.joint_ids(m, self.joint_names)
        self.qpos_adr = m.jnt_qposadr[self.joint_ids]
        ranges = robot_model.joint_ranges(m, self.joint_names)
        self.lower, self.upper = ranges[:, 0].copy(), ranges[:, 1].copy()
        self.rest = np.clip(0.0, self.lower, self.upper)
        self.tip_bodies = np.array([m.body(b).id for b in hands.left_tips + hands.right_tips])
        k = len(self.fingers)
        self.n_tips = 2 * k
        self.tip_side = np.repeat([0, 1], k)
        self.palm_bodies = np.array([self._palm(hands.left_tips), self._palm(hands.right_tips)])
        self._set(self.rest)
        self.tip_offsets = np.array([self._tip_offset(b) for b in self.tip_bodies])
        # which joints move which tip
        self.mask = np.zeros((self.n_tips, len(self.joint_ids)))
        for t, body in enumerate(self.tip_bodies):
            chain = self._chain(int(body))
            for j, jid in enumerate(self.joint_ids):
                self.mask[t, j] = float(m.jnt_bodyid[jid] in chain)
        self._pair_tip, self._pair_joint = (np.array(a) for a in np.nonzero(self.mask))
        self._jac = np.zeros((self.n_tips, 3, len(self.joint_ids)))
        # the palm frames at rest: the frame's axes in the palm link's frame, each finger's base and
        # straight length in the palm frame
        self.frames = np.empty((2, 3, 3))
        self.bases = np.empty((self.n_tips, 3))
        self.lengths = np.empty(self.n_tips)
        tips = self.tips_in_palms()
        for side, tip_names in enumerate((hands.left_tips, hands.right_tips)):
            palm = self.palm_bodies[side]
            rows = slice(side * k, (side + 1) * k)
            base_bodies = [self._base(m.body(b).id, palm) for b in tip_names]
            local = np.array([self._in_palm(side, self.data.xpos[b]) for b in base_bodies])
            frame = hand_frame(np.zeros(3), local[self.fingers.index("Second")], local[self.fingers.index("Third")])
            self.frames[side] = frame
            self.bases[rows] = local @ frame
            for i, (base, tip) in enumerate(zip(base_bodies, tips[rows], strict=True)):
                links = self._chain(m.body(tip_names[i]).id)
                links = links[: links.index(base) + 1][::-1]  # base .. tip link
                points = [self._in_palm(side, self.data.xpos[x]) for x in links] + [tip]
                self.lengths[side * k + i] = float(np.linalg.norm(np.diff(points, axis=0), axis=1).sum())
        palm_rot = self.data.xmat[self.palm_bodies].reshape(2, 3, 3)
        self._palm_frame = (palm_rot @ self.frames)[self.tip_side]  # world <- hand frame, per tip
        self._palm_pos = self.data.xpos[self.palm_bodies][self.tip_side].copy()

    def _palm(self, tips: tuple[str, ...]) -> int:
        """The body all the hand's fingers hang from (the nearest common ancestor of the tips)."""
        chains = [self._chain(self.model.body(t).id) for t in tips]
        common = set(chains[0]).intersection(*chains[1:])
        return max(common)  # bodies come after their parents: the deepest common one

    def _chain(self, body: int) -> list[int]:
        out = []
        while body > 0:
            out.append(body)
            body = int(self.model.body_parentid[body])
        return out

    def _base(self, tip: int, palm: int) -> int:
        """The finger's first link: the tip's ancestor whose parent is the palm."""
        body = tip
        while int(self.model.body_parentid[body]) != palm:
            body = int(self.model.body_parentid[body])
        return body

    def _tip_offset(self, body: int) -> np.ndarray:
        """The fingertip in its link's frame: along the link's direction from its joint (from the
        parent's origin to its own at rest), as far as its geometry reaches."""
        m, d = self.model, self.data
        parent = int(m.body_parentid[body])
        direction = d.xmat[body].reshape(3, 3).T @ (d.xpos[body] - d.xpos[parent])
        direction /= np.linalg.norm(direction)
        reach = 0.0
        for g in range(m.ngeom):
            if m.geom_bodyid[g] != body:
                continue
            rot = quat.to_matrix(m.geom_quat[g])
            if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH:
                mesh = m.geom_dataid[g]
                start, count = m.mesh_vertadr[mesh], m.mesh_vertnum[mesh]
                verts = m.mesh_vert[start:start + count] @ rot.T + m.geom_pos[g]
            else:
                verts = (m.geom_pos[g] + m.geom_rbound[g] * direction)[None]
            reach = max(reach, float(np.max(verts @ direction)))
        if reach <= 0.0:
            raise ValueError(f"hand tip link {m.body(body).name!r} has no geometry along its finger")
        return reach * direction

    def _set(self, q: np.ndarray) -> None:
        self.data.qpos[self.qpos_adr] = q
        mujoco.mj_kinematics(self.model, self.data)

    def _in_palm(self, side: int, world: np.ndarray) -> np.ndarray:
        palm = self.palm_bodies[side]
        return self.data.xmat[palm].reshape(3, 3).T @ (world - self.data.xpos[palm])

    def tips_in_palms(self) -> np.ndarray:
        """(n_tips, 3) the tips in their palm link's frame at the pose last set."""
        d = self.data
        rot = d.xmat[self.tip_bodies].reshape(-1, 3, 3)
        world = d.xpos[self.tip_bodies] + np.einsum("tij,tj->ti", rot, self.tip_offsets)
        palm_rot = d.xmat[self.palm_bodies].reshape(2, 3, 3)[self.tip_side]
        palm_pos = d.xpos[self.palm_bodies][self.tip_side]
        return np.einsum("tji,tj->ti", palm_rot, world - palm_pos)

    def tips_and_jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World tips (n_tips, 3) and d tip / d q (n_tips, 3, n_joints) at ``q``. The body stays at
        its neutral pose, so the palms do not move: the solve works in the world frame, the
        targets put there once a frame (``to_world``)."""
        self._set(q)
        d = self.data
        rot = d.xmat[self.tip_bodies].reshape(-1, 3, 3)
        world = d.xpos[self.tip_bodies] + np.einsum("tij,tj->ti", rot, self.tip_offsets)
        axes = d.xaxis[self.joint_ids][self._pair_joint]
        arms = world[self._pair_tip] - d.xanchor[self.joint_ids][self._pair_joint]
        jac = self._jac
        jac[self._pair_tip, :, self._pair_joint] = (axes[:, _CYCLE1] * arms[:, _CYCLE2]
                                                    - axes[:, _CYCLE2] * arms[:, _CYCLE1])
        return world, jac

    def to_world(self, in_hand: np.ndarray) -> np.ndarray:
        """(n_tips, 3) points in their hand's palm frame -> world."""
        return self._palm_pos + np.einsum("tij,tj->ti", self._palm_frame, in_hand)

    def to_world_rotation(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), 3, 3) world <- palm frame of each tip row's hand."""
        return self._palm_frame[rows]


@dataclass
class HandTargets:
    """One frame's targets, world frame: every tip's, and the pinches' (thumb tip, finger tip,
    weight, the thumb-to-finger vector)."""

    tips: np.ndarray  # (n_tips, 3)
    pinch_thumb: np.ndarray  # (p,) tip rows
    pinch_finger: np.ndarray
    pinch_weight: np.ndarray
    pinch_gap: np.ndarray  # (p, 3)


class HandRetargeter:
    """One performer's hands: ``retarget(frame)`` -> the hand joints (left then right, the
    description's order), or the rest pose for a frame without hand bodies."""

    def __init__(self, hands: HandModel, options: HandOptions | None = None) -> None:
        self.hands = hands
        self.options = options or HandOptions()
        self.q = hands.rest.copy()
        self._history: list[np.ndarray] = []
        self.keypoints = HumanKeypoints(hands.fingers)
        n = len(hands.rest)
        self._diagonal = np.diag_indices(n)
        self._no_rows = np.zeros((0, n))
        self._sense = np.zeros(n, dtype=np.int32)
        k = len(hands.fingers)
        thumb = hands.fingers.index("First") if "First" in hands.fingers else None
        others = [f for f in range(k) if f != thumb]
        # (side, finger) of each possible pinch, and its tip rows
        self._pinch_fingers = np.array(others if thumb is not None else [], dtype=np.int64)
        self._thumb = thumb if thumb is not None else 0
        rows = np.arange(2)[:, None] * k
        self._pinch_thumb_rows = (rows + self._thumb + 0 * self._pinch_fingers[None]).ravel()
        self._pinch_finger_rows = (rows + self._pinch_fingers[None]).ravel()

    def reset(self) -> None:
        self.q = self.hands.rest.copy()
        self._history.clear()

    def targets(self, frame: HumanFrame) -> HandTargets:
        h, o = self.hands, self.options
        human = self.keypoints.hands(frame.finger_positions, frame.finger_quaternions)
        scale = h.lengths.reshape(2, -1) / human.lengths  # (2, k)
        in_hand = h.bases + ((human.tips - human.bases) * scale[..., None]).reshape(-1, 3)
        gaps = human.tips[:, self._thumb, None] - human.tips[:, self._pinch_fingers]  # (2, p, 3)
        closeness = 1.0 - np.linalg.norm(gaps, axis=-1).ravel() / o.pinch_m
        on = closeness > 0.0
        gap_scale = 0.5 * (scale[:, self._pinch_fingers] + scale[:, self._thumb, None]).ravel()
        gaps_world = np.einsum("pij,pj->pi", h.to_world_rotation(self._pinch_thumb_rows[on]),
                               gaps.reshape(-1, 3)[on] * gap_scale[on, None])
        return HandTargets(h.to_world(in_hand), self._pinch_thumb_rows[on], self._pinch_finger_rows[on],
                           o.pinch_weight * closeness[on], gaps_world)

    def solve(self, targets: HandTargets) -> np.ndarray:
        """Gauss-Newton steps from the last solution; each step is the box-constrained QP (daqp)
        within the joints' ranges and ``max_step`` of where it starts."""
        h, o = self.hands, self.options
        q = self.q.copy()
        pinches = len(targets.pinch_weight) > 0
        w2 = targets.pinch_weight ** 2
        for _ in range(o.iterations):
            tips, jac = h.tips_and_jacobian(q)
            hessian = np.einsum("tin,tim->nm", jac, jac)
            gradient = np.einsum("tin,ti->n", jac, tips - targets.tips)
            if pinches:
                jp = jac[targets.pinch_thumb] - jac[targets.pinch_finger]
                ep = tips[targets.pinch_thumb] - tips[targets.pinch_finger] - targets.pinch_gap
                hessian += np.einsum("p,pin,pim->nm", w2, jp, jp)
                gradient += np.einsum("p,pin,pi->n", w2, jp, ep)
            hessian[self._diagonal] += o.damping + o.pull
            gradient += o.pull * (q - self.q)
            upper = np.minimum(h.upper - q, o.max_step)
            lower = np.maximum(h.lower - q, -o.max_step)
            step, _, exitflag, _ = daqp.solve(hessian, gradient, self._no_rows, upper, lower, self._sense)
            if exitflag < 1:
                break  # keep the last pose (a QP without solution does not happen with these bounds)
            q = np.clip(q + step, h.lower, h.upper)
        return q

    def tip_error(self, q: np.ndarray, targets: HandTargets) -> np.ndarray:
        """(n_tips,) distance (m) of each robot tip at ``q`` from its target."""
        tips, _ = self.hands.tips_and_jacobian(q)
        return np.linalg.norm(tips - targets.tips, axis=1)

    def retarget(self, frame: HumanFrame) -> np.ndarray:
        if not frame.has_hands:
            self.reset()
            return self.hands.rest.copy()
        self.q = self.solve(self.targets(frame))
        if not self.options.smooth:
            return self.q.copy()
        self._history = [*self._history[-2:], self.q]
        a, b, c = ([self._history[0]] * (3 - len(self._history)) + self._history)[-3:]
        return 0.25 * a + 0.5 * b + 0.25 * c
