"""`mocapline robot` against `mocapline sim` over DDS on loopback (a private domain per test),
fed by a robot port in this process: every frame applied, within the limits, through ramp-in,
stall, e-stop, a NaN frame and a kill -9 of the bridge."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyclonedds")

from g1_facts import VELOCITY_LIMITS  # noqa: E402
from helpers import wait_until  # noqa: E402
from robot_rig import Port, Spy, motion, private_domain, start_robot, start_sim  # noqa: E402

pytestmark = pytest.mark.integration


def _stiff(spy: Spy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, q, kp) of every command seen."""
    t = np.array([t for t, _ in spy.commands])
    q = np.array([c["motor_cmd"]["q"][:29] for _, c in spy.commands], dtype=np.float64)
    kp = np.array([c["motor_cmd"]["kp"][:29] for _, c in spy.commands], dtype=np.float64)
    return t, q, kp


def _assert_commands_safe(spy: Spy, rate: float = 500.0) -> None:
    """No NaN/inf anywhere; between two stiff commands no joint moves faster than its limit (the
    spy may miss commands: a step over k periods may be k times one)."""
    assert spy.commands, "no LowCmd seen"
    for _, c in spy.commands:
        m = c["motor_cmd"]
        for f in ("q", "dq", "tau", "kp", "kd"):
            assert np.all(np.isfinite(m[f])), f"a command carries a non-finite {f}"
    t, q, kp = _stiff(spy)
    stiff = (kp[:-1, 20] > 0) & (kp[1:, 20] > 0)
    ticks = np.array([c["crc"] for _, c in spy.commands])  # every command distinct (sealed)
    assert len(ticks) == len(spy.commands)
    steps = np.abs(np.diff(q, axis=0))[stiff]
    # the bridge limits each step to vlim over at most two periods, however late the tick (the
    # spy's reliable reader sees every command on loopback, but allow a rare lost sample)
    assert steps.size
    over = np.any(steps > VELOCITY_LIMITS * 2.0 / rate + 1e-4, axis=1)
    assert over.sum() <= max(1, steps.shape[0] // 1000), np.max(steps / VELOCITY_LIMITS) * rate


@pytest.fixture
def rig(tmp_path: Path):
    domain = private_domain()
    sim = start_sim(domain, clock="lockstep")
    spy = Spy(domain)
    port = Port(tmp_path / "port")
    made = {"sim": sim, "spy": spy, "port": port, "domain": domain}
    yield made
    for key in ("robot", "robot2"):
        if key in made:
            made[key].kill()
    sim.kill()
    spy.close()
    port.close()


def _wait_tracking(spy: Spy) -> None:
    wait_until(lambda: any(c["motor_cmd"]["kp"][20] > 0 for _, c in spy.commands[-50:]), 60, what="stiff commands")


def test_a_take_is_applied_frame_by_frame_within_the_limits_and_a_nan_frame_is_rejected(rig, tmp_path) -> None:
    port, spy = rig["port"], rig["spy"]
    robot = rig["robot"] = start_robot(rig["domain"], port, tmp_path / "robot", "--nats", "")
    wait_until(lambda: spy.commands, 60, what="the bridge commanding (damping until frames come)")
    frames = motion(250, amplitude=0.4, hz=0.3)
    frames[120] = (frames[120][0].copy(), frames[120][1])
    frames[120][0][17] = float("nan")
    port.play(frames, end=True)
    wait_until(lambda: port.counts()["delivered"] == 250, 60, what="every frame acknowledged")
    final, err = robot.stop()
    assert final is not None, err
    assert final["robot_received"] == 249 and final["robot_applied"] == 249
    assert final["rejected_by_reason"] == {"non_finite": 1}
    assert final["transitions"]["waiting->ramp_in"] == 1 and final["transitions"]["ramp_in->tracking"] == 1
    assert final["transitions"]["tracking->ended"] == 1 and final["estops"] == 1
    arms = final["tracking_error_rad"]["arms"]
    assert arms["mean"] < 0.2 and arms["p99"] < 0.6, arms
    _assert_commands_safe(spy)
    _assert_ramp_starts_at_the_measured_pose(spy, 0, frames[0][0])


def _assert_ramp_starts_at_the_measured_pose(spy: Spy, since: int, stream_q: np.ndarray | None = None) -> None:
    """The first stiff command after ``since`` is a LowState the sim published, as the bridge's
    safety filter passes it (clipped to the range with its margin, sent as float32): matched by
    content against every state the spy saw, not by when the spy happened to read it (under load
    those stamps and the damped, drooping arm made a 10 ms look 0.35 rad off). ``stream_q``: where
    a ramp from the stream instead of the robot would have started; it must be far from that."""
    from mocapline.robot.registry import get_robot
    from mocapline.services.robot.service import robot_limits

    first = next(c for _, c in spy.commands[since:] if c["motor_cmd"]["kp"][20] > 0)["motor_cmd"]["q"][:29]
    limits = robot_limits(get_robot("g1"), 0.05)  # the bridge's --range-margin default
    states = np.array([s["motor_state"]["q"][:29] for _, s in spy.states], dtype=np.float64)
    passed = np.clip(states, limits.lower, limits.upper).astype(np.float32)
    nearest = float(np.min(np.max(np.abs(passed - first), axis=1)))
    assert nearest <= 1e-6, f"the first stiff command is {nearest:.4f} rad from every LowState published"
    if stream_q is not None:
        stream = np.clip(stream_q, limits.lower, limits.upper).astype(np.float32)
        assert float(np.max(np.abs(first - stream))) > 0.2, "the ramp started at the stream's pose"


def test_stall_holds_then_damps_then_ramps_back_in(rig, tmp_path) -> None:
    port, spy = rig["port"], rig["spy"]
    robot = rig["robot"] = start_robot(rig["domain"], port, tmp_path / "robot", "--nats", "",
                                       "--stall-damp-ms", "400")
    wait_until(lambda: spy.commands, 60, what="the bridge commanding (damping until frames come)")
    frames = motion(200, amplitude=0.3, hz=0.3)
    port.play(frames[:100])
    _wait_tracking(spy)
    wait_until(lambda: any(c["motor_cmd"]["kp"][20] == 0 for _, c in spy.commands[-20:]), 20, what="damping")
    damped_at = len(spy.commands)
    port.play(frames[100:], start=100, end=True)
    wait_until(lambda: port.counts()["delivered"] == 200, 60, what="every frame acknowledged")
    wait_until(lambda: any(c["motor_cmd"]["kp"][20] > 0 for _, c in spy.commands[damped_at:]), 20,
               what="stiff again")
    final, err = robot.stop()
    assert final is not None, err
    assert final["robot_applied"] == 200
    assert final["stalls"] >= 1 and final["damped_s"] > 0
    for edge in ("tracking->holding", "holding->damping", "damping->ramp_in"):
        assert final["transitions"].get(edge, 0) >= 1, (edge, final["transitions"])
    damping = [c for _, c in spy.commands[:damped_at] if c["motor_cmd"]["kp"][20] == 0]
    assert damping and all(float(c["motor_cmd"]["kd"][20]) > 0 for c in damping)
    _assert_commands_safe(spy)


def test_estop_over_nats_damps_and_exits(rig, tmp_path, nats_server) -> None:
    from mocapline.core.bus import request
    from mocapline.core.counters import RobotCounts, decode
    from mocapline.core.lifecycle import EXIT_STOPPED

    port, spy = rig["port"], rig["spy"]
    robot = rig["robot"] = start_robot(rig["domain"], port, tmp_path / "robot", "--nats", nats_server.url,
                                       "--estop-damp-s", "0.5")
    wait_until(lambda: spy.commands, 60, what="the bridge commanding (damping until frames come)")
    player = threading.Thread(target=port.play, args=(motion(500, amplitude=0.3),), daemon=True)
    player.start()
    _wait_tracking(spy)
    answer = asyncio.run(request(nats_server.url, "robot", "estop", timeout=5.0))
    assert "error" not in answer, answer
    assert decode(RobotCounts, answer).estops == 1  # the answer is the bridge's published counts
    wait_until(lambda: robot.proc.poll() is not None, 20, what="the bridge to exit after its e-stop")
    assert robot.proc.returncode == EXIT_STOPPED  # stopped for good: `up` must not start it again
    final, err = robot.stop()
    assert final is not None and final["estops"] == 1, err
    last = spy.commands[-1][1]["motor_cmd"]
    assert float(last["kp"][20]) == 0 and float(last["kd"][20]) > 0
    assert final["robot_state"] == "estop"
    player.join(15)


def test_kill_9_mid_take_and_restart_resume_at_the_stored_position_without_a_jump(rig, tmp_path) -> None:
    port, spy = rig["port"], rig["spy"]
    state = tmp_path / "robot"
    robot = rig["robot"] = start_robot(rig["domain"], port, state, "--nats", "")
    wait_until(lambda: spy.commands, 60, what="the bridge commanding (damping until frames come)")
    frames = motion(300, amplitude=0.3, hz=0.3)
    player = threading.Thread(target=port.play, args=(frames,), kwargs={"end": True}, daemon=True)
    player.start()
    wait_until(lambda: port.counts()["delivered"] >= 100, 60, what="a third of the take")
    robot.stop(signal.SIGKILL)
    killed_at = len(spy.commands)
    time.sleep(0.5)
    robot2 = rig["robot2"] = start_robot(rig["domain"], port, state, "--nats", "")
    player.join(30)
    wait_until(lambda: port.counts()["delivered"] == 300, 60, what="every frame acknowledged after the restart")
    final, err = robot2.stop()
    assert final is not None, err
    assert final["robot_applied"] == 300  # restored from the bridge's record, continued: none lost, none twice
    _assert_commands_safe(spy)
    _assert_ramp_starts_at_the_measured_pose(spy, killed_at)


def test_a_bridge_joining_a_running_take_gets_the_frames_made_after_it_joined(rig, tmp_path) -> None:
    """A consumer joining a running take starts where the others are (docs/protocol.md), and stays
    there while it waits idle: its keep-alive HELLOs say it holds what its WELCOME skipped. (Its
    ack cap was the last frame it applied, -1: each HELLO rewound it to the take's first frame, the
    port resent the take to it, which it dropped as duplicates, and held its log for it.)"""
    port = rig["port"]
    frames = motion(200, amplitude=0.3, hz=0.3)
    first = rig["robot"] = start_robot(rig["domain"], port, tmp_path / "first", "--nats", "", "--name", "first")
    wait_until(lambda: port.connected("first"), 60, what="the first bridge connected")
    port.play(frames[:100])
    wait_until(lambda: port.counts()["delivered"] == 100, 60, what="the first bridge applying the take's start")
    done, err = first.stop()
    assert done is not None and done["robot_applied"] == 100, err
    second = rig["robot2"] = start_robot(rig["domain"], port, tmp_path / "second", "--nats", "", "--name", "second")
    wait_until(lambda: port.connected("second"), 60, what="the second bridge connected")
    time.sleep(3.0)  # idle: keep-alive HELLOs (0.25 s, then backing off to 2 s)

    def second_counts() -> dict[str, int]:
        with port.lock:
            counts: dict[str, int] = port.sender.snapshot()["consumers"]["second"]
        return counts

    joined = second_counts()
    assert joined["next_frame_id"] == 100 and joined["backlog"] == 0 and joined["resent"] == 0, joined
    port.play(frames[100:], start=100, end=True)
    wait_until(lambda: second_counts()["frames_acked"] >= 100, 60, what="the second bridge applying the rest")
    final, err = second.stop()
    assert final is not None, err
    assert final["robot_received"] == final["robot_applied"] == 100, final
    assert second_counts()["frames_sent"] == 100, second_counts()


@pytest.mark.parametrize("robot_model", ["g1", "g1_23", "g1_dex3", "h1"])
def test_the_pipeline_with_the_robot_end_is_conserved_through_the_robot(tmp_path, robot_model: str) -> None:
    """`mocapline up --robot sim --robot-model X` as the stack runs it: a take from UDP to the build's
    simulated motors, every unique frame applied by the bridge, the verdict judging the robot's
    layer; the LowCmd on the domain is the build's family, its joints' slots enabled, no other."""
    from mocapline.robot.registry import get_robot
    from mocapline.tools.emitter.emitter import TakePlan, emit_take
    from mocapline.tools.pipeline.stack import Stack, local_config

    robot = get_robot(robot_model)
    config = local_config(viewer=True, robot="sim", robot_domain=private_domain(), robot_interface="lo",
                          robot_model=robot_model, state_dir=tmp_path / "state", log_dir=tmp_path / "logs")
    stack = Stack(config)
    spy = Spy(config.robot_domain, robot_model)
    try:
        stack.start()
        stack.wait_ready(timeout=120)
        emit_take(TakePlan(frames=240, first_index=100), [("127.0.0.1", config.main_port)], rate_hz=60)
        finals = stack.drain()
        verdict = stack.verdict(finals)
        end = stack.stop_robot_end()  # as `up` does after the final ledger
    finally:
        stack.stop()
        spy.close()
    assert finals["robot"]["robot_applied"] == 240
    assert verdict["robot_applied"] == 240 and verdict["state"] == "conserved", verdict
    assert finals["robot"]["commands_sent"] > 0 and not finals["robot"]["rejected_by_reason"]
    assert spy.commands and spy.states, "LowCmd and LowState of the build's family on the domain"
    layout = spy.family.low_cmd
    stiff = [c for _, c in spy.commands if layout.crc_ok(c) and c["motor_cmd"]["kp"].max() > 0]
    assert stiff, "stiff commands"
    modes = stiff[-1]["motor_cmd"]["mode"]
    assert np.array_equal(np.flatnonzero(modes), np.sort(robot.motor_index))
    np.testing.assert_array_equal(modes[robot.motor_index], robot.motor_modes)
    # how the bridge kept up, in the ledger itself (it was only on robot.log's last line)
    assert verdict["robot"]["commands_sent"] == finals["robot"]["commands_sent"]
    figures = {"period_p99_ms", "deadline_misses", "stalls", "latency_p99_ms", "tracking_error_rad"}
    assert figures <= verdict["robot"].keys(), verdict["robot"]
    # the sim took every LowCmd the bridge sent, each stepped with or superseded, none unexplained
    assert end is not None and end.sim is not None
    sim = end.sim
    assert sim.commands_received == end.bridge.commands_sent > finals["robot"]["commands_sent"], end
    assert sim.commands_received == sim.commands_applied + sim.commands_superseded and not sim.rejected_by_reason
    assert "not received" not in end.lines()[-1], end.lines()


def _lockstep_rig(tmp_path: Path, *sim_args: str, topic: str | None = None) -> dict:
    domain = private_domain()
    return {"domain": domain, "sim": start_sim(domain, *sim_args, "--clock", "lockstep"),
            "spy": Spy(domain, command_topic=topic), "port": Port(tmp_path / "port")}


def _close(made: dict) -> dict | None:
    for key in ("robot", "robot2"):
        if key in made:
            made[key].kill()
    final, _ = made["sim"].stop()
    made["spy"].close()
    made["port"].close()
    return final


def test_arm_sdk_ramps_the_weight_in_and_out_and_leaves_the_legs_to_the_vendor(tmp_path) -> None:
    """`--controller arm-sdk` against `mocapline sim --vendor-controller stand` (the robot's own
    controller stood in for; both in simulated time): every frame applied; only rt/arm_sdk is sent,
    its weight rising from 0 to 1 and back to 0 at the end at most 1/ramp_s a second, the legs'
    slots never enabled; the sim blends it in and its legs stay at the stand pose."""
    from g1_facts import G1, LEGS, STAND

    made = _lockstep_rig(tmp_path, "band", "--vendor-controller", "stand", topic=G1.low_level.arm_sdk_topic)
    port, spy = made["port"], made["spy"]
    try:
        made["robot"] = robot = start_robot(made["domain"], port, tmp_path / "robot", "--nats", "", "--controller",
                                            "arm-sdk", "--clock", "lowstate", "--arm-sdk-ramp-s", "0.5",
                                            "--max-speed", "1")
        wait_until(lambda: spy.commands, 60, what="arm_sdk commands")
        port.play(motion(75, amplitude=0.3, hz=0.5), end=True)
        wait_until(lambda: port.counts()["delivered"] == 75, 120, what="every frame acknowledged")
        slot = G1.low_level.arm_sdk_weight_slot
        wait_until(lambda: spy.commands[-1][1]["motor_cmd"]["q"][slot] == 0.0 and len(spy.commands) > 500, 60,
                   what="the weight ramped out after the end")
        final, err = robot.stop()
        assert final is not None, err
    finally:
        sim = _close(made)
    assert final["robot_applied"] == 75 and final["controller"] == "arm-sdk"
    weights = np.array([c["motor_cmd"]["q"][slot] for _, c in spy.commands], dtype=np.float64)
    assert weights[0] == 0.0 and weights.max() == 1.0 and weights[-1] == 0.0
    up = int(np.argmax(weights == 1.0))
    assert np.all(np.diff(weights[:up]) >= -1e-7)  # in: monotonic
    assert np.all(np.abs(np.diff(weights)) <= 0.002 / 0.5 * 2 + 1e-6)  # never faster than 1/ramp_s
    legs = G1.motor_index[LEGS]
    for _, c in spy.commands:
        m = c["motor_cmd"]
        assert not m["mode"][legs].any() and not m["kp"][legs].any()
    assert sim is not None and sim["arm_sdk_applied"] > 500 and sim["commands_received"] == 0  # no LowCmd at all
    states = [s for _, s in spy.states]
    legs_q = np.array([s["motor_state"]["q"][legs] for s in states[len(states) // 2:]], dtype=np.float64)
    assert np.max(np.abs(legs_q - STAND[LEGS])) < 0.1  # the vendor's stand-in kept them


def test_the_policy_controller_applies_every_frame_and_a_kill_9_restart_takes_over_without_a_jump(tmp_path) -> None:
    """`--controller policy` (a constant policy built here) against `mocapline sim` in simulated
    time: every frame applied once across a kill -9 and a restart, the commands carry the policy's
    gains, the policy runs at its 50 Hz of robot time (within the stand-up), the restarted bridge's first command is the
    measured pose."""
    pytest.importorskip("onnxruntime")
    from g1_facts import G1
    from policy_graphs import constant_policy

    from mocapline.services.robot.policy.description import load_policy

    policy = load_policy("twist2_g1")
    onnx = constant_policy(tmp_path / "const.onnx", policy.width, 0.02 * np.sin(np.arange(G1.joint_count)))
    made = _lockstep_rig(tmp_path, "fixed")
    port, spy, state = made["port"], made["spy"], tmp_path / "robot"
    args = ("--nats", "", "--controller", "policy", "--policy", str(onnx), "--clock", "lowstate", "--max-speed", "1")
    try:
        made["robot"] = robot = start_robot(made["domain"], port, state, *args)
        wait_until(lambda: spy.commands, 60, what="the bridge commanding")
        player = threading.Thread(target=port.play, args=(motion(200, amplitude=0.3, hz=0.3),), kwargs={"end": True},
                                  daemon=True)
        player.start()
        wait_until(lambda: port.counts()["delivered"] >= 60, 120, what="a third of the take")
        robot.stop(signal.SIGKILL)
        killed_at = len(spy.commands)
        made["robot2"] = robot2 = start_robot(made["domain"], port, state, *args)
        player.join(60)
        wait_until(lambda: port.counts()["delivered"] == 200, 120, what="every frame acknowledged after the restart")
        final, err = robot2.stop()
        assert final is not None, err
    finally:
        _close(made)
    assert final["robot_applied"] == 200 and final["controller"] == "policy" and final["falls"] == 0
    steps = final["policy"]["policy_steps"]
    # one policy step per 10 commands (50 of 500 Hz of robot time) once it stands; the stand-up and the
    # exit's damping send commands without one
    assert 0.75 * final["commands_sent"] / 10 <= steps <= final["commands_sent"] / 10, final
    _assert_ramp_starts_at_the_measured_pose(spy, killed_at)
    stiff = [c["motor_cmd"] for _, c in spy.commands if c["motor_cmd"]["kp"][20] > 0]
    np.testing.assert_allclose(stiff[-1]["kp"][:29], policy.kp)


def test_the_hands_through_the_robot_end(tmp_path) -> None:
    """`mocapline up --robot sim --robot-model g1_dex3 --hands dex3` as the stack runs it, on the
    emitter's finger gestures: every frame applied with its hands, HandCmd_ on both hands' topics
    read by a subscriber of the IDL type (cyclonedds' own deserializer), the sim's hands closing
    into the fist, their tracking error reported."""
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    from mocapline.robot.registry import get_robot
    from mocapline.robot.unitree.dds import LowLevel, dds_settings
    from mocapline.robot.unitree.idl_hg import HandCmd_
    from mocapline.tools.emitter.emitter import TakePlan, emit_take
    from mocapline.tools.emitter.motion import GESTURE_S
    from mocapline.tools.pipeline.stack import Stack, local_config

    robot = get_robot("g1_dex3")
    config = local_config(robot="sim", robot_domain=private_domain(), robot_interface="lo", robot_model="g1_dex3",
                          robot_hands="dex3", state_dir=tmp_path / "state", log_dir=tmp_path / "logs")
    stack = Stack(config)
    ll = LowLevel(dds_settings(robot, config.robot_domain, "lo"))  # the loopback domain's config
    participant = ll.participant
    readers = [DataReader(participant, Topic(participant, t, HandCmd_)) for t in ("rt/dex3/left/cmd",
                                                                                "rt/dex3/right/cmd")]
    seen: list[list[HandCmd_]] = [[], []]
    frames = int(1.9 * GESTURE_S * 60)  # open, then the fist held
    try:
        stack.start()
        stack.wait_ready(timeout=120)
        emit_take(TakePlan(frames=frames, first_index=100), [("127.0.0.1", config.main_port)], rate_hz=60)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for side, reader in enumerate(readers):
                seen[side] += reader.take(N=256)
            time.sleep(0.05)
        finals = stack.drain()
        verdict = stack.verdict(finals)
        end = stack.stop_robot_end()
    finally:
        stack.stop()
        ll.close()
    assert finals["robot"]["robot_applied"] == frames and verdict["state"] == "conserved", verdict
    hands = finals["robot"]["hands"]
    assert hands["frames"] == frames and hands["commands_sent"] > frames and hands["states_received"] > 0, hands
    assert hands["tracking_error_mean_rad"] < 0.5, hands
    assert verdict["robot"]["hands"]["frames"] == frames  # the ledger's robot block says so too
    assert all(seen), "HandCmd_ on both hands' topics, read by the IDL type"
    for side, names in enumerate((robot.hands.left, robot.hands.right)):
        last = seen[side][-1]
        assert len(last.motor_cmd) == 7 and [m.mode for m in last.motor_cmd] == list(range(0x10, 0x17))
        q = dict(zip(names, (m.q for m in last.motor_cmd), strict=True))
        for finger in ("index", "middle"):  # the fist: every finger joint near the end it closes to
            assert all(abs(q[n]) > 1.0 for n in names if finger in n), q
    assert end is not None and end.sim is not None
    assert end.sim.hand_commands_applied > 0 and end.sim.hand_states_published > 0, end.sim
