"""The policy controller without I/O, in simulated time: the observation it feeds equals one computed
here term by term (TWIST2's layout: order, scales, the reference's central differences, history
shift and initialisation), actions map to the command exactly, the rates, every safety transition;
the ONNX runner on small graphs built here (no third-party weights), and a description that does
not fit its graph refused with both widths named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from g1_facts import G1, VELOCITY_LIMITS, joint_ranges, load_ik_model
from scipy.spatial.transform import Rotation, Slerp

from mocapline.services.robot.controller import ControlSettings, Measured
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.policy.controller import PolicyController
from mocapline.services.robot.policy.description import PolicyDescriptionError, load_policy, parse_policy
from mocapline.services.robot.safety import Limits, SafetyFilter
from mocapline.services.robot.timeline import StreamFrame

pytest.importorskip("onnxruntime")
from policy_graphs import linear_policy  # noqa: E402

TWIST2 = load_policy("twist2_g1")
N = G1.joint_count
IDX = TWIST2.indices(G1)
DEFAULT = np.array(G1.stand)
DEFAULT[IDX] = TWIST2.default
ANKLES = [i for i, name in enumerate(TWIST2.joint_names) if "ankle" in name]
RATE = 50.0  # the stream's
DT = 0.002


def _limits() -> Limits:
    return Limits.with_margin(joint_ranges(load_ik_model()), VELOCITY_LIMITS, np.full(N, 200.0), 0.05)


class Recorder:
    """A stand-in policy: records what it was fed (and the controller's state then), answers a
    deterministic small action."""

    def __init__(self, ctl_ref: list[PolicyController], action: np.ndarray | None = None) -> None:
        self.ctl = ctl_ref
        self.fixed = action
        self.calls: list[dict] = []

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        ctl = self.ctl[0]
        k = len(self.calls)
        action = self.fixed if self.fixed is not None else 0.01 * np.sin(0.3 * k + np.arange(len(IDX)))
        assert ctl.measured is not None
        self.calls.append({"obs": obs.copy(), "state": ctl.state, "clock": ctl.timeline.clock,
                           "measured": ctl.measured, "action": action.copy(),
                           "reference": ctl.reference})
        return action.copy()


def _controller(action: np.ndarray | None = None, **settings: float) -> tuple[PolicyController, Recorder,
                                                                                RobotCounters]:
    counters = RobotCounters.for_robot(G1)
    box: list[PolicyController] = []
    rec = Recorder(box, action)
    s = ControlSettings(**{"max_speed": 1.0, "min_ramp_s": 0.1, "ramp_speed": 50.0, **settings})
    ctl = PolicyController(G1, s, SafetyFilter(_limits()), counters, TWIST2, rec)
    box.append(ctl)
    return ctl, rec, counters


def _measured(t: float, tilt_deg: float = 0.0) -> Measured:
    i = np.arange(N)
    q = DEFAULT + 0.02 * np.sin(0.7 * t + i)
    dq = 0.3 * np.cos(0.9 * t + i)
    rot = Rotation.from_euler("ZYX", [0.4 * t, 0.03 * np.sin(t), 0.02 + np.radians(tilt_deg)])
    x, y, z, w = rot.as_quat()
    return Measured(q, dq, np.array([w, x, y, z]), np.array([0.1 * np.sin(t), -0.2, 0.05 * t]))


def _clip(seconds: float = 5.0) -> tuple[np.ndarray, np.ndarray, Rotation, np.ndarray]:
    """A stream with a moving root: times, positions, orientations, joints."""
    t = np.arange(int(seconds * RATE)) / RATE
    pos = np.stack([0.3 * t, 0.1 * t * t, 0.78 + 0.01 * np.sin(t)], axis=1)
    rot = Rotation.from_euler("ZYX", np.stack([0.2 * t, 0.03 * np.ones_like(t), 0.05 * np.sin(2 * t)], axis=1))
    joints = DEFAULT + 0.1 * np.sin(t[:, None] + np.arange(N))
    return t, pos, rot, joints


def _frames(t: np.ndarray, pos: np.ndarray, rot: Rotation, joints: np.ndarray) -> list[StreamFrame]:
    quat = rot.as_quat()[:, [3, 0, 1, 2]]  # scipy x y z w -> the stream's w x y z
    return [StreamFrame(k, float(t[k]), joints[k].copy(), np.zeros(N), root=np.concatenate([pos[k], quat[k]]))
            for k in range(len(t))]


def _drive(ctl: PolicyController, seconds: float, start: float = 0.0, frames: list[StreamFrame] = (),
           tilt_deg: float = 0.0) -> list:
    """Ticks at 500 Hz of simulated time; ``frames`` pushed before the first."""
    for f in frames:
        ctl.on_frame(f)
    commands = []
    for k in range(int(round(seconds / DT))):
        now = start + k * DT
        ctl.on_state(_measured(now, tilt_deg))
        commands.append(ctl.tick(now, DT))
    return commands


def _play(ctl: PolicyController, seconds: float, each: Callable[[float], None] | None = None) -> None:
    """Ticks at 500 Hz of simulated time from 0, telling the controller the stream ended once a
    command reaches its END_OF_STREAM (as the bridge does); ``each(now)`` after every tick."""
    for k in range(int(seconds / DT)):
        now = k * DT
        ctl.on_state(_measured(now))
        cmd = ctl.tick(now, DT)
        if cmd is not None and any(f.end for f in cmd.reached):
            ctl.on_end()
        if each is not None:
            each(now)


def _expected_mimic(clock: float, t: np.ndarray, pos: np.ndarray, rot: Rotation, joints: np.ndarray) -> np.ndarray:
    """TWIST2's mimic terms at playback time ``clock``, computed independently: the pose between the
    two frames around it, the velocities of the frame before it by central differences (world),
    rotated into the interpolated root's frame."""
    k = int(np.floor(clock * RATE + 1e-9))
    a = clock * RATE - k
    now = Slerp(t[k:k + 2], rot[k:k + 2])([clock])[0]
    lo, hi = max(k - 1, 0), k + 1
    span = t[hi] - t[lo]
    lin = (pos[hi] - pos[lo]) / span
    ang = (rot[hi] * rot[lo].inv()).as_rotvec() / span
    lin_root, ang_root = now.inv().apply(lin), now.inv().apply(ang)
    _, pitch, roll = now.as_euler("ZYX")
    z = pos[k, 2] + a * (pos[k + 1, 2] - pos[k, 2])
    q = joints[k] + a * (joints[k + 1] - joints[k])
    return np.concatenate([lin_root[:2], [z], [roll, pitch], [ang_root[2]], q[IDX]])


def _expected_proprio(m: Measured, last_action: np.ndarray) -> np.ndarray:
    w, x, y, z = m.quat
    _, pitch, roll = Rotation.from_quat([x, y, z, w]).as_euler("ZYX")
    dq = m.dq[IDX].copy()
    dq[ANKLES] = 0.0
    return np.concatenate([m.gyro * 0.25, [roll, pitch], m.q[IDX] - TWIST2.default, dq * 0.05, last_action])


def test_twist2s_description_is_their_checkpoints_width_in_their_layout() -> None:
    assert TWIST2.width == 1432 == 127 * 11 + 35 and TWIST2.frame_width == 127
    assert TWIST2.rate_hz == 50.0 and TWIST2.history == 10 and TWIST2.history_init == "zeros"
    assert [t.width for t in TWIST2.terms(TWIST2.after)] == [2, 1, 2, 1, 29]
    assert np.array_equal(IDX, np.arange(N))  # Unitree's motor order is the G1's stream order


def test_the_observation_fed_is_the_one_computed_term_by_term() -> None:
    ctl, rec, _ = _controller(rest_lean_s=0.0)  # the stream's roll and pitch as streamed
    t, pos, rot, joints = _clip()
    _drive(ctl, 4.5, frames=_frames(t, pos, rot, joints))
    tracking = [c for c in rec.calls if c["state"] == "tracking"]
    assert len(tracking) > 100, [c["state"] for c in rec.calls][::10]
    last_actions = [np.zeros(N)] + [c["action"] for c in rec.calls[:-1]]
    for k, call in enumerate(rec.calls):
        obs = call["obs"].astype(np.float64)
        assert obs.shape == (1432,) and call["obs"].dtype == np.float32
        np.testing.assert_allclose(obs[35:127], _expected_proprio(call["measured"], last_actions[k]), atol=2e-6)
        # history: the 10 frames before this one, oldest first; zeros before the first
        for j in range(10):
            before = k - 10 + j
            past = rec.calls[before]["obs"][:127] if before >= 0 else np.zeros(127, dtype=np.float32)
            assert np.array_equal(call["obs"][127 * (1 + j):127 * (2 + j)], past), (k, j)
        np.testing.assert_array_equal(call["obs"][-35:], call["obs"][:35])  # the current mimic terms again
        if call["state"] == "tracking":
            np.testing.assert_allclose(obs[:35], _expected_mimic(call["clock"], t, pos, rot, joints), atol=3e-5)
    first = rec.calls[0]  # balancing: the reference at rest, standing still at the stand height
    np.testing.assert_allclose(first["obs"][:35], np.concatenate([[0, 0, 0.8, 0, 0, 0], TWIST2.default]), atol=1e-6)


def _leaning_clip(seconds: float, pitch_deg: float, roll_deg: float, extra_pitch_from: float,
                  extra_deg: float) -> tuple[np.ndarray, np.ndarray, Rotation, np.ndarray]:
    """A turning root leaning a constant roll and pitch, ``extra_deg`` more pitch from ``extra_pitch_from`` s."""
    t, pos, _, joints = _clip(seconds)
    pitch = np.radians(pitch_deg + extra_deg * (t >= extra_pitch_from))
    rot = Rotation.from_euler("ZYX", np.stack([0.2 * t, pitch, np.full_like(t, np.radians(roll_deg))], axis=1))
    return t, pos, rot, joints


def _roll_pitch_seen(calls: list[dict], start: float, stop: float) -> np.ndarray:
    """(n, 2) the reference's roll and pitch in the observations fed while tracking in [start, stop) s of playback."""
    return np.array([c["obs"][3:5] for c in calls if c["state"] == "tracking" and start <= c["clock"] < stop],
                    dtype=np.float64)


def test_the_policy_sees_the_reference_pitch_relative_to_the_takes_first_second() -> None:
    """A performer leaning 8 deg forward and 2 to the side as they stand: after the take's first
    second the policy sees the reference's pitch level, a further 5 deg later as 5 deg, the roll as
    streamed; the heading, height and joints as streamed. Calibrated again once the stream ended
    and the robot went back to rest; off (0 s), the lean as streamed."""
    t, pos, rot, joints = _leaning_clip(4.0, 8.0, 2.0, 2.5, 5.0)
    frames = _frames(t, pos, rot, joints)
    frames.append(StreamFrame(len(frames), 0.0, None, None, end=True))
    ctl, rec, _ = _controller()
    assert ctl.settings.rest_lean_s == 1.0  # on by default
    for f in frames:
        ctl.on_frame(f)
    rest_seen: list[float] = []

    def note_rest(_: float) -> None:
        if ctl.state == "tracking" and ctl.rest_lean.pitch is not None:
            rest_seen.append(ctl.rest_lean.pitch)

    _play(ctl, 9.0, note_rest)
    level = _roll_pitch_seen(rec.calls, 1.3, 2.4)
    assert len(level) > 40
    np.testing.assert_allclose(level, np.broadcast_to([np.radians(2.0), 0.0], level.shape), atol=1e-6)
    later = _roll_pitch_seen(rec.calls, 2.6, 3.8)
    assert len(later) > 40
    np.testing.assert_allclose(later, np.broadcast_to(np.radians([2.0, 5.0]), later.shape), atol=1e-6)
    assert rest_seen[-1] == pytest.approx(np.radians(8.0), abs=1e-9)
    tracked = [c for c in rec.calls if c["state"] == "tracking" and 1.3 <= c["clock"] < 2.4]
    for c in tracked:  # the heading, height and joints are the stream's
        expected = _expected_mimic(c["clock"], t, pos, rot, joints)
        np.testing.assert_allclose(c["obs"][2], expected[2], atol=1e-6)
        np.testing.assert_allclose(c["obs"][6:35], expected[6:35], atol=1e-6)
        yaw = Rotation.from_quat(np.roll(c["reference"].root_quat, -1)).as_euler("ZYX")[0]
        assert abs(yaw - 0.2 * c["clock"]) < 1e-6
    assert ctl.state == "balancing" and ctl.rest_lean.pitch is None  # the next take calibrates on its own
    assert ctl.figures(9.0)["rest_lean_deg"] is None

    off, rec_off, _ = _controller(rest_lean_s=0.0)
    _drive(off, 4.0, frames=_frames(t, pos, rot, joints))
    streamed = _roll_pitch_seen(rec_off.calls, 1.3, 2.4)
    assert len(streamed) > 40
    np.testing.assert_allclose(streamed, np.broadcast_to(np.radians([2.0, 8.0]), streamed.shape), atol=1e-6)
    assert off.figures(4.0)["rest_lean_deg"] is None


def test_a_take_that_follows_the_end_of_the_last_is_calibrated_on_its_own() -> None:
    """A take leaning 8 deg ends, and the next (a performer leaning 2 deg) starts while the robot
    is still going back to rest: the policy sees the second take's pitch level after its own first
    second, not 6 deg back (within 0.1 deg: the playback blends one frame interval from the first
    take's last frame into the second's first)."""
    t, pos, rot, joints = _leaning_clip(3.0, 8.0, 0.0, 9.0, 0.0)
    first = _frames(t, pos, rot, joints)
    first.append(StreamFrame(len(first), 0.0, None, None, end=True))
    _, _, rot2, _ = _leaning_clip(3.0, 2.0, 0.0, 9.0, 0.0)
    second = [StreamFrame(len(first) + k, f.time_s + 3.0, f.q, f.dq, root=f.root)
              for k, f in enumerate(_frames(t, pos, rot2, joints))]
    ctl, rec, counters = _controller()
    for f in first:
        ctl.on_frame(f)
    pushed = False

    def push_the_second_take_while_ending(_: float) -> None:
        nonlocal pushed
        if not pushed and ctl.state == "ending":
            pushed = True
            for f in second:
                ctl.on_frame(f)

    _play(ctl, 8.0, push_the_second_take_while_ending)
    assert counters.transitions["ending->ramp_in"] == 1
    assert ctl.rest_lean.pitch == pytest.approx(np.radians(2.0), abs=np.radians(0.1))
    seen = _roll_pitch_seen(rec.calls, 4.2, 5.8)
    assert len(seen) > 40
    np.testing.assert_allclose(seen[:, 1], 0.0, atol=np.radians(0.1))


def test_euler_angles_round_trip_as_scipys_zyx() -> None:
    from mocapline.services.robot.policy.observation import from_yaw_pitch_roll, roll_pitch, yaw_pitch_roll

    rng = np.random.default_rng(5)
    for ypr in rng.uniform([-3.1, -1.5, -3.1], [3.1, 1.5, 3.1], size=(50, 3)):
        x, y, z, w = Rotation.from_euler("ZYX", ypr).as_quat()
        np.testing.assert_allclose(from_yaw_pitch_roll(*ypr), [w, x, y, z], atol=1e-12)
        np.testing.assert_allclose(yaw_pitch_roll(np.array([w, x, y, z])), ypr, atol=1e-9)
        np.testing.assert_allclose(roll_pitch(np.array([w, x, y, z])), ypr[[2, 1]], atol=1e-9)


def test_history_first_initialises_every_slot_with_the_first_frame() -> None:
    raw = {"robot": "g1", "rate_hz": 50, "joints": [{"name": n, "kp": 10, "kd": 1, "torque": 10}
                                                    for n in G1.joint_names[:3]],
           "action": {"scale": 1.0},
           "observation": {"history": 3, "history_init": "first", "frame": ["g"],
                           "groups": {"g": [{"source": "lowstate", "term": "projected_gravity"},
                                            {"source": "stream", "term": "root_lin_vel", "frame": "heading",
                                             "clip": 0.5, "scale": 2.0}]}}}
    policy = parse_policy(raw)
    assert policy.width == 6 * 4
    from mocapline.services.robot.policy.observation import Observation, Proprio, Reference

    obs = Observation(policy, policy.indices(G1))
    tilted = Rotation.from_euler("ZYX", [1.0, 0.0, 0.3])
    x, y, z, w = tilted.as_quat()
    state = Proprio(DEFAULT, np.zeros(N), np.array([w, x, y, z]), np.zeros(3))
    ref = Reference(np.zeros(3), np.array([w, x, y, z]), np.array([1.0, 0.0, 0.0]), np.zeros(3), DEFAULT)
    first = obs(ref, state, np.zeros(3))
    gravity = tilted.inv().apply([0, 0, -1])
    heading = Rotation.from_euler("Z", 1.0).inv().apply([1.0, 0, 0]) * 2.0
    frame = np.concatenate([gravity, np.clip(heading, -0.5, 0.5)])
    np.testing.assert_allclose(first, np.tile(frame, 4), atol=1e-6)


def test_actions_map_to_the_command_exactly_with_the_policys_gains() -> None:
    action = 0.02 * np.cos(np.arange(N))
    ctl, rec, _ = _controller(action=action)
    commands = _drive(ctl, 1.0)
    assert rec.calls and ctl.state == "balancing"
    want = TWIST2.default + 0.5 * np.clip(action, -10, 10)
    cmd = commands[-1]
    assert np.array_equal(ctl.targets[IDX], want)
    measured = ctl.measured
    # the command is the target wherever no limit acted: the torque clamp through the target
    # keeps |kp (q* - q) - kd dq| within the policy's limits at the measured state
    tau = TWIST2.kp * (want - measured.q[IDX]) - TWIST2.kd * measured.dq[IDX]
    free = np.abs(tau) <= TWIST2.torque
    assert free.sum() > N // 2
    np.testing.assert_array_equal(cmd.q[IDX][free], want[free])
    np.testing.assert_array_equal(cmd.kp[IDX], TWIST2.kp)
    np.testing.assert_array_equal(cmd.kd[IDX], TWIST2.kd)
    assert not cmd.dq.any() and not cmd.tau.any()
    big, _, _ = _controller(action=np.full(N, 30.0))
    _drive(big, 0.5)
    assert np.array_equal(big.targets[IDX], TWIST2.default + 5.0)  # clip(30, +-10) x 0.5


def test_the_policy_runs_at_its_rate_and_every_tick_sends_a_command() -> None:
    ctl, rec, _ = _controller()
    commands = _drive(ctl, 3.0)
    assert all(c is not None for c in commands)
    started = next(k for k, c in enumerate(rec.calls) if c["state"] == "balancing")
    calls = len(rec.calls) - started
    balancing_s = 3.0 - ctl.since  # the policy started when balancing began
    assert abs(calls - balancing_s * 50) <= 1, (calls, balancing_s)


def test_a_stall_holds_the_reference_still_and_the_policy_keeps_standing() -> None:
    ctl, rec, counters = _controller(stall_ms=100)
    t, pos, rot, joints = _clip(2.0)
    commands = _drive(ctl, 8.0, frames=_frames(t, pos, rot, joints))
    states = [c["state"] for c in rec.calls]
    assert "tracking" in states and states[-1] == "holding" and counters.stalls == 1
    assert all(c is not None and c.kp.min() > 0 for c in commands)  # never damping a standing robot
    held = [c for c in rec.calls if c["state"] == "holding"]
    assert len(held) > 200  # the policy kept running through ~5 s of stall
    for c in held:
        ref = c["reference"]
        assert not ref.root_lin_vel.any() and not ref.root_ang_vel.any()
        np.testing.assert_array_equal(ref.joint_pos, joints[-1])
    assert "damping" not in counters.transitions and counters.falls == 0


def test_the_end_of_the_stream_blends_the_reference_back_to_rest() -> None:
    ctl, rec, counters = _controller()
    t, pos, rot, joints = _clip(2.0)
    frames = _frames(t, pos, rot, joints)
    frames.append(StreamFrame(len(frames), 0.0, None, None, end=True))
    for f in frames:
        ctl.on_frame(f)
    _play(ctl, 8.0)
    assert counters.transitions["tracking->ending"] == 1 and counters.transitions["ending->balancing"] == 1
    assert ctl.state == "balancing" and ctl.reference is ctl.rest


def test_a_fall_damps_counts_and_stops_the_bridge() -> None:
    ctl, _, counters = _controller()
    _drive(ctl, 1.0)
    assert ctl.state == "balancing" and not ctl.stopping
    commands = _drive(ctl, 0.1, start=1.0, tilt_deg=70.0)
    assert ctl.state == "fallen" and ctl.stopping and counters.falls == 1
    assert all(c.kp.max() == 0 and c.kd.min() > 0 for c in commands)
    spinning, _, counters = _controller()
    _drive(spinning, 1.0)
    spinning.on_state(Measured(DEFAULT.copy(), np.zeros(N), np.array([1.0, 0, 0, 0]), np.array([0.0, 12.0, 0.0])))
    assert spinning.tick(1.0, DT).kp.max() == 0 and spinning.state == "fallen" and counters.falls == 1


def test_a_robot_lying_at_the_start_is_not_stood_up() -> None:
    ctl, rec, counters = _controller()
    commands = _drive(ctl, 0.5, tilt_deg=85.0)
    assert ctl.state == "fallen" and counters.transitions["waiting->fallen"] == 1 and not rec.calls
    assert all(c.kp.max() == 0 for c in commands)


def test_estop_damps() -> None:
    ctl, _, counters = _controller()
    _drive(ctl, 1.0)
    ctl.estop("test", 1.0)
    commands = _drive(ctl, 0.2, start=1.0)
    assert ctl.state == "estop" and counters.estops == 1
    assert all(c.kp.max() == 0 and c.kd.min() > 0 for c in commands)


def test_a_restart_takes_over_from_the_measured_pose_without_a_jump() -> None:
    """A bridge restarted under a standing robot (its last targets still held by the motors): the first
    command is where the robot is, every step after within the velocity limits, the policy runs
    within a fraction of a second."""
    ctl, rec, _ = _controller(min_ramp_s=0.3, ramp_speed=1.0)
    commands = _drive(ctl, 1.0, start=100.0)
    first = commands[0]
    np.testing.assert_allclose(first.q, _measured(100.0).q, atol=1e-12)
    steps = np.abs(np.diff([c.q for c in commands], axis=0))
    assert np.all(steps <= VELOCITY_LIMITS * 2 * DT + 1e-9)
    assert rec.calls and ctl.state == "balancing"
    assert ctl.since - 100.0 <= 0.31  # standup: at least 0.3 s, the move is small


def test_the_onnx_runner_feeds_the_graph_the_observation(tmp_path: Path) -> None:
    from mocapline.services.robot.policy.runner import PolicyRunner

    rng = np.random.default_rng(3)
    weight, bias = rng.normal(size=(1432, N)) * 0.01, rng.normal(size=N)
    runner = PolicyRunner(linear_policy(tmp_path / "p.onnx", weight, bias), TWIST2)
    obs = rng.normal(size=1432).astype(np.float32)
    np.testing.assert_allclose(runner(obs), obs.astype(np.float64) @ weight + bias, rtol=1e-4, atol=1e-4)
    assert runner.last_s > 0


def test_a_description_whose_width_is_not_the_graphs_is_refused_with_both_widths(tmp_path: Path) -> None:
    from mocapline.services.robot.policy.runner import PolicyRunner

    path = linear_policy(tmp_path / "narrow.onnx", np.zeros((1402, N)))  # their script's comment says 1402
    with pytest.raises(PolicyDescriptionError, match=r"1432 wide.*1402 wide"):
        PolicyRunner(path, TWIST2)


def test_malformed_descriptions_are_refused_by_name() -> None:
    base = {"robot": "g1", "rate_hz": 50, "joints": [{"name": G1.joint_names[0], "kp": 1, "kd": 0, "torque": 1}],
            "action": {}, "observation": {"frame": ["g"], "groups": {"g": [{"source": "stream", "term": "nope"}]}}}
    with pytest.raises(PolicyDescriptionError, match="no term stream.nope"):
        parse_policy(base)
    base["observation"]["groups"]["g"] = [{"source": "lowstate", "term": "joint_vel", "zero": ["elbow"]}]
    with pytest.raises(PolicyDescriptionError, match="not policy joints"):
        parse_policy(base)
    other = parse_policy({**base, "joints": [{"name": "no_such_joint", "kp": 1, "kd": 0, "torque": 1}],
                          "observation": {"frame": []}})
    with pytest.raises(PolicyDescriptionError, match="no_such_joint"):
        other.indices(G1)


def test_the_reference_velocity_is_not_differenced_across_a_loop_of_the_take() -> None:
    """A take looping with its stream time running on (the demo under `up --demo`): the root jumps
    back to the take's start; the velocity there is one-sided, not a 30 m/s spike."""
    from mocapline.services.robot.timeline import Timeline

    tl = Timeline(max_speed=1.0, play_root=True)
    t, pos, rot, joints = _clip(1.0)
    frames = _frames(t, pos, rot, joints)
    looped = frames + [StreamFrame(50 + k, 1.0 + f.time_s, f.q.copy(), f.dq.copy(), root=f.root.copy())
                       for k, f in enumerate(_frames(t, pos, rot, joints))]
    for f in looped:
        tl.push(f)
    speeds = []
    for _ in range(int(1.9 / DT)):
        step = tl.step(DT)
        speeds.append(float(np.linalg.norm(step.root_vel[:3])))
    assert max(speeds) < 1.0, max(speeds)  # the clip's root moves at most ~0.5 m/s
    assert min(speeds[10:]) > 0.1  # one-sided at the jump, never zeroed there
