"""``mocapline bench scale``: retarget as 1, 2, 3 workers on 6 performers at 120 Hz.

For each worker count, a durable stack on loopback (capture with a fan-out, the workers, the
streamer fanning in, NATS with JetStream; mocapline/services/retarget/worker.py) is sent a take of
``--performers`` avatars at ``--rate`` Hz for ``--seconds``; a consumer of the robot port times
every frame from capture's arrival (``capture_timestamp_us``) to its own receipt. Reported per
count: the offered load, frames/s through each worker and in total (frames over the span from the
first arrival at capture to the last frame out), p50/p99/max latency in steady state (from 2 s in:
the first frames wait for the performers to be claimed; ``p99_with_start`` includes them), whether
the stack kept up (every frame out, total >= 97% of offered, p99 under ``--keep-up-ms``), each
process's CPU use (cores busy: CPU seconds over the span, start-up included) and the host's load
average. On one machine the workers share its cores with capture, the streamer and each other:
past the cores, more workers add fan-out copies and context switches, not IK.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.client import ClientSettings, MocapClient
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.stack import Stack, local_config


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def run_one(workers: int, performers: int, rate: float, seconds: float, state: Path) -> dict[str, Any]:
    frames = int(rate * seconds)
    config = local_config(viewer=False, input_fps=rate, output_fps=rate, state_dir=state / f"w{workers}",
                          log_dir=state / f"w{workers}" / "logs", fsync="interval", retarget_workers=workers)
    stack = Stack(config)
    stack.start()
    try:
        stack.wait_ready(90)
        plan = TakePlan(frames=frames, first_index=1000, performers=performers)
        emitter = threading.Thread(target=emit_take, args=(plan, [("127.0.0.1", config.main_port)]),
                                   kwargs={"rate_hz": rate}, daemon=True)
        latencies: list[float] = []
        caps: list[float] = []
        first_cap = last_out = 0.0
        expected = frames * performers
        with MocapClient(ClientSettings(f"tcp://127.0.0.1:{config.output_port}", name="bench")) as client:
            emitter.start()
            deadline = time.monotonic() + seconds * 6 + 60
            idle_since = time.monotonic()
            while len(latencies) < expected and time.monotonic() < deadline:
                frame = client.recv(200)
                if frame is None or frame.mocap is None:
                    if not emitter.is_alive() and time.monotonic() - idle_since > 15:
                        break
                    continue
                now_us = time.time_ns() / 1000
                idle_since = time.monotonic()
                cap_us = float(frame.mocap.capture_timestamp_us)
                first_cap = cap_us if not latencies else min(first_cap, cap_us)
                last_out = now_us
                latencies.append((now_us - cap_us) / 1000)
                caps.append(cap_us)
        span_s = max(1e-9, (last_out - first_cap) / 1e6)
        cpu = {name: round(cpu_seconds(svc.proc.pid) / span_s, 2) for name, svc in stack.services.items()
               if svc.proc is not None}
        per_worker = {}
        for w in stack.worker_names:
            status = stack.ask(f"retarget.{w}", "status", timeout=5)
            per_worker[w] = {"performers": status["worker"]["owned"], "frames": status["gmr_processed"],
                             "fps": round(status["gmr_processed"] / span_s, 1),
                             "ik_ms_mean": status["ik_ms_mean"],
                             "takeovers": status["worker"]["takeovers"]}
        # steady state: from 2 s into the take (the first frames wait for the performers' claims)
        lat_all = np.asarray(latencies) if latencies else np.zeros(1)
        steady = lat_all[np.asarray(caps) >= first_cap + 2e6] if latencies else lat_all
        lat = steady if steady.size else lat_all
        total_fps = len(latencies) / span_s
        p99 = float(np.percentile(lat, 99))
        return {
            "workers": workers, "performers": performers, "rate_hz": rate, "offered_fps": rate * performers,
            "frames_expected": expected, "frames_out": len(latencies), "total_fps": round(total_fps, 1),
            "per_worker": per_worker, "cpu_cores_busy": cpu, "load_average_1m": os.getloadavg()[0],
            "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 2),
                                                     "p99": round(p99, 2), "max": round(float(lat.max()), 2),
                                                     "p99_with_start": round(float(np.percentile(lat_all, 99)), 2)},
        }
    finally:
        stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--performers", type=int, default=6)
    p.add_argument("--rate", type=float, default=120.0, help="frames per second per performer")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the take")
    p.add_argument("--keep-up-ms", type=float, default=100.0, help="p99 latency bound of 'kept up'")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(None if argv is None else list(argv))
    results = []
    with tempfile.TemporaryDirectory(prefix="mocapline-bench-scale-") as tmp:
        for n in args.workers:
            r = run_one(n, args.performers, args.rate, args.seconds, Path(tmp))
            r["kept_up"] = (r["frames_out"] == r["frames_expected"] and r["total_fps"] >= 0.97 * r["offered_fps"]
                            and r["latency_ms"]["p99"] <= args.keep_up_ms)
            results.append(r)
            if not args.json:
                workers = ", ".join(f"{w} {v['fps']}/s ({len(v['performers'])} performers)"
                                    for w, v in r["per_worker"].items())
                print(f"{n} worker(s): {r['total_fps']} frames/s of {r['offered_fps']:.0f} offered; {workers}; "
                      f"latency p50 {r['latency_ms']['p50']} ms p99 {r['latency_ms']['p99']} ms; "
                      f"kept up: {r['kept_up']}", flush=True)
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
