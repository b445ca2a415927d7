"""``mocapline bench robot``: the robot end through the real processes, beside its floor.

The whole pipeline (NATS, capture, retarget, streamer, viewer, auditor) with the robot bridge and
`mocapline sim` (the G1 on its elastic band) on a private DDS domain on loopback, fed the bundled
demo take once per configuration: with the velocity feed-forward and the bias torque, and without
either. For each: the bridge's achieved command rate (over the run) and period p99, deadline
misses, latency UDP arrival at capture -> the first LowCmd moving toward that frame (p50/p99)
beside the viewer's (UDP arrival -> applied) in the same run, tracking error in physics by joint
group (mean, p99), clamps, and the CPU of each process (share of one core over the take). Beside
them, the floor: a bare DDS publisher of a constant LowCmd at the same rate (no stream, no
control), its rate, period p99 and CPU. Numbers on a shared 2-core machine are noisy: read the
ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.counters import RobotCounts, as_published, decode, read_stages
from mocapline.core.paths import DEMO_TAKE
from mocapline.tools.emitter.emitter import replay
from mocapline.tools.pipeline.stack import Stack, local_config

CONFIGS = {"ff_bias": [], "no_ff_no_bias": ["--no-feed-forward", "--no-bias"]}


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


def floor(rate: float, seconds: float, domain: int) -> dict[str, Any]:
    """A bare publisher of a constant LowCmd at ``rate`` in its own process."""
    proc = subprocess.run([sys.executable, "-m", "mocapline.bench.robot", "--floor-child", str(rate), str(seconds),
                           str(domain)], capture_output=True, text=True, timeout=seconds + 60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def floor_child(rate: float, seconds: float, domain: int) -> dict[str, Any]:
    from mocapline.robot.unitree.dds import DdsSettings, LowLevel
    from mocapline.robot.unitree.lowlevel import LOW_CMD

    dds = LowLevel(DdsSettings(domain, "lo"))  # kept: the participant owns the writer
    writer = dds.command_writer()
    cmd = LOW_CMD.new()
    cmd["motor_cmd"]["mode"][:29] = 1
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--floor-child":
        print(json.dumps(floor_child(float(argv[1]), float(argv[2]), int(argv[3]))))
        return 0
    parser = argparse.ArgumentParser(prog="mocapline bench robot", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args(argv)
    domain = _domain()
    result: dict[str, Any] = {"takes": [run_take(name, CONFIGS[name], domain) for name in args.configs]}
    result["floor"] = floor(500.0, 10.0, domain + 1)
    if args.json:
        print(json.dumps(result))
        return 0
    print("robot bridge -> mocapline sim (band) over DDS on loopback, the bundled demo take through the pipeline")
    for r in result["takes"]:
        arms = (r["tracking_error_rad"] or {}).get("arms", {})
        print(f"  {r['config']:<14} rate {r['command_rate_hz']} Hz, period p99 {r['period_p99_ms']} ms, "
              f"misses {r['deadline_misses']}; latency p50/p99 {r['latency_p50_ms']}/{r['latency_p99_ms']} ms "
              f"(viewer {r['viewer_latency_p50_ms']}/{r['viewer_latency_p99_ms']}); arms error mean "
              f"{arms.get('mean')} p99 {arms.get('p99')} rad; applied {r['frames_applied']}/{r['frames_streamed']} "
              f"({r['verdict']}); CPU {r['cpu_pct_of_one_core']}")
    f = result["floor"]
    print(f"  floor (bare DDS publisher, constant LowCmd): rate {f['command_rate_hz']} Hz, period p99 "
          f"{f['period_p99_ms']} ms, misses {f['deadline_misses']}, CPU {f['cpu_pct_of_one_core']}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
