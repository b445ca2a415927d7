"""``mocapline bench robot``: the robot end through real processes (demo take, CMU takes) beside its floor.

The demo take: the whole pipeline (NATS, capture, retarget, streamer, viewer, auditor) with the
robot bridge and `mocapline sim` (the G1 on its elastic band) on a private DDS domain on loopback,
fed the bundled demo take once per configuration (``--configs``): with the velocity feed-forward
and the bias torque, and without either. For each: the bridge's achieved command rate (over the
run) and period p99, deadline misses, latency UDP arrival at capture -> the first LowCmd moving
toward that frame (p50/p99) beside the viewer's (UDP arrival -> applied) in the same run, tracking
error in physics by joint group (mean, p99), clamps, and the CPU of each process (share of one core
over the take).

The CMU takes (``assets/motion/*.bvh``, once per ``--cmu-configs``, feed-forward and bias by
default): live capture knows only the skeletons on the Axis and Xsens wires, so these skip
capture, retarget and streamer. Each is retargeted offline by ``mocapline retarget-file`` (the same
IK, the take's 120 Hz, resampled to the streamer's 60 Hz) and the clip played at 60 Hz through a
robot port served by the streamer's own fan-out sender in this process
(``mocapline.tools.port_player``) into the same bridge and sim processes on the same kind of
domain. Their rows have the same fields where they apply; latency there runs from the port's send
(each frame stamped as it is committed) to the first LowCmd carrying it, and applied/played compares
with the frames the port played.

``--controller policy --policy FILE``: the same takes through the policy controller on
`mocapline sim --base free` (the G1 on its own feet): seconds upright, falls, joint tracking error
by group (measured minus the reference, the bridge's window sampled over the run), the base's
travel and heading change (mocapline sim's base topic) against the reference root's (the clip's),
policy inference p50/p99, command rate, latency to the first command toward a frame; the pd
controller on the band beside it (``--configs`` / ``--cmu-configs``). ``--robot-clock lockstep``
runs the sim and the bridge in simulated time (the sim steps per command, the bridge ticks on its
LowState, the stream played at 1x of it): on a loaded machine the physics is then what it would
be on an idle one, and the rate and latency figures are of wall time as it came. ``--demo-loops
N`` replays the demo take N times (each loop a new segment, as `up --demo` loops it).

Beside them, the floor: a bare DDS publisher of a constant LowCmd at the same rate (no stream, no
control), its rate, period p99 and CPU. Numbers on a shared 2-core machine are noisy: read the
ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.counters import RobotCounts, as_published, decode, read_stages
from mocapline.core.paths import ASSETS_DIR, DEMO_TAKE
from mocapline.tools.emitter.emitter import replay
from mocapline.tools.pipeline.procs import Service, last_json_line
from mocapline.tools.pipeline.stack import Stack, local_config

CONFIGS = {"ff_bias": [], "no_ff_no_bias": ["--no-feed-forward", "--no-bias"]}
CMU_TAKES = {p.stem: p for p in sorted((ASSETS_DIR / "motion").glob("cmu_*.bvh"))}
TAKES = ["demo", *CMU_TAKES]
STREAM_FPS = 60.0  # the streamer's --output-fps default: the demo's stream rate


class BaseWatch:
    """mocapline sim's base pose (its base topic) in a thread: (tick ms, position, quaternion)."""

    def __init__(self, domain: int) -> None:
        import threading

        from mocapline.robot.registry import get_robot
        from mocapline.robot.unitree.dds import LowLevel, dds_settings

        self.dds = LowLevel(dds_settings(get_robot(), domain, "lo"), depth=64)
        self.reader = self.dds.base_reader()
        self.samples: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from mocapline.robot.unitree.base import BASE_STATE

        while not self.halt.is_set():
            self.reader.wait(0.05)
            for raw in self.reader.take(64):
                rec = BASE_STATE.from_sample(raw)
                self.samples.append((int(rec["tick"]), rec["position"].astype(np.float64),
                                     rec["quaternion"].astype(np.float64)))

    def close(self) -> dict[str, Any]:
        self.halt.set()
        self.thread.join(5)
        self.dds.close()
        return base_figures(self.samples)

    def over(self, ticks_ms: list[int] | None) -> dict[str, Any]:
        return clip_figures(self.samples, ticks_ms)


def _yaw(quat: np.ndarray) -> np.ndarray:
    w, x, y, z = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    return np.unwrap(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def _tilt_deg(quat: np.ndarray) -> np.ndarray:
    x, y = quat[..., 1], quat[..., 2]
    return np.degrees(np.arccos(np.clip(1 - 2 * (x * x + y * y), -1, 1)))


def base_figures(samples: list[tuple[int, np.ndarray, np.ndarray]], fall_deg: float = 60.0) -> dict[str, Any]:
    """Seconds upright (of the sim's time, until the base first tilts past ``fall_deg``), the base's
    path length on the floor, how far it ended from where it started (on the floor), its net
    heading change and lowest height."""
    if len(samples) < 2:
        return {}
    ticks = np.array([t for t, _, _ in samples], dtype=np.float64) / 1000.0
    pos = np.array([p for _, p, _ in samples])
    quat = np.array([q for _, _, q in samples])
    down = np.flatnonzero(_tilt_deg(quat) > fall_deg)
    end = int(down[0]) if down.size else len(samples) - 1
    step = np.linalg.norm(np.diff(pos[: end + 1, :2], axis=0), axis=1)
    return {"sim_s": round(float(ticks[-1] - ticks[0]), 2), "upright_s": round(float(ticks[end] - ticks[0]), 2),
            "base_path_m": round(float(step[step < 0.5].sum()), 3),  # a jump (a reset) is no travel
            "base_offset_m": round(float(np.linalg.norm(pos[end, :2] - pos[0, :2])), 3),
            "base_heading_deg": round(float(np.degrees(_yaw(quat[: end + 1])[-1] - _yaw(quat[:1])[0])), 1),
            "base_min_height_m": round(float(pos[: end + 1, 2].min()), 3)}


def clip_figures(samples: list[tuple[int, np.ndarray, np.ndarray]], ticks_ms: list[int] | None) -> dict[str, Any]:
    """``base_figures`` over the sim's ticks ``[first, last]`` only (the take's own time on the
    robot: the bridge's ``applied_ticks_ms``), keys prefixed ``clip_``; empty without them."""
    if not ticks_ms:
        return {}
    first, last = ticks_ms
    window = [s for s in samples if first <= s[0] <= last]
    return {f"clip_{k}": v for k, v in base_figures(window).items()}


def reference_figures(clip: Any) -> dict[str, Any]:
    """The reference root's path length on the floor, how far it ended from where it started, and its
    heading change over a clip."""
    root = np.asarray(clip["root_pose"], dtype=np.float64)
    step = np.linalg.norm(np.diff(root[:, :2], axis=0), axis=1)
    yaw = _yaw(root[:, 3:7])
    return {"ref_path_m": round(float(step.sum()), 3),
            "ref_offset_m": round(float(np.linalg.norm(root[-1, :2] - root[0, :2])), 3),
            "ref_heading_deg": round(float(np.degrees(yaw[-1] - yaw[0])), 1)}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _domain() -> int:
    return 100 + os.getpid() % 120


def run_take(name: str, extra: list[str], domain: int, *, base: str = "band", controller: str = "pd",
             policy: str = "", clock: str = "realtime", loops: int = 1) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="mocapline-bench-robot-"))
    config = local_config(viewer=True, robot="sim", robot_domain=domain, robot_interface="lo",
                          state_dir=state / "state", log_dir=state / "logs", robot_args=extra, robot_base=base,
                          robot_controller=controller, robot_policy=policy, robot_clock=clock)
    stack = Stack(config)
    watch = BaseWatch(domain)
    samples: list[RobotCounts] = []
    try:
        stack.start()
        stack.wait_ready()
        time.sleep(2.0)  # the bridge takes the sim's state and waits, damped
        pids = {n: s.proc.pid for n, s in stack.services.items() if s.proc is not None}
        before = {n: cpu_seconds(p) for n, p in pids.items()}
        t0 = time.monotonic()
        for _ in range(loops):
            replay(DEMO_TAKE, [("127.0.0.1", config.main_port)])
            samples.append(_status(stack))
            if samples[-1].falls:
                break
        while controller != "pd" and _behind(samples[-1]):  # simulated time: the bridge is still playing
            time.sleep(5.0)
            samples.append(_status(stack))
        fell = bool(samples and samples[-1].falls)
        finals = stack.drain(timeout=600.0) if not fell else {}
        wall = time.monotonic() - t0
        cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / wall, 1) for n, p in pids.items()
               if Path(f"/proc/{p}").exists()}
        status = _status(stack)
        verdict = stack.verdict(finals) if finals else {"state": "the robot fell"}
    finally:
        stack.stop()
        motion = watch.close()
    shutil.rmtree(state, ignore_errors=True)  # kept only when something failed: its logs
    motion.update(watch.over(status.applied_ticks_ms))
    stages = read_stages(finals) if finals else None
    view, st = (stages.viewer, stages.streamer) if stages else (None, None)
    return {
        "config": name,
        "frames_applied": status.robot_applied, "frames_streamed": st.zmq_sent if st else None,
        "verdict": verdict.get("state"),
        "command_rate_hz": status.command_rate_mean_hz, "period_p99_ms": status.period_p99_ms,
        "deadline_misses": status.deadline_misses, "commands_sent": status.commands_sent,
        "latency_p50_ms": status.latency_p50_ms, "latency_p99_ms": status.latency_p99_ms,
        "viewer_latency_p50_ms": view.latency_p50_ms if view else None,
        "viewer_latency_p99_ms": view.latency_p99_ms if view else None,
        "tracking_error_rad": as_published(status.tracking_error_rad), "clamps_by_reason": status.clamps_by_reason,
        "catchup_ticks": status.catchup_ticks, "stalls": status.stalls,
        "cpu_pct_of_one_core": cpu, "load_average": os.getloadavg()[0],
        "controller": controller, "base": base, "clock": clock, "loops": loops, "falls": status.falls,
        "policy": as_published(status.policy) if status.policy else None, **motion,
        "tracking_over_run_rad": _mean_tracking([*samples, status]),
    }


def _status(stack: Stack) -> RobotCounts:
    """The bridge's status; after it stopped (a fall), its final counts from its log."""
    try:
        return decode(RobotCounts, stack.ask("robot", "status"))
    except Exception:  # noqa: BLE001 - no responder: the bridge has exited
        assert stack.config.log_dir is not None
        log = stack.config.log_dir / "robot.log"
        lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
        return decode(RobotCounts, json.loads(lines[-1]))


def _behind(status: RobotCounts) -> bool:
    return status.robot_state not in ("fallen", "estop") and (status.bridge_pending > 0 or status.lag_s > 0.05)


def _mean_tracking(samples: list[RobotCounts]) -> dict[str, float]:
    """The mean of the bridge's windowed mean error per group over the status samples taken."""
    out: dict[str, list[float]] = {}
    for s in samples:
        for group, err in s.tracking_error_rad.items():
            out.setdefault(group, []).append(err.mean)
    return {g: round(float(np.mean(v)), 4) for g, v in out.items()}


def retarget_clip(take: Path, out: Path, fps: float = STREAM_FPS, joint_ranges: str = "full") -> dict[str, Any]:
    """``mocapline retarget-file TAKE --fps FPS --joint-ranges R``: the clip written to ``out``, its
    summary line."""
    proc = subprocess.run([sys.executable, "-m", "mocapline.tools.retarget_file", str(take), "--out", str(out),
                           "--fps", str(fps), "--joint-ranges", joint_ranges, "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"retarget-file {take.name}: {proc.stderr.strip()}")
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench robot: no {what} within {timeout:.0f} s")
        time.sleep(0.05)


def run_clip(take: str, name: str, extra: list[str], domain: int, fps: float = STREAM_FPS, *, base: str = "band",
             clock: str = "realtime") -> dict[str, Any]:
    """A CMU take retargeted offline, played at ``fps`` through a port in this process into
    `mocapline robot` driving `mocapline sim` (``base``) on ``domain``, loopback only."""
    from mocapline.tools.port_player import PortPlayer, clip_frames

    work = Path(tempfile.mkdtemp(prefix="mocapline-bench-robot-"))
    # the policy's clips as `up --controller policy` retargets: human joint ranges (docs/retarget.md)
    summary = retarget_clip(CMU_TAKES[take], work / f"{take}.npz", fps,
                            joint_ranges="human" if "policy" in extra else "full")
    with np.load(work / f"{take}.npz") as clip:
        frames = clip_frames(clip)
        reference = reference_figures(clip)
    player = PortPlayer(work / "port")
    dds = ["--domain", str(domain), "--interface", "lo", "--log-level", "WARNING"]
    lockstep = clock == "lockstep"
    sim = Service("sim", ["--base", base, *dds, *(["--clock", "lockstep"] if lockstep else [])])
    robot = Service("robot", ["--input", player.endpoint, "--nats", "", "--state-dir", str(work / "robot"),
                              "--fsync", "interval", "--metrics-port", "0", *dds, *extra,
                              *(["--clock", "lowstate", "--max-speed", "1"] if lockstep else [])])
    watch = BaseWatch(domain)
    logs = {n: (open(work / f"{n}.out", "w"), open(work / f"{n}.err", "w")) for n in ("sim", "robot")}  # noqa: SIM115
    try:
        sim.start(*logs["sim"])
        robot.start(*logs["robot"])
        _wait(lambda: player.connected("robot"), 60, "bridge at the port")
        time.sleep(2.0)  # as run_take: the bridge takes the sim's state and waits, damped
        pids = {"robot": robot.proc.pid, "sim": sim.proc.pid}  # type: ignore[union-attr]
        before = {n: cpu_seconds(p) for n, p in pids.items()}
        t0 = time.monotonic()
        # lockstep: the whole clip at once, played at 1x of the robot's clock by the bridge's timeline
        # (--max-speed 1); paced on the wall it would be stretched whenever the sim runs faster than real time
        player.play(frames, fps if not lockstep else 1e6, end=True)
        _wait(lambda: player.counts()["delivered"] == len(frames) or robot.proc.poll() is not None,  # type: ignore[union-attr]
              600, "acknowledgement of every frame")
        if "policy" in extra:
            time.sleep(3.0 if not lockstep else 10.0)  # the end: the reference back to rest, standing
        wall = time.monotonic() - t0
        cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / wall, 1) for n, p in pids.items()
               if Path(f"/proc/{p}").exists()}  # a bridge that stopped after a fall has none
        port = player.counts()
    finally:
        robot.stop(20.0)
        sim.stop(20.0)
        player.close()
        motion = watch.close()
        for out, err in logs.values():
            out.close()
            err.close()
    final = last_json_line(work / "robot.out")
    if final is None:
        raise RuntimeError(f"bench robot: the bridge left no final counts (see {work / 'robot.err'})")
    status = decode(RobotCounts, final)
    motion.update(watch.over(status.applied_ticks_ms))
    shutil.rmtree(work, ignore_errors=True)  # kept only when something failed: its logs
    return {
        "take": take, "config": name, "source": "retargeted offline, played through a port",
        "stream_fps": fps, "retarget": summary,
        "frames_applied": status.robot_applied, "frames_played": player.produced,
        "frames_delivered": port["delivered"],
        "command_rate_hz": status.command_rate_mean_hz, "period_p99_ms": status.period_p99_ms,
        "deadline_misses": status.deadline_misses, "commands_sent": status.commands_sent,
        "latency_p50_ms": status.latency_p50_ms, "latency_p99_ms": status.latency_p99_ms,
        "tracking_error_rad": as_published(status.tracking_error_rad), "clamps_by_reason": status.clamps_by_reason,
        "rejected_by_reason": status.rejected_by_reason,
        "catchup_ticks": status.catchup_ticks, "stalls": status.stalls,
        "cpu_pct_of_one_core": cpu, "load_average": os.getloadavg()[0],
        "base": base, "clock": clock, "falls": status.falls, "controller": status.controller,
        "policy": as_published(status.policy) if status.policy else None, **motion, **reference,
    }


def floor(rate: float, seconds: float, domain: int) -> dict[str, Any]:
    """A bare publisher of a constant LowCmd at ``rate`` in its own process."""
    proc = subprocess.run([sys.executable, "-m", "mocapline.bench.robot", "--floor-child", str(rate), str(seconds),
                           str(domain)], capture_output=True, text=True, timeout=seconds + 60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def floor_child(rate: float, seconds: float, domain: int) -> dict[str, Any]:
    from mocapline.robot.registry import get_robot
    from mocapline.robot.unitree.dds import LowLevel, dds_settings
    from mocapline.robot.unitree.family import family

    robot = get_robot()
    dds = LowLevel(dds_settings(robot, domain, "lo"))  # kept: the participant owns the writer
    writer = dds.command_writer()
    messages = family(robot.low_level.family)
    LOW_CMD = messages.low_cmd  # noqa: N806 - the message's layout, as the bridge names it
    cmd = messages.new_low_cmd()
    cmd["motor_cmd"]["mode"][robot.motor_index] = robot.motor_modes
    period = 1.0 / rate
    start = time.monotonic()
    cpu0 = time.process_time()
    next_tick, sent, stamps = start, 0, []
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        if now < next_tick:
            time.sleep(next_tick - now)
        now = time.monotonic()
        stamps.append(now)
        next_tick = max(next_tick + period, now - period)
        LOW_CMD.seal(cmd)
        writer.write(LOW_CMD.sample(cmd))
        sent += 1
    wall = time.monotonic() - start
    periods = np.diff(stamps)
    return {"command_rate_hz": round(sent / wall, 2),
            "period_p99_ms": round(float(np.percentile(periods, 99)) * 1000, 3),
            "deadline_misses": int(np.sum(periods > 1.5 * period)),
            "cpu_pct_of_one_core": round(100 * (time.process_time() - cpu0) / wall, 1), "domain": dds.settings.domain}


def _groups(r: dict[str, Any]) -> str:
    err = r["tracking_error_rad"] or {}
    return ", ".join(f"{g} {e.get('mean')}/{e.get('p99')}" for g, e in err.items())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--floor-child":
        print(json.dumps(floor_child(float(argv[1]), float(argv[2]), int(argv[3]))))
        return 0
    parser = argparse.ArgumentParser(prog="mocapline bench robot", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--takes", nargs="+", choices=TAKES, default=TAKES,
                        help="demo (the whole pipeline) and/or CMU takes (offline retarget, played through a port); "
                             "default: all")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS),
                        help="the bridge's configurations on the demo take")
    parser.add_argument("--cmu-configs", nargs="+", choices=sorted(CONFIGS), default=["ff_bias"],
                        help="the bridge's configurations on each CMU take")
    parser.add_argument("--controller", choices=("pd", "policy"), default="pd",
                        help="policy: also each take through the policy controller on the free base (--policy)")
    parser.add_argument("--policy", default="", help="--controller policy: the ONNX file")
    parser.add_argument("--robot-clock", choices=("realtime", "lockstep"), default="realtime",
                        help="the policy runs' sim and bridge on wall time, or in simulated time (lockstep)")
    parser.add_argument("--demo-loops", type=int, default=1, help="the policy's demo run: the take this many times")
    args = parser.parse_args(argv)
    if args.controller == "policy" and not args.policy:
        parser.error("--controller policy needs --policy FILE.onnx")
    domain = _domain()
    result: dict[str, Any] = {"takes": [], "cmu": []}
    policy = ["--controller", "policy", "--policy", str(Path(args.policy).resolve())] if args.policy else []
    if "demo" in args.takes:
        if policy:
            result["takes"].append(run_take("policy", [], domain, base="free", controller="policy",
                                            policy=str(Path(args.policy).resolve()), clock=args.robot_clock,
                                            loops=args.demo_loops))
        result["takes"] += [run_take(name, CONFIGS[name], domain) for name in args.configs]
    for take in (t for t in args.takes if t != "demo"):
        if policy:
            result["cmu"].append(run_clip(take, "policy", policy, domain, base="free", clock=args.robot_clock))
        result["cmu"] += [run_clip(take, name, CONFIGS[name], domain) for name in args.cmu_configs]
    result["floor"] = floor(500.0, 10.0, domain + 1)
    if args.json:
        print(json.dumps(result))
        return 0
    if result["takes"]:
        print("robot bridge -> mocapline sim (band) over DDS on loopback, the bundled demo take through the pipeline")
    for r in result["takes"]:
        if r["controller"] == "policy":
            print(f"  policy (free base, {r['clock']}, {r['loops']} loop(s)): upright {r.get('upright_s')} of "
                  f"{r.get('sim_s')} s, falls {r['falls']}; error over the run {r['tracking_over_run_rad']}; "
                  f"base path {r.get('base_path_m')} m, heading {r.get('base_heading_deg')} deg; policy "
                  f"{r['policy']}; rate {r['command_rate_hz']} Hz; latency p50/p99 {r['latency_p50_ms']}/"
                  f"{r['latency_p99_ms']} ms; applied {r['frames_applied']}/{r['frames_streamed']} ({r['verdict']})")
            continue
        arms = (r["tracking_error_rad"] or {}).get("arms", {})
        print(f"  {r['config']:<14} rate {r['command_rate_hz']} Hz, period p99 {r['period_p99_ms']} ms, "
              f"misses {r['deadline_misses']}; latency p50/p99 {r['latency_p50_ms']}/{r['latency_p99_ms']} ms "
              f"(viewer {r['viewer_latency_p50_ms']}/{r['viewer_latency_p99_ms']}); arms error mean "
              f"{arms.get('mean')} p99 {arms.get('p99')} rad; applied {r['frames_applied']}/{r['frames_streamed']} "
              f"({r['verdict']}); CPU {r['cpu_pct_of_one_core']}")
    if result["cmu"]:
        print(f"robot bridge -> mocapline sim (band), the CMU takes retarget-file'd offline, played through a port at "
              f"{STREAM_FPS:g} Hz (no capture, retarget or streamer process); latency from the port's send")
    for r in result["cmu"]:
        print(f"  {r['take']:<20} {r['config']:<14} rate {r['command_rate_hz']} Hz, period p99 {r['period_p99_ms']} "
              f"ms, misses {r['deadline_misses']}; latency p50/p99 {r['latency_p50_ms']}/{r['latency_p99_ms']} ms; "
              f"applied {r['frames_applied']}/{r['frames_played']} played")
        print(f"  {'':<20} error mean/p99 rad: {_groups(r)}; clamps {r['clamps_by_reason']}; "
              f"CPU {r['cpu_pct_of_one_core']}")
        if r["controller"] == "policy":
            print(f"  {'':<20} free base, {r['clock']}: upright {r.get('upright_s')} of {r.get('sim_s')} s, falls "
                  f"{r['falls']}; base path {r.get('base_path_m')} m vs the reference's {r['ref_path_m']} m, "
                  f"ended {r.get('base_offset_m')} m from its start vs {r.get('ref_offset_m')} m, "
                  f"heading {r.get('base_heading_deg')} vs {r['ref_heading_deg']} deg; policy {r['policy']}")
            print(f"  {'':<20} over the clip's own {r.get('clip_sim_s')} s (first to last frame applied): base "
                  f"path {r.get('clip_base_path_m')} m vs {r['ref_path_m']} m, ended {r.get('clip_base_offset_m')} "
                  f"m from its start vs {r.get('ref_offset_m')} m, heading {r.get('clip_base_heading_deg')} vs "
                  f"{r['ref_heading_deg']} deg")
    f = result["floor"]
    print(f"  floor (bare DDS publisher, constant LowCmd): rate {f['command_rate_hz']} Hz, period p99 "
          f"{f['period_p99_ms']} ms, misses {f['deadline_misses']}, CPU {f['cpu_pct_of_one_core']}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
