"""The bridge's parts without I/O: the timeline's playback (every frame, in order, catch-up within
bounds), the safety filter, the controller's states; and the sim's physics (motor law, torque
limits, determinism)."""

from __future__ import annotations

import numpy as np
import pytest
from g1_facts import G1, KD, KP, STAND, VELOCITY_LIMITS, joint_ranges, load_ik_model
from hypothesis import given, settings
from hypothesis import strategies as st

from mocapline.robot.unitree.hg import LOW_CMD
from mocapline.services.robot.controller import Controller, ControlSettings, Measured
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.safety import Limits, SafetyFilter
from mocapline.services.robot.timeline import StreamFrame, Timeline

TORQUE = np.full(29, 25.0)


def _limits(margin: float = 0.05) -> Limits:
    return Limits.with_margin(joint_ranges(load_ik_model()), VELOCITY_LIMITS, TORQUE, margin)


def _frame(i: int, value: float, rate: float = 50.0) -> StreamFrame:
    return StreamFrame(i, i / rate, np.full(29, value), np.zeros(29))


def test_the_timeline_reaches_every_frame_in_order_and_interpolates_between() -> None:
    tl = Timeline(max_speed=1.0)
    for i in range(5):
        tl.push(_frame(i, 0.1 * i))
    reached, qs = [], []
    for _ in range(60):
        step = tl.step(0.002)
        assert step is not None
        reached += [f.frame_id for f in step.reached]
        qs.append(step.q[0])
    assert reached == [0, 1, 2, 3, 4]
    assert np.all(np.diff(qs) >= -1e-12) and qs[-1] == pytest.approx(0.4)
    assert qs[5] == pytest.approx(0.1 * 6 * 0.002 / 0.02, rel=1e-6)  # linear in time: 12 ms of 20


def test_rejected_and_end_frames_pass_in_order_without_a_target() -> None:
    tl = Timeline()
    tl.push(_frame(0, 0.0))
    tl.push(StreamFrame(1, 0.0, None, None))
    tl.push(_frame(2, 0.2))
    tl.push(StreamFrame(3, 0.0, None, None, end=True))
    order = []
    for _ in range(40):
        step = tl.step(0.002)
        assert step is not None and np.all(np.isfinite(step.q))
        order += [f.frame_id for f in step.reached]
    assert order == [0, 1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(st.integers(10, 200), st.floats(1.0, 2.0))
def test_catch_up_never_exceeds_its_bound(backlog: int, max_speed: float) -> None:
    tl = Timeline(max_speed=max_speed, velocity_limits=VELOCITY_LIMITS)
    for i in range(backlog):
        tl.push(_frame(i, 0.01 * np.sin(i)))
    seen = []
    for _ in range(backlog * 20):
        step = tl.step(0.002)
        assert step is not None and 1.0 <= step.speed <= max_speed
        seen += [f.frame_id for f in step.reached]
    assert seen == list(range(backlog))
    if max_speed > 1.0 and backlog * 0.02 > 2 * (0.02 + tl.lag_target_s):
        assert tl.catchup_steps > 0


def test_the_safety_filter_clamps_range_velocity_torque_and_non_finite() -> None:
    safety = SafetyFilter(_limits())
    prev = STAND.copy()
    wild = STAND.copy()
    wild[15] = 10.0  # far past the shoulder's stop
    wild[16] = float("nan")
    q = safety.target(wild, prev, 0.002)
    assert np.all(np.isfinite(q))
    assert np.all(np.abs(q - prev) <= VELOCITY_LIMITS * 0.002 + 1e-12)
    assert safety.clamps["range"] == 1 and safety.clamps["velocity"] == 1 and safety.clamps["non_finite"] == 1
    assert np.all(np.abs(safety.torque(np.full(29, 100.0))) <= TORQUE) and safety.clamps["torque"] == 1


def test_the_controller_waits_damped_ramps_in_from_the_measured_pose_and_holds_on_a_stall() -> None:
    counters = RobotCounters.for_robot(G1)
    ctl = Controller(G1, ControlSettings(bias=False, stall_ms=50, stall_damp_ms=100, min_ramp_s=0.1),
                     SafetyFilter(_limits()), counters)
    measured = STAND.copy()
    measured[15] = -0.5
    ctl.on_state(Measured(measured, np.zeros(29), np.array([1.0, 0, 0, 0])))
    cmd = ctl.tick(0.0, 0.002)
    assert cmd is not None and ctl.state == "waiting" and np.all(cmd.kp == 0) and np.all(cmd.kd > 0)
    target = STAND.copy()
    for i in range(10):
        ctl.on_frame(StreamFrame(i, i / 50, target.copy(), np.zeros(29)))
    cmd = ctl.tick(0.002, 0.002)
    assert ctl.state == "ramp_in" and cmd is not None
    assert np.allclose(cmd.q, measured, atol=1e-3)  # the ramp begins where the robot is
    assert np.array_equal(cmd.kp, KP) and np.array_equal(cmd.kd, KD)
    now = 0.002
    states = []
    for _ in range(400):
        now += 0.002
        cmd = ctl.tick(now, 0.002)
        states.append(ctl.state)
    assert "tracking" in states and "holding" in states and states[-1] == "damping"
    assert counters.stalls == 1 and counters.robot_applied == 0  # applied is the service's count
    assert counters.transitions["holding->damping"] == 1


def _command(q: np.ndarray) -> np.ndarray:
    cmd = LOW_CMD.new()
    m = cmd["motor_cmd"][:29]
    m["mode"], m["q"], m["kp"], m["kd"] = 1, q, KP, KD
    LOW_CMD.seal(cmd)
    return cmd


def test_the_sim_is_deterministic_and_clips_torques_to_the_model_limits() -> None:
    from mocapline.tools.sim.physics import RobotPhysics

    runs = []
    for _ in range(2):
        sim = RobotPhysics(G1, "band")
        states = []
        for k in range(200):
            q = STAND.copy()
            q[15] = -0.5 * np.sin(k / 50)
            assert sim.apply(_command(q))
            sim.step()
            states.append(sim.state().tobytes())
        runs.append(states)
    assert runs[0] == runs[1]
    sim = RobotPhysics(G1, "fixed")
    far = STAND.copy()
    far[:] = 2.0
    sim.apply(_command(far))
    assert np.all(np.abs(sim.torques()) <= sim.torque_limit + 1e-9)
    bad = _command(STAND)
    bad["motor_cmd"]["q"][3] += 0.5  # after sealing: the CRC no longer matches
    assert not sim.apply(bad)


class _Commands:
    """A command reader that hands out the given batches of LowCmd samples, one batch a take."""

    def __init__(self, batches: list[list[bytes]]) -> None:
        self.batches = batches

    def take(self, n: int) -> list[bytes]:
        assert n >= max(map(len, self.batches), default=0)  # the sim takes everything that waits, up to its depth
        return self.batches.pop(0) if self.batches else []


class _Dds:
    def __init__(self, batches: list[list[bytes]]) -> None:
        self.reader = _Commands(batches)

    def command_reader(self, topic: str | None = None) -> _Commands:
        return self.reader if topic is None else _Commands([])

    def state_writer(self) -> object:
        return None

    def base_writer(self) -> object:
        return None


def test_the_realtime_sim_steps_with_the_newest_command_and_counts_the_older_ones_superseded() -> None:
    """The sim's commands_received was 18043 against the bridge's 20551 commands_sent, unexplained:
    its DDS reader kept one command between steps, so a second one arriving within a 2 ms step
    replaced the first unseen. It now takes all that waits (READER_DEPTH) and says what became of
    each: stepped with, superseded by a newer one before the step, or rejected."""
    from types import SimpleNamespace

    from mocapline.tools.sim.service import READER_DEPTH, SimLoop

    good = LOW_CMD.sample(_command(STAND))
    bad = bytearray(good)
    bad[100] ^= 0xFF  # the CRC no longer matches
    args = SimpleNamespace(robot_model="g1", base="fixed", mode_machine=5, clock="realtime", vendor_controller="none")
    loop = SimLoop(args, dds=_Dds([[good] * 5, [bytes(bad), good], [good] * READER_DEPTH]))
    for _ in range(4):
        loop.take_commands(READER_DEPTH)
    c = loop.counters
    assert c.commands_received == 7 + READER_DEPTH
    assert c.commands_applied == 3 and c.commands_superseded == 4 + READER_DEPTH - 1
    assert c.rejected_by_reason == {"crc_or_non_finite": 1}
    assert c.commands_received == c.commands_applied + c.commands_superseded + sum(c.rejected_by_reason.values())


def test_the_band_holds_the_g1_up() -> None:
    from mocapline.tools.sim.physics import RobotPhysics

    sim = RobotPhysics(G1, "band")
    sim.apply(_command(STAND))
    tilts = []
    for _ in range(2000):
        sim.step()
        w, x, y, z = sim.data.qpos[3:7]
        tilts.append(np.degrees(np.arccos(np.clip(1 - 2 * (x * x + y * y), -1, 1))))  # pelvis z from world z
    assert 1.0 < sim.pelvis_height < 1.6
    assert max(tilts) < 30, max(tilts)  # hung at the torso, as Unitree's band does: upright, not upside down


def test_the_band_pulls_along_itself_and_damps_only_along_itself() -> None:
    from mocapline.tools.sim.physics import BAND_D, BAND_K, band_force

    anchor = np.array([0.0, 0.0, 3.0])
    pelvis = np.array([0.3, 0.0, 1.0])
    at_rest = band_force(anchor, pelvis, np.zeros(3))
    assert np.allclose(at_rest, BAND_K * (anchor - pelvis))
    sideways = band_force(anchor, pelvis, np.array([0.0, 2.0, 0.0]))  # across the band: no damping
    assert np.allclose(sideways, at_rest)
    up = (anchor - pelvis) / np.linalg.norm(anchor - pelvis)
    assert np.allclose(band_force(anchor, pelvis, up), at_rest - BAND_D * up)


def test_the_band_holds_each_build_clear_of_the_floor() -> None:
    """Its anchor is where the robot's weight stretches it to hold the pelvis BAND_CLEARANCE above
    standing height: the G1's 3 m up (as it was fixed before), the heavier, taller H1's higher."""
    from mocapline.robot.registry import get_robot
    from mocapline.tools.sim.physics import BAND_CLEARANCE, band_anchor, sim_model

    g1 = band_anchor(G1, sim_model(G1, "band"))
    assert g1[2] == pytest.approx(3.0, abs=0.01)
    h1 = get_robot("h1")
    anchor = band_anchor(h1, sim_model(h1, "band"))
    assert anchor[2] > g1[2]
    mass = float(sim_model(h1, "band").body_mass.sum())
    assert anchor[2] - mass * 9.81 / 200.0 == pytest.approx(h1.standing_height + BAND_CLEARANCE, abs=1e-6)


def _start_delays(lag_target_s: float, seed: int = 0, frames: int = 1500) -> np.ndarray:
    """Frames of a 60 Hz stream arriving with the pipeline's jitter (exponential, 1.5 ms mean, and
    5% up to 10 ms later), played by a 500 Hz tick in simulated time: for each frame, the time from
    its arrival to the first command moving toward it."""
    rng = np.random.default_rng(seed)
    interval, period = 1 / 60, 0.002
    arrive = np.arange(frames) * interval + rng.exponential(0.0015, frames)
    arrive += (rng.random(frames) < 0.05) * rng.uniform(0, 0.01, frames)
    arrive = np.maximum.accumulate(arrive)
    tl = Timeline(lag_target_s=lag_target_s)
    delays, pushed, now = [], 0, arrive[0]
    while pushed < frames or tl.queue:
        while pushed < frames and arrive[pushed] <= now:
            tl.push(StreamFrame(pushed, pushed * interval, np.full(3, float(pushed)), np.zeros(3)))
            pushed += 1
        step = tl.step(period)
        delays += [now - arrive[f.frame_id] for f in (step.started if step else [])]
        now += period
    return np.array(delays[100:])


def test_the_playback_sheds_the_lag_late_frames_leave() -> None:
    default = float(np.median(_start_delays(Timeline().lag_target_s)))
    loose = float(np.median(_start_delays(0.005)))
    assert default < 0.0025 < loose  # the default target keeps a frame's start near its arrival


def _held_error(support: str | None, base: str, seconds: float = 3.0) -> dict[str, float]:
    """The G1 in physics held at a bent pose (waist pitched, arms forward, elbows bent) by
    Unitree's gains with the bias torque of ``support`` (None: no bias): mean |error| by group over
    the last half."""
    from mocapline.services.robot.bias import BiasTorque
    from mocapline.tools.sim.physics import MotorCommand, RobotPhysics

    bias = BiasTorque(G1, support) if support else None
    pose = STAND.copy()
    pose[12:15] = (0.3, 0.2, 0.3)
    pose[[15, 22]], pose[[18, 25]] = -1.0, 1.0
    sim = RobotPhysics(G1, base)
    steps = int(seconds / sim.model.opt.timestep)
    errors = []
    for k in range(steps):
        q = sim.data.qpos[sim.qadr].copy()
        tau = bias(q, sim.data.qpos[3:7].copy()) if bias else np.zeros(29)
        sim.command = MotorCommand(np.ones(29, dtype=bool), pose, np.zeros(29), tau, KP.astype(float),
                                   KD.astype(float))
        sim.step()
        if k >= steps // 2:
            errors.append(np.abs(sim.data.qpos[sim.qadr] - pose))
    e = np.mean(errors, axis=0)
    return {"legs": float(e[:12].mean()), "waist": float(e[12:15].mean()), "arms": float(e[15:].mean())}


def test_the_bias_torque_holds_what_its_support_leaves_to_the_joints() -> None:
    # on the band (a rope at the torso) the waist carries the pelvis and legs, not the torso: the
    # bias of a held pelvis pulls the waist off; either bias takes the arms' weight off the gains
    band = {s: _held_error(s, "band") for s in (None, "torso", "pelvis")}
    assert band["torso"]["waist"] < 0.5 * band["pelvis"]["waist"], band
    assert band["torso"]["arms"] < 0.2 * band[None]["arms"], band
    # with the pelvis held still, MuJoCo's bias as it is: the waist and arms track almost exactly
    fixed = {s: _held_error(s, "fixed") for s in ("torso", "pelvis")}
    assert fixed["pelvis"]["waist"] < 0.01 < fixed["torso"]["waist"], fixed
    assert fixed["pelvis"]["arms"] < 0.01, fixed
