"""Feet on the ground: when a performer's foot carries weight, and the foot targets that follow.

A per-frame retargeter copies what the capture got wrong about the ground: a stance foot that
skates, hovers or sinks. This module knows when a human foot is in contact and moves the robot's
foot targets to match before the IK sees them:

- **Contact** (:class:`ContactDetector`, per foot): the human ankle within ``on_height`` of its
  stance floor and slower than ``on_speed`` horizontally enters contact; above ``off_height``
  (or faster than ``off_speed``, by default never: a foot sliding on the floor is the capture's
  skate) leaves it (hysteresis). Live it is causal: the speed is the backward difference, so it
  costs no frame of delay; what it costs is that a lift-off is seen only once the ankle has risen
  past ``off_height``. Offline (:func:`plan_contacts`) the speed is centred and contacts or gaps
  shorter than ``min_s`` are removed (look-ahead).
- **Floor** (:class:`FloorEstimate`): the human's stance floor, per take, from the take itself: a
  low percentile of the lower ankle's height (one foot stands whenever a person stands or walks).
  Offline over the whole take, live over a rolling window, recomputed a few times a second.
- **Targets** (:class:`Footing`): while a foot is in contact its robot foot target keeps the
  horizontal position it had at touchdown, sits at the robot's standing ankle height above the
  floor (z = 0) and is turned flat (the smallest rotation that takes its standing up axis to the
  world's; the yaw follows the performer, so a pivot turns the foot in place). Touchdown blends
  over ``touchdown_s``, lift-off over ``blend_s``. Offline (``set_plan`` with
  :func:`contact_holds`) the foot is held instead at the mean of its contact and blended onto it
  over the last ``approach_s`` of its swing, so it lands there. Every target of the body is
  shifted by one smoothed height ``lift`` so that the stance feet's raw targets reach the floor:
  the root's height then matches its legs. A stance foot, and a free one near the floor, weighs
  more in the IK (``stance_gain``: the root gives, not the foot). A target that would put a sole
  point below the floor is raised to it (smoothly near it: a kink is a jerk). With neither foot in
  contact (a hop, a jump) the whole body is lowered so that the lower sole stays within
  ``flight_cap`` of the floor: a robot that copies a flight floats (``math.inf`` keeps it, for
  clips that must jump).

Sites on a foot (an Xsens config's toes) move with it rigidly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription

FEET = ("LeftFoot", "RightFoot")  # the human bodies contact is detected on (the ankles)
FOOT_INDEX = np.array([GMR_BODY_INDEX[b] for b in FEET])


@dataclass
class FootingSettings:
    """Thresholds, chosen on the bundled takes (docs/retarget.md "Feet on the ground")."""

    on_height: float = 0.025  # m above the stance floor: a human ankle lower may carry weight
    off_height: float = 0.03
    on_speed: float = 1.0  # m/s horizontal (capture jitter alone reads 0.1-0.3 at 120 Hz)
    off_speed: float = math.inf  # speed alone does not end a contact (docs/retarget.md)
    blend_s: float = 0.15  # lift-off blend
    # s: the touchdown blend, shorter: the performer's ankle is within the contact height while it
    # lands, so a foot still blending there slides (0.15 s: the CMU walk's skate 2x, an outside
    # walk's 1.8x; the jerk up to 11 % lower)
    touchdown_s: float = 0.05
    # s: offline, with the holds known (contact_holds), a landing foot is blended onto its hold over
    # this long before its touchdown, so it lands there and does not slide to it while it stands
    approach_s: float = 0.15
    lift_s: float = 0.15  # time constant of the body's height shift
    min_s: float = 0.05  # offline: contacts and gaps shorter than this are removed
    plan_margin: float = 0.005  # m: offline, the contact heights are this much higher (plan_contacts)
    floor_percentile: float = 5.0
    floor_window_s: float = 10.0  # live: the floor from this many seconds of the take
    floor_every_s: float = 0.25  # live: how often it is recomputed
    clearance: float = 0.002  # m: stance soles this far above the floor (the IK stops short)
    stance_gain: float = 4.0  # a stance foot's IK position weight times this (the root gives, not the foot)
    stance_rotation_share: float = 0.3  # of that gain on its rotation weight (all of it: jerk above GMR's)
    weight_s: float = 0.05  # time constant of those weights
    soft: float = 0.01  # m: a sole point nearer the floor than this is pushed up smoothly (below it: fully)
    near: float = 0.03  # m: a foot's target this close to the floor weighs more, up to stance_gain
    # m: the solved robot is raised where the IK left a sole point under the floor (a deep crouch
    # whose legs cannot reach both the root's target and a flat foot), smoothly within this of it
    solved_soft: float = 0.002
    # m: with neither foot in contact (a hop, a jump) the body is lowered so that the lower sole
    # stays within this of the floor (a robot does not leave the ground); math.inf keeps the flight
    flight_cap: float = 0.03

    def validate(self) -> None:
        if not (0 < self.on_height <= self.off_height and 0 < self.on_speed <= self.off_speed):
            raise ValueError("footing: need 0 < on_height <= off_height and 0 < on_speed <= off_speed")
        if min(self.blend_s, self.touchdown_s, self.approach_s, self.lift_s, self.floor_window_s,
               self.floor_every_s) <= 0:
            raise ValueError("footing: blend_s, touchdown_s, approach_s, lift_s, floor_window_s and floor_every_s "
                             "must be > 0")


# -- the human side -------------------------------------------------------------------------------


def stance_floor(positions: np.ndarray, percentile: float = 5.0) -> float:
    """The ankles' stance height (m, world z) of a take, ``positions`` (F, 23, 3): a low percentile
    of the lower ankle's height over the frames."""
    lower = np.asarray(positions)[:, FOOT_INDEX, 2].min(axis=1)
    return float(np.percentile(lower, percentile))


class FloorEstimate:
    """The live stance floor: :func:`stance_floor` over a rolling window, recomputed every
    ``every`` frames (the first frame's lower ankle until then)."""

    def __init__(self, window: int, every: int, percentile: float) -> None:
        self.heights = np.zeros(max(1, window))
        self.every = max(1, every)
        self.percentile = percentile
        self.count = 0
        self.value: float | None = None

    def update(self, positions: np.ndarray) -> float:
        h = float(positions[FOOT_INDEX, 2].min())
        self.heights[self.count % len(self.heights)] = h
        self.count += 1
        if self.value is None or self.count % self.every == 0:
            self.value = float(np.percentile(self.heights[: min(self.count, len(self.heights))], self.percentile))
        return self.value


@dataclass
class ContactDetector:
    """One foot's contact state, with hysteresis."""

    settings: FootingSettings
    contact: bool = False

    def update(self, height: float, speed: float) -> bool:
        s = self.settings
        if self.contact:
            self.contact = not (height > s.off_height or speed > s.off_speed)
        else:
            self.contact = height < s.on_height and speed < s.on_speed
        return self.contact


def horizontal_speeds(positions: np.ndarray, fps: float, centred: bool) -> np.ndarray:
    """(F, 2) horizontal speeds (m/s) of the two ankles; ``centred``: central differences."""
    xy = np.asarray(positions)[:, FOOT_INDEX, :2]
    if len(xy) < 2:
        return np.zeros((len(xy), 2))
    if centred:
        v = np.gradient(xy, axis=0) * fps
    else:
        v = np.zeros_like(xy)
        v[1:] = np.diff(xy, axis=0) * fps
    return np.linalg.norm(v, axis=-1)


def _remove_short(flags: np.ndarray, shortest: int) -> np.ndarray:
    """Gaps, then runs, shorter than ``shortest`` frames flipped (one foot's (F,) flags)."""
    out = flags.copy()
    for value in (False, True):
        f = 0
        while f < len(out):
            g = f
            while g < len(out) and out[g] == out[f]:
                g += 1
            if out[f] == value and g - f < shortest and f > 0 and g < len(out):
                out[f:g] = not value
            f = g
    return out


def plan_contacts(positions: np.ndarray, fps: float, settings: FootingSettings | None = None,
                  floor: float | None = None) -> np.ndarray:
    """Offline contacts, (F, 2) bool (left, right): the same hysteresis on centred speeds, the
    heights ``plan_margin`` higher, then contacts and gaps shorter than ``min_s`` removed.

    The margin: the whole take's floor lies below the live estimate's early values (CMU walk 0.085
    against 0.101 m in its first second), and a landing foot whose ankle is still 2.5-3 cm over it
    was left free, its slide counted (the walk's skate 3.7 cm/s offline against 1.1 live; 1.1 with
    the margin)."""
    s = settings or FootingSettings()
    positions = np.asarray(positions)
    floor = stance_floor(positions, s.floor_percentile) if floor is None else floor
    heights = positions[:, FOOT_INDEX, 2] - floor - s.plan_margin
    speeds = horizontal_speeds(positions, fps, centred=True)
    out = np.zeros(heights.shape, dtype=bool)
    for k in range(2):
        det = ContactDetector(s)
        out[:, k] = [det.update(float(h), float(v)) for h, v in zip(heights[:, k], speeds[:, k], strict=True)]
        out[:, k] = _remove_short(out[:, k], max(1, int(round(s.min_s * fps))))
    return out


def contact_runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) frames of each run of True in one foot's (F,) flags."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], np.asarray(flags, dtype=np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def contact_holds(contacts: np.ndarray, feet_xy: np.ndarray) -> np.ndarray:
    """Offline: where each contact holds its robot foot, (F, 2, 2) x y (NaN where the foot is free):
    the mean over the contact of the foot target's horizontal position ``feet_xy`` (F, 2, 2).

    Of all the places a standing foot can stay, the mean is nearest the performer's foot in the
    mean square; a capture lets a standing foot drift (the CMU arms take's left ankle ~4 cm from
    where it landed, on average over its contacts), so holding it where it landed costs about twice
    the position error (docs/retarget.md "Feet on the ground")."""
    contacts = np.asarray(contacts, dtype=bool)
    holds = np.full((*contacts.shape, 2), np.nan)
    for k in range(contacts.shape[1]):
        for a, b in contact_runs(contacts[:, k]):
            holds[a:b, k] = np.asarray(feet_xy)[a:b, k].mean(axis=0)
    return holds


# -- the robot side -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FootGeometry:
    """A robot's feet: its sole points in each foot link's frame, the link's up axis and height
    above the floor when it stands flat."""

    bodies: tuple[str, str]
    soles: np.ndarray  # (2, k, 3) lowest points of each foot's collision geoms, in the link frame
    up: np.ndarray  # (2, 3) the world's z in the link frame, standing
    height: np.ndarray  # (2,) the link origin above its lowest sole point, standing


def _geom_bottoms(model: mujoco.MjModel, data: mujoco.MjData, geom: int) -> np.ndarray:
    """World points at the bottom of a collision geom (sphere, capsule, box; else its centre)."""
    c, rot, size = data.geom_xpos[geom], data.geom_xmat[geom].reshape(3, 3), model.geom_size[geom]
    kind = model.geom_type[geom]
    down = np.array([0.0, 0.0, -1.0])
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return np.array([c + size[0] * down])
    if kind in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
        axis = rot[:, 2] * size[1]
        return np.array([c + axis + size[0] * down, c - axis + size[0] * down])
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * size
        return c + corners @ rot.T
    return np.array([c])


@lru_cache(maxsize=8)
def foot_geometry(robot: RobotDescription) -> FootGeometry:
    """The feet of ``robot`` from its collision geoms in the standing pose."""
    model = robot_model.physics_spec(robot).compile()
    data = mujoco.MjData(model)
    data.qpos[:] = robot_model.default_qpos(robot, model)
    mujoco.mj_kinematics(model, data)
    soles, ups, heights = [], [], []
    for name in robot.feet:
        body = model.body(name).id
        rot, origin = data.xmat[body].reshape(3, 3), data.xpos[body]
        geoms = [g for g in range(model.ngeom)
                 if model.geom_bodyid[g] == body and model.geom_contype[g] | model.geom_conaffinity[g]]
        points = [p for g in geoms for p in _geom_bottoms(model, data, g)]
        if not points:
            raise ValueError(f"{robot.name}: foot {name} has no collision geom")
        world = np.array(points)
        soles.append((world - origin) @ rot)
        ups.append(rot.T @ np.array([0.0, 0.0, 1.0]))
        heights.append(origin[2] - world[:, 2].min())
    k = min(len(s) for s in soles)
    return FootGeometry((robot.feet[0], robot.feet[1]), np.array([s[:k] for s in soles]), np.array(ups),
                        np.array(heights))


def _qmul(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return (aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw)


def _qrot(q: Sequence[float], v: Sequence[float]) -> tuple[float, float, float]:
    """``v`` turned by unit quaternion ``q`` (w x y z): v + 2w (u x v) + 2 u x (u x v)."""
    w, x, y, z = q
    cx, cy, cz = y * v[2] - z * v[1], z * v[0] - x * v[2], x * v[1] - y * v[0]
    return (v[0] + 2.0 * (w * cx + y * cz - z * cy), v[1] + 2.0 * (w * cy + z * cx - x * cz),
            v[2] + 2.0 * (w * cz + x * cy - y * cx))


def _to_up(a: Sequence[float]) -> tuple[float, float, float, float]:
    """The smallest rotation taking unit vector ``a`` onto the world's z."""
    w = 1.0 + a[2]
    if w < 1e-9:  # upside down: half a turn about x
        return (0.0, 1.0, 0.0, 0.0)
    n = math.sqrt(w * w + a[0] * a[0] + a[1] * a[1])
    return (w / n, a[1] / n, -a[0] / n, 0.0)


def _floor_push(low: float, soft: float) -> float:
    """How far to raise a foot whose lowest sole point is at ``low``: ``-low`` below ``-soft``,
    nothing above ``soft``, a quadratic between (a smooth max(0, -low): a kink would be a jerk)."""
    if low >= soft:
        return 0.0
    if low <= -soft:
        return -low
    return (soft - low) ** 2 / (4.0 * soft)


def _blend(a: list[float], b: list[float], t: float) -> list[float]:
    """Poses ``a`` -> ``b`` at ``t``: positions linear, rotations normalised-linear (the short way)."""
    sign = 1.0 if sum(a[i] * b[i] for i in range(4)) >= 0 else -1.0
    q = [(1 - t) * a[i] + t * sign * b[i] for i in range(4)]
    n = math.sqrt(sum(x * x for x in q))
    return [*(x / n for x in q), *((1 - t) * a[i] + t * b[i] for i in range(4, 7))]


@dataclass
class _Foot:
    detector: ContactDetector
    weight: float = 0.0  # 0: the human's foot, 1: locked on the floor
    lock: tuple[float, float] = (0.0, 0.0)
    held: list[float] | None = None  # the locked pose (w x y z, x y z) it leaves from
    was: bool = False  # in contact at the previous frame


class Footing:
    """The contact-aware foot targets of one performer's IK (see the module's docstring).

    ``tables``: per IK table, for each foot (left, right): the index of the table's entry for the
    foot link (None: the table has none) and those of its entries for sites on the foot.
    """

    def __init__(self, geometry: FootGeometry, tables: list[list[tuple[int | None, list[int]]]],
                 fps: float, settings: FootingSettings | None = None) -> None:
        self.settings = settings or FootingSettings()
        self.settings.validate()
        self.geometry = geometry
        self.tables = tables
        self.fps = fps
        s = self.settings
        self._up = [tuple(float(x) for x in u) for u in geometry.up]
        self._height = [float(h) for h in geometry.height]
        self._soles = [[tuple(float(x) for x in p) for p in feet] for feet in geometry.soles]
        self.floor_estimate = FloorEstimate(int(s.floor_window_s * fps), int(s.floor_every_s * fps), s.floor_percentile)
        self.plan: np.ndarray | None = None  # offline contacts (F, 2)
        self.plan_floor: float | None = None
        self.holds: np.ndarray | None = None  # offline (F, 2, 2): contact_holds
        self.approach: np.ndarray | None = None  # offline (F, 2): 0-1 towards the next hold, before it
        self.reset()

    def reset(self) -> None:
        s = self.settings
        self.feet = [_Foot(ContactDetector(s)) for _ in range(2)]
        self.lift = 0.0
        self.lifted = False
        self.flight = 0.0  # m, <= 0: the body lowered while neither foot is in contact
        self.stance = [0.0, 0.0]  # per foot: 0 free, 1 held (smoothstep of the blend)
        self.frame = 0
        self.previous: list[list[float]] | None = None  # the ankles' positions of the previous frame
        self.floor_estimate.count = 0
        self.floor_estimate.value = None

    def set_plan(self, contacts: np.ndarray | None, floor: float | None = None,
                 holds: np.ndarray | None = None) -> None:
        """Offline: contacts (F, 2) and the floor of the whole take, frame ``i`` the i-th call; with
        ``holds`` (:func:`contact_holds`) each contact holds its foot there, reached before the
        touchdown (``approach_s``) rather than locked where the foot landed."""
        self.plan = None if contacts is None else np.asarray(contacts, dtype=bool)
        self.plan_floor = floor
        self.holds = self.approach = None
        if self.plan is None or holds is None:
            return
        self.holds = np.array(holds, dtype=np.float64)
        self.approach = np.zeros(self.plan.shape)
        frames = max(1, int(round(self.settings.approach_s * self.fps)))
        for k in range(2):
            end = 0  # the previous contact's end: an approach starts no earlier
            for a, b in contact_runs(self.plan[:, k]):
                first = max(end, a - frames)
                m = a - first
                self.approach[first:a, k] = 1.0 - np.arange(m, 0, -1) / (m + 1)
                self.holds[first:a, k] = self.holds[a, k]
                end = b

    @property
    def contacts(self) -> tuple[bool, bool]:
        return (self.feet[0].detector.contact, self.feet[1].detector.contact)

    def _contacts(self, positions: np.ndarray, elapsed: int) -> tuple[bool, bool]:
        if self.plan is not None:
            row = self.plan[min(self.frame, len(self.plan) - 1)]
            for foot, c in zip(self.feet, row, strict=True):
                foot.detector.contact = bool(c)
            return bool(row[0]), bool(row[1])
        floor = self.plan_floor if self.plan_floor is not None else self.floor_estimate.update(positions)
        ankles = positions[FOOT_INDEX].tolist()
        previous = self.previous
        self.previous = ankles
        if previous is None:  # no speed yet: no contact
            return False, False
        rate = self.fps / max(1, elapsed)
        return tuple(  # type: ignore[return-value]
            self.feet[k].detector.update(ankles[k][2] - floor, rate * math.hypot(ankles[k][0] - previous[k][0],
                                                                                  ankles[k][1] - previous[k][1]))
            for k in range(2))

    def _lowest(self, pose: list[float], foot: int) -> float:
        """The lowest sole point's height of foot ``foot`` at ``pose``: the rotation's third row
        times each point."""
        w, x, y, z = pose[:4]
        r0, r1, r2 = 2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)
        return min(r0 * p[0] + r1 * p[1] + r2 * p[2] for p in self._soles[foot]) + pose[6]

    def solved_lift(self, feet: Sequence[Sequence[float]]) -> float:
        """How far to raise the solved robot whose foot links are at ``feet`` (left, right: w x y z,
        x y z) so that no sole point is under the floor: the joints stay as solved, only the root
        moves (a smooth max(0, -lowest), see ``_floor_push``)."""
        low = min(self._lowest(list(pose), k) for k, pose in enumerate(feet))
        return _floor_push(low, self.settings.solved_soft)

    def _flight_drop(self, feet: Sequence[list[float] | None], contacts: Sequence[bool]) -> float:
        """m, <= 0: how far the body goes down so that, with neither foot in contact, the lower
        sole of the feet at ``feet`` is within ``flight_cap`` of the floor (smoothly, over ``soft``)."""
        s = self.settings
        if any(contacts) or not math.isfinite(s.flight_cap):
            return 0.0
        low = min((self._lowest(pose, k) for k, pose in enumerate(feet) if pose is not None), default=0.0)
        return -_floor_push(s.flight_cap - low, s.soft)

    def _foot_pose(self, k: int, foot: _Foot, free: list[float], contact: bool, hold: np.ndarray | None,
                   dt: float) -> tuple[list[float], float]:
        """Foot ``k``'s target (``free``: the performer's, lifted; ``hold``: offline, where this
        frame's contact holds it) and how far it is held (0-1, smoothed): held while in contact,
        blended off at lift-off."""
        s = self.settings
        if contact and not foot.was:  # touchdown: lock where the foot is now, or on its hold
            if hold is not None:
                foot.lock, foot.weight = (float(hold[0]), float(hold[1])), 1.0  # reached on the approach
            else:
                hx, hy = (foot.held[4], foot.held[5]) if foot.held is not None else (free[4], free[5])
                a = foot.weight
                foot.lock = ((1 - a) * free[4] + a * hx, (1 - a) * free[5] + a * hy)
        foot.was = contact
        step = dt / (s.touchdown_s if contact else s.blend_s)
        foot.weight = min(1.0, foot.weight + step) if contact else max(0.0, foot.weight - step)
        if contact:
            foot.held = self._standing(free, k, foot.lock)
        pose = free
        w = foot.weight * foot.weight * (3.0 - 2.0 * foot.weight)  # smoothstep
        if w > 0.0 and foot.held is not None:
            pose = _blend(free, foot.held, w)
        return pose, w

    def _landing(self, k: int, pose: list[float], free: list[float], hold: np.ndarray,
                 a: float) -> tuple[list[float], float] | None:
        """Offline, free foot ``k`` at ``pose`` blended onto its next ``hold``, ``a`` (0-1) of its
        approach done, and how far (smoothstep); None where it is not landing."""
        if a <= 0.0:
            return None
        a = a * a * (3.0 - 2.0 * a)
        return _blend(pose, self._standing(free, k, (float(hold[0]), float(hold[1]))), a), a

    def _standing(self, pose: list[float], k: int, xy: tuple[float, float]) -> list[float]:
        """Foot ``k`` standing at ``xy``: its rotation at ``pose`` turned flat (its standing up axis
        onto the world's), its link at its standing height above the floor (plus ``clearance``)."""
        turned = _qmul(_to_up(_qrot(pose[:4], self._up[k])), pose[:4])
        return [*turned, xy[0], xy[1], self._height[k] + self.settings.clearance]

    def adjust(self, positions: np.ndarray, targets: dict[int, np.ndarray], elapsed: int = 1) -> None:
        """Move the frame's targets (per table index: (n, 7) w x y z, x y z; in place)."""
        contacts = self._contacts(positions, elapsed)
        holds, approach = self.holds, self.approach  # offline, set together (set_plan)
        row = 0 if holds is None else min(self.frame, len(holds) - 1)
        self.frame += 1
        s = self.settings
        dt = max(1, elapsed) / self.fps
        last = max(targets)
        raw: list[np.ndarray | None] = [None if body is None else targets[last][body].copy()
                                        for body, _ in self.tables[last]]
        # the body's height: the stance feet's raw targets onto the floor
        wanted = [self._height[k] + s.clearance - float(r[6]) for k, r in enumerate(raw)
                  if contacts[k] and r is not None]
        if wanted:
            goal = sum(wanted) / len(wanted)
            self.lift = goal if not self.lifted else self.lift + (goal - self.lift) * min(1.0, dt / s.lift_s)
            self.lifted = True
        new: list[list[float] | None] = []
        swung: list[list[float] | None] = []  # the same before a landing foot's approach
        for k, foot in enumerate(self.feet):
            first = raw[k]
            if first is None:
                new.append(None)
                swung.append(None)
                continue
            free = [float(x) for x in first]  # plain floats: a few numpy calls would cost more than the sums
            free[6] += self.lift
            hold = None if holds is None else holds[row, k]
            pose, w = self._foot_pose(k, foot, free, contacts[k], hold, dt)
            landing = (None if contacts[k] or hold is None or approach is None
                       else self._landing(k, pose, free, hold, float(approach[row, k])))
            if landing is not None:  # the flight's drop from where the foot comes from: the landing must reach
                from_ = list(pose)
                from_[6] += _floor_push(self._lowest(from_, k), s.soft)
                pose, w = landing[0], max(w, landing[1])
            low = self._lowest(pose, k)
            pose[6] += _floor_push(low, s.soft)
            # a foot near the floor weighs more as it nears it, held or not (it must not sink)
            goal = max(w, min(1.0, max(0.0, 1.0 - low / s.near)))
            self.stance[k] += (goal - self.stance[k]) * min(1.0, dt / s.weight_s)
            new.append(pose)
            swung.append(pose if landing is None else from_)
        self.flight = self._flight_drop(swung, contacts)
        for lowered in new:
            if lowered is not None:
                lowered[6] += self.flight
        for table, poses in targets.items():
            poses[:, 6] += self.lift + self.flight
            for k, (body, sites) in enumerate(self.tables[table]):
                moved, before = new[k], raw[k]
                if moved is None or before is None:
                    continue
                if body is not None:
                    poses[body] = moved
                if not sites:
                    continue
                turn = Q.multiply(np.array(moved[:4]), Q.conjugate(before[:4]))
                origin = before[4:] + np.array([0.0, 0.0, self.lift + self.flight])
                for site in sites:  # a site on the foot moves with the link
                    poses[site, :4] = Q.multiply(turn, poses[site, :4])
                    poses[site, 4:] = np.array(moved[4:]) + Q.rotate(turn, poses[site, 4:] - origin)
