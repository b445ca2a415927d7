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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _domain() -> int:
    return 100 + os.getpid() % 120


def run_take(name: str, extra: list[str], domain: int) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="mocapline-bench-robot-"))
    config = local_config(viewer=True, robot="sim", robot_domain=domain, robot_interface="lo",
                          state_dir=state / "state", log_dir=state / "logs", robot_args=extra)
    stack = Stack(config)
    try:
        stack.start()
        stack.wait_ready()
        time.sleep(2.0)  # the bridge takes the sim's state and waits, damped
        pids = {n: s.proc.pid for n, s in stack.services.items() if s.proc is not None}
        before = {n: cpu_seconds(p) for n, p in pids.items()}
        t0 = time.monotonic()
        replay(DEMO_TAKE, [("127.0.0.1", config.main_port)])
        finals = stack.drain()
        wall = time.monotonic() - t0
        cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / wall, 1) for n, p in pids.items()}
        status = decode(RobotCounts, stack.ask("robot", "status"))
        verdict = stack.verdict(finals)
    finally:
        stack.stop()
    shutil.rmtree(state, ignore_errors=True)  # kept only when something failed: its logs
    stages = read_stages(finals)
    view, st = stages.viewer, stages.streamer
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
    }


def retarget_clip(take: Path, out: Path, fps: float = STREAM_FPS) -> dict[str, Any]:
    """``mocapline retarget-file TAKE --fps FPS``: the clip written to ``out``, its summary line."""
    proc = subprocess.run([sys.executable, "-m", "mocapline.tools.retarget_file", str(take), "--out", str(out),
                           "--fps", str(fps), "--no-progress"], capture_output=True, text=True, timeout=300)
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


def run_clip(take: str, name: str, extra: list[str], domain: int, fps: float = STREAM_FPS) -> dict[str, Any]:
    """A CMU take retargeted offline, played at ``fps`` through a port in this process into
    `mocapline robot` driving `mocapline sim` (band) on ``domain``, loopback only."""
    from mocapline.tools.port_player import PortPlayer, clip_frames

    work = Path(tempfile.mkdtemp(prefix="mocapline-bench-robot-"))
    summary = retarget_clip(CMU_TAKES[take], work / f"{take}.npz", fps)
    with np.load(work / f"{take}.npz") as clip:
        frames = clip_frames(clip)
    player = PortPlayer(work / "port")
    dds = ["--domain", str(domain), "--interface", "lo", "--log-level", "WARNING"]
    sim = Service("sim", ["--base", "band", *dds])
    robot = Service("robot", ["--input", player.endpoint, "--nats", "", "--state-dir", str(work / "robot"),
                              "--fsync", "interval", *dds, *extra])
    logs = {n: (open(work / f"{n}.out", "w"), open(work / f"{n}.err", "w")) for n in ("sim", "robot")}  # noqa: SIM115
    try:
        sim.start(*logs["sim"])
        robot.start(*logs["robot"])
        _wait(lambda: player.connected("robot"), 60, "bridge at the port")
        time.sleep(2.0)  # as run_take: the bridge takes the sim's state and waits, damped
        pids = {"robot": robot.proc.pid, "sim": sim.proc.pid}  # type: ignore[union-attr]
        before = {n: cpu_seconds(p) for n, p in pids.items()}
        t0 = time.monotonic()
        player.play(frames, fps, end=True)
        _wait(lambda: player.counts()["delivered"] == len(frames), 60, "acknowledgement of every frame")
        wall = time.monotonic() - t0
        cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / wall, 1) for n, p in pids.items()}
        port = player.counts()
    finally:
        robot.stop(20.0)
        sim.stop(20.0)
        player.close()
        for out, err in logs.values():
            out.close()
            err.close()
    final = last_json_line(work / "robot.out")
    if final is None:
        raise RuntimeError(f"bench robot: the bridge left no final counts (see {work / 'robot.err'})")
    status = decode(RobotCounts, final)
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
    args = parser.parse_args(argv)
    domain = _domain()
    result: dict[str, Any] = {"takes": [], "cmu": []}
    if "demo" in args.takes:
        result["takes"] = [run_take(name, CONFIGS[name], domain) for name in args.configs]
    result["cmu"] = [run_clip(take, name, CONFIGS[name], domain)
                     for take in args.takes if take != "demo" for name in args.cmu_configs]
    result["floor"] = floor(500.0, 10.0, domain + 1)
    if args.json:
        print(json.dumps(result))
        return 0
    if result["takes"]:
        print("robot bridge -> mocapline sim (band) over DDS on loopback, the bundled demo take through the pipeline")
    for r in result["takes"]:
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
    f = result["floor"]
    print(f"  floor (bare DDS publisher, constant LowCmd): rate {f['command_rate_hz']} Hz, period p99 "
          f"{f['period_p99_ms']} ms, misses {f['deadline_misses']}, CPU {f['cpu_pct_of_one_core']}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
