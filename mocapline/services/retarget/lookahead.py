"""Offline retarget with look-ahead at the G1 shoulders' gimbal (``retarget-file``, ``export``, ``plot``).

When a shoulder's roll passes pi/2 its pitch and yaw axes align, and the IK, tracking the upper arm
exactly, spins pitch and yaw together to the one side the target's path dictates: successive arm
raises of the demo take alternate between +2.67 and -3.09 rad (limit-to-limit swings; see
docs/retarget.md, "The demo take's shoulder swing"). The other branch is only reached by holding
the arm off its target for a while, which a live IK cannot weigh; offline the whole take is known.

Where a shoulder enters its gimbal zone (``|axis_pitch . axis_yaw| > enter``, a function of the
roll alone) the IK state is forked (``G1Retargeter.save_state`` / ``load_state``):

- the plain solve runs for ``check_s``; if neither arm swings (over the last ``SWING_WINDOW_S`` of
  output plus the window) nor jumps, and no arm has to be brought back, it is kept;
- else candidates run for ``window_s`` each: the plain solve; on the way up (``|pitch| <
  arm_down``) every combination of the two arms' pitch *driven* either way (a posture pull,
  ``G1Retargeter.set_pull``, ``speed`` times a gain ahead of the pitch, with ``weight``, the waist
  held) until it is past ``band`` off the gimbal or at its limit (driving one arm flips the other's
  crossing, so only combinations work), the gains of ``drive_gains`` in turn; on the way down, for
  an arm whose branch was driven, an *unwinding* pull back towards zero, then near zero until off
  the gimbal (the plain solve would leave it at the roll limit);
- the candidate with the fewest swings + jumps, then the lowest summed mean position error of the
  arms, wins (greedy per crossing); the frame is solved again with its pulls and the take goes on.

Pulls switch on and off within a frame, so within ``smooth_s`` of a pulled frame the output is
low-passed (a weighted mean of IK poses: ranges and velocity limits hold). Elsewhere the output is
the live IK's exactly. Measurements: docs/retarget.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import mujoco
import numpy as np

from mocapline.core.frames import HumanFrame

from .quality import SWING_WINDOW_S, configuration_jumps, limit_swings
from .retargeter import G1Retargeter, IKState

SIDES = ("left", "right")
# A pull's code, times its direction: in (0, UNWIND) drive the pitch away from zero, past the
# gimbal, at the code times ``speed``; UNWIND drive it back towards zero; SETTLE once past zero,
# hold it near zero until off the gimbal.
UNWIND = 2.0
SETTLE = 3.0


@dataclass
class LookaheadOptions:
    enter: float = 0.9  # |axis_pitch . axis_yaw| above which a shoulder is at its gimbal
    leave: float = 0.85  # ... and below which it has left it
    arm_down: float = 1.0  # rad: |pitch| below which a crossing is on the way up
    weight: float = 10.0  # of the pull on a shoulder pitch
    waist_weight: float = 10.0  # of the waist's pull towards its previous pose while an arm is driven
    speed: float = 30.0  # rad/s: a drive's target is this far ahead of the previous pitch (times the frame time)
    drive_gains: tuple[float, ...] = (1.0, 1.5)  # candidate drives: speed times these, tried in turn
    band: float = 2.0  # rad: a drive ends once |pitch| exceeds it off the gimbal ...
    at_limit: float = 0.05  # rad: ... or the pitch is this close to its limit
    unwind_speed: float = 30.0  # rad/s
    settle_weight: float = 3.0  # of the pull to zero once an unwinding arm is past it
    smooth_s: float = 0.5  # s: output near pulled frames is low-passed ...
    smooth_passes: int = 3  # ... by this many passes of [1, 2, 1] / 4
    unwound: float = 0.5  # rad: an unwinding pull ends at this |pitch| off the gimbal
    window_s: float = 2.0  # s: each candidate's window
    check_s: float = 1.0  # s: the plain solve's window that decides whether to fork at all


@dataclass
class LookaheadStats:
    crossings: int = 0
    pulled: int = 0  # crossings where a pulled candidate won
    extra_frames: int = 0  # frames solved in candidate windows


@dataclass
class _Window:
    joints: np.ndarray  # (W, nq)
    arm_err: np.ndarray  # (W, 2) mean position error of each arm's frames (m)
    targets: np.ndarray  # (W, m, 7)


@dataclass
class _Arm:
    pitch: int  # index in the joint list
    roll: int
    pitch_id: int  # MuJoCo joint ids
    yaw_id: int
    columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the arm's joints
    entries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # its position-weighted frames


class GimbalLookahead:
    """Retargets whole takes with ``retargeter`` (fast backend; its state is used and left at the
    take's end)."""

    def __init__(self, retargeter: G1Retargeter, options: LookaheadOptions | None = None) -> None:
        self.r = retargeter
        self.options = options or LookaheadOptions()
        self.stats = LookaheadStats()
        model = retargeter.model
        self.model = model
        self.data = mujoco.MjData(model)
        entries = retargeter.table_entries()
        names = list(retargeter.joint_names)
        self._arms = []
        for side in SIDES:
            pitch, yaw = f"{side}_shoulder_pitch_joint", f"{side}_shoulder_yaw_joint"
            prefix = side.capitalize()
            self._arms.append(_Arm(
                names.index(pitch), names.index(f"{side}_shoulder_roll_joint"), model.joint(pitch).id,
                model.joint(yaw).id,
                np.array([i for i, n in enumerate(names) if n.startswith((f"{side}_shoulder", f"{side}_elbow",
                                                                            f"{side}_wrist"))]),
                np.array([i for i, e in enumerate(entries) if e.position_weight > 0 and e.human_body.startswith(prefix)
                          and e.human_body.endswith(("Arm", "ForeArm", "Hand"))]),
            ))
        self._waist = [i for i, n in enumerate(names) if n.startswith("waist")]
        self._frames = [(model.body(e.robot_frame).id if e.frame_type == "body" else model.site(e.robot_frame).id,
                         e.frame_type == "body") for e in entries]
        self._ranges = retargeter.ranges
        retargeter.set_pull(0, 0.0, 0.0)  # refuses a backend without pulls
        self._tabulate_alignment()
        self._pulling = False  # a pull is set in the retargeter
        self._driven = np.zeros(len(SIDES), dtype=bool)  # the arm's last crossing took a driven branch
        self._next_fork = np.zeros(len(SIDES), dtype=np.int64)  # an arm forks once per crossing

    # -- per frame ----------------------------------------------------------------------------------

    def _kinematics(self, q: np.ndarray) -> None:
        self.data.qpos[:] = q
        mujoco.mj_kinematics(self.model, self.data)

    def _alignment(self, qpos: np.ndarray) -> np.ndarray:
        """|axis_pitch . axis_yaw| of both shoulders: a function of the roll alone (the pitch turns
        about its own axis, the yaw axis is fixed in the roll's frame), tabulated."""
        return np.array([np.interp(qpos[7 + a.roll], self._roll_grid[i], self._roll_alignment[i])
                         for i, a in enumerate(self._arms)])

    def _tabulate_alignment(self) -> None:
        q = self.r.qpos
        self._roll_grid, self._roll_alignment = [], []
        for arm in self._arms:
            low, high = self._ranges[arm.roll]
            grid = np.linspace(float(low), float(high), 721)
            values = []
            for roll in grid:
                q[7 + arm.roll] = roll
                self._kinematics(q)
                x = self.data.xaxis
                values.append(abs(x[arm.pitch_id] @ x[arm.yaw_id]))
            self._roll_grid.append(grid)
            self._roll_alignment.append(np.array(values))

    def _arm_errors(self, targets: np.ndarray) -> np.ndarray:
        d = self.data
        pos = np.array([d.xpos[i] if body else d.site_xpos[i] for i, body in self._frames])
        err = np.linalg.norm(pos - targets[:, 4:], axis=1)
        return np.array([err[a.entries].mean() if a.entries.size else 0.0 for a in self._arms])

    def _solve(self, positions: np.ndarray, quaternions: np.ndarray, elapsed: int,
               pulls: np.ndarray) -> tuple[np.ndarray, bool]:
        """One frame with ``pulls`` (per arm a code, see UNWIND; updated in place: a
        pull ends once it has done its work)."""
        o = self.options
        prev = self.r.qpos
        joints = prev[7:]
        dt = elapsed / self.r.options.fps
        code = pulls
        if code.any():  # end the pulls that have done their work
            align = self._alignment(prev)
            for i, arm in enumerate(self._arms):
                p = joints[arm.pitch]
                if abs(code[i]) == UNWIND and p * code[i] > 0:  # past zero: ease it out of the gimbal
                    code[i] = np.sign(code[i]) * SETTLE
                    done = False
                elif abs(code[i]) == SETTLE:
                    done = align[i] < o.leave
                elif abs(code[i]) == UNWIND:
                    done = abs(p) < o.unwound and align[i] < o.leave
                else:
                    limit = self._ranges[arm.pitch, 1 if code[i] > 0 else 0]
                    done = abs(p - limit) < o.at_limit or (abs(p) > o.band and align[i] < o.leave)
                if done:
                    code[i] = 0.0
        if code.any() or self._pulling:
            self._set_pulls(code, joints, dt)
        result = self.r.retarget(positions, quaternions, elapsed)
        return result.qpos, result.ik_failed

    def _set_pulls(self, code: np.ndarray, joints: np.ndarray, dt: float) -> None:
        o = self.options
        for i, arm in enumerate(self._arms):
            p = joints[arm.pitch]
            if abs(code[i]) == SETTLE:
                self.r.set_pull(arm.pitch, 0.0, o.settle_weight)
                continue
            lead = (o.unwind_speed if abs(code[i]) == UNWIND else o.speed * abs(code[i])) * dt
            step = min(lead, abs(p)) if abs(code[i]) == UNWIND else lead  # unwinding stops at zero
            self.r.set_pull(arm.pitch, float(p + np.sign(code[i]) * step), o.weight if code[i] else 0.0)
        driving = (code != 0.0) & (np.abs(code) < UNWIND)
        for j in self._waist:  # a driven arm must not turn the torso
            self.r.set_pull(j, float(joints[j]), o.waist_weight if driving.any() else 0.0)
        self._pulling = bool(code.any())

    # -- the take -----------------------------------------------------------------------------------

    def run(self, positions: np.ndarray, quaternions: np.ndarray,
            elapsed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(F, nq) qpos and (F,) ik_failed for (F, 23, 3) positions and (F, 23, 4) quaternions;
        ``elapsed``: source frames since the previous one, per frame (default 1)."""
        n = len(positions)
        self._driven[:] = False
        self._next_fork[:] = 0
        steps = np.ones(n, dtype=np.int64) if elapsed is None else np.maximum(1, np.asarray(elapsed, dtype=np.int64))
        out = np.empty((n, self.model.nq))
        failed = np.zeros(n, dtype=bool)
        in_zone = np.zeros(len(SIDES), dtype=bool)
        pulled = np.zeros(n, dtype=bool)
        pulls = np.zeros(len(SIDES))  # per arm a code, see UNWIND
        history = max(2, int(round(SWING_WINDOW_S * self.r.options.fps)))
        for f in range(n):
            before, pulls_before = self.r.save_state(), pulls.copy()
            q, failed[f] = self._solve(positions[f], quaternions[f], int(steps[f]), pulls)
            align = self._alignment(q)
            free = ~in_zone & (pulls == 0.0) & (f >= self._next_fork)
            if f > 0 and before.settled and np.any(free & (align > self.options.enter)) and not failed[f]:
                # an arm enters its gimbal: fork it, and the other arm if it is about to
                sides = free & (align > self.options.leave)
                self.stats.crossings += 1
                pulls = self._fork(f, before, pulls_before, sides, positions, quaternions, steps,
                                   out[max(0, f - history):f])
                self.r.load_state(before)
                q, failed[f] = self._solve(positions[f], quaternions[f], int(steps[f]), pulls)
                align = self._alignment(q)
                in_zone |= sides
                self._next_fork[sides] = f + int(round(self.options.check_s * self.r.options.fps))
            in_zone = np.where(in_zone, align > self.options.leave, align > self.options.enter)
            out[f] = q
            pulled[f] = pulls.any()
        self._set_pulls(np.zeros(len(SIDES)), self.r.qpos[7:], 0.0)  # pulls off
        return self._smooth(out, pulled), failed

    def _smooth(self, qpos: np.ndarray, pulled: np.ndarray) -> np.ndarray:
        """Pulls switch on and off within a frame: within ``smooth_s`` of a pulled frame the output
        is low-passed (``smooth_passes`` of the centred [1, 2, 1] / 4 filter; a weighted mean of
        poses, so joint ranges and velocity limits still hold). Elsewhere it is the IK's own."""
        margin = int(round(self.options.smooth_s * self.r.options.fps))
        if not pulled.any() or self.options.smooth_passes == 0:
            return qpos
        near = np.convolve(pulled.astype(float), np.ones(2 * margin + 1), mode="same") > 0
        smooth = qpos.copy()
        for _ in range(self.options.smooth_passes):
            padded = np.concatenate((smooth[:1], smooth, smooth[-1:]))
            quat = padded[:, 3:7].copy()
            quat[:-1] *= np.where(np.sum(quat[:-1] * quat[1:], axis=1) < 0, -1.0, 1.0)[:, None]  # one hemisphere
            padded[:, 3:7] = quat
            smooth = 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]
            smooth[:, 3:7] /= np.linalg.norm(smooth[:, 3:7], axis=1, keepdims=True)
        out = qpos.copy()
        out[near] = smooth[near]
        return out

    def _window(self, f: int, state: IKState, pulls: np.ndarray, positions: np.ndarray,
                quaternions: np.ndarray, steps: np.ndarray, seconds: float | None = None) -> _Window:
        seconds = self.options.window_s if seconds is None else seconds
        end = min(len(positions), f + max(1, int(round(seconds * self.r.options.fps))))
        self.r.load_state(state)
        pulls = pulls.copy()
        joints, errs, targets = [], [], []
        for k in range(f, end):
            q, _ = self._solve(positions[k], quaternions[k], int(steps[k]), pulls)
            tgt = self.r.targets(positions[k], quaternions[k])
            self._kinematics(q)
            joints.append(q)
            errs.append(self._arm_errors(tgt))
            targets.append(tgt)
        self.stats.extra_frames += end - f
        return _Window(np.array(joints), np.array(errs), np.array(targets))

    def _candidates(self, state: IKState, pulls: np.ndarray, sides: np.ndarray, gain: float) -> list[np.ndarray]:
        """Plain first, then every combination of the entering arms' pulls (drives at ``gain``)."""
        joints = state.last_good[7:]
        options: list[list[float]] = []
        for i, arm in enumerate(self._arms):
            p = joints[arm.pitch]
            if not sides[i]:
                options.append([pulls[i]])
            elif abs(p) < self.options.arm_down:
                options.append([0.0, -gain, gain])
            elif self._driven[i]:
                options.append([0.0, -np.sign(p) * UNWIND])
            else:
                options.append([0.0])
        return [np.array(c) for c in itertools.product(*options)]

    def _fork(self, f: int, state: IKState, pulls: np.ndarray, sides: np.ndarray, positions: np.ndarray,
              quaternions: np.ndarray, steps: np.ndarray, history: np.ndarray) -> np.ndarray:
        """The pulls to solve frame ``f`` with: the candidate whose arms neither swing nor jump and
        track best over the window."""
        plain = self._candidates(state, pulls, sides, 0.0)[0]
        check = self._key(self._window(f, state, plain, positions, quaternions, steps, self.options.check_s), history)
        if check[0] == 0 and not self._driven[sides].any():
            return plain  # plain neither swings nor jumps, and no arm needs bringing back
        candidates = [plain]
        keys = [self._key(self._window(f, state, plain, positions, quaternions, steps), history)]
        for gain in self.options.drive_gains:  # a faster drive only if no slower one is clean
            for c in self._candidates(state, pulls, sides, gain)[1:]:
                if not any(np.array_equal(c, d) for d in candidates):
                    candidates.append(c)
                    keys.append(self._key(self._window(f, state, c, positions, quaternions, steps), history))
            if min(keys)[0] == 0:
                break
        best = min(range(len(candidates)), key=keys.__getitem__)
        if best:
            self.stats.pulled += 1
        chosen = candidates[best]
        self._driven[sides] = bool(np.any((chosen != 0.0) & (np.abs(chosen) < UNWIND)))  # it can flip the other
        return chosen

    def _key(self, w: _Window, history: np.ndarray) -> tuple[int, float]:
        """(swings + jumps of the arms, their summed mean position error) over a window."""
        bad, err = 0, 0.0
        for i, arm in enumerate(self._arms):
            cols = 7 + arm.columns
            arm_joints = w.joints[:, cols]
            bad += limit_swings(np.concatenate((history[:, cols], arm_joints)), self._ranges[arm.columns],
                                self.r.options.fps)
            bad += configuration_jumps(arm_joints, w.targets)
            err += float(w.arm_err[:, i].mean())
        return bad, err


def retarget_frames_offline(frames: list[HumanFrame], make: Callable[[], G1Retargeter],
                            options: LookaheadOptions | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(F, nq) qpos, (F,) ik_failed and (F,) take numbers for a recorded stream of HumanFrames, split into takes per
    performer exactly as :class:`RetargetService` splits them (a new take on the first frame, a
    backward posture index or a new segment; ``elapsed`` from the posture indices); ``make`` gives
    one retargeter per performer."""
    takes: dict[int, list[list[int]]] = {}
    elapsed = np.ones(len(frames), dtype=np.int64)
    last: dict[int, tuple[int, int]] = {}
    for i, frame in enumerate(frames):
        prev = last.get(frame.avatar_index)
        if prev is None or frame.posture_index < prev[0] or frame.segment != prev[1]:
            takes.setdefault(frame.avatar_index, []).append([])
        elif frame.posture_index > prev[0]:
            elapsed[i] = frame.posture_index - prev[0]
        takes[frame.avatar_index][-1].append(i)
        last[frame.avatar_index] = (frame.posture_index, frame.segment)
    qpos = np.empty((len(frames), 0))
    failed = np.zeros(len(frames), dtype=bool)
    number = np.zeros(len(frames), dtype=np.int64)
    for performer in takes.values():
        look = GimbalLookahead(make(), options)
        for take in performer:
            look.r.reset()
            q, bad = look.run(np.array([frames[i].positions for i in take]),
                              np.array([frames[i].quaternions for i in take]), elapsed[take])
            if qpos.shape[1] == 0:
                qpos = np.empty((len(frames), q.shape[1]))
            qpos[take], failed[take] = q, bad
            number[take] = number.max() + 1
    return qpos, failed, number
