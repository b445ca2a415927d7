"""``mocapline bench cost``: what a frame costs each process, beside the work it does.

1. ``kernels``: each stage's own work per frame, in this process, one frame at a time, through the
   services' classes (mocapline.tools.pipeline.inprocess: inproc links with the real envelope):
   capture parse + ledger + FK + HumanFrame, retarget decode + one IK step + RobotFrame, streamer
   resample + MocapFrame envelope, viewer validate + apply. CPU time of this thread (not wall time),
   after a warm-up. Twice: back to back (``kernel_us``, the work itself) and paced at the run's
   rate (``kernel_paced_us``): the same code run once every 8 ms finds its caches cold and costs
   1.3-2x more, which no process boundary is to blame for.
2. ``runs``: the real processes (NATS, auditor, capture, retarget, streamer, viewer; as ``up``
   starts them, durable by default) sent a take at 60 Hz, 120 Hz and with 3 performers, and a
   plain-links run at 120 Hz beside them. Each process's CPU (user + system from /proc) over the
   take and its drain (until every frame is through), per frame (frames emitted x performers),
   the overhead ratio of each stage (its process's CPU per frame over its kernel) and of the whole
   stack (every process over the sum of the kernels), the end-to-end latency (UDP arrival at
   capture -> qpos applied) p50 / p99, and each process's split by thread (the stage loop,
   ZeroMQ's I/O threads, the rest) with its wake-ups per frame.
3. ``profile``: one more durable 120 Hz run with ``MOCAPLINE_PROFILE`` set (each stage's loop under
   cProfile, mocapline/core/profiling.py): the top functions of each stage by own time, per frame.
   Profiling slows what it measures: its figures say where the time goes, not how much there is.

The kernels and the runs are measured in one invocation, so their ratios hold on a loaded
machine where absolute times do not.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from mocapline.core.frames import RobotFrame
from mocapline.core.header import MessageType
from mocapline.core.profiling import PROFILE_ENV
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.inprocess import InProcessPipeline, emitted_take
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.pipeline.stack import STAGES, Stack, local_config

PROCESSES = ("capture", "retarget", "streamer", "viewer", "auditor", "nats")


@dataclass(frozen=True)
class RunPlan:
    name: str
    rate_hz: float
    performers: int = 1
    durable: bool = True


PLANS = {
    "durable_60hz": RunPlan("durable_60hz", 60.0),
    "durable_120hz": RunPlan("durable_120hz", 120.0),
    "plain_120hz": RunPlan("plain_120hz", 120.0, durable=False),
    "durable_120hz_3p": RunPlan("durable_120hz_3p", 120.0, performers=3),
}
QUICK = ("durable_120hz", "plain_120hz")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 once it is gone)."""
    try:
        return cpu_seconds_of(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return 0.0


def thread_cpu(pid: int) -> dict[str, float]:
    """A process's CPU seconds by kind of thread: ``main`` (the stage loop), ``zmq`` (ZeroMQ's I/O
    threads) and ``other`` (the bus, the metrics server, capture's receiver, ...). Threads that
    ended are not counted (the whole is ``cpu_seconds``)."""
    def read(text: str) -> tuple[str, float]:
        return text[text.index("(") + 1:text.rindex(")")], cpu_seconds_of(text)

    return {kind: float(seconds) for kind, seconds in _by_thread_kind(pid, "stat", read).items()}


def wakeups(pid: int) -> dict[str, int]:
    """Voluntary context switches (a thread blocked, then woken) by kind of thread, live threads."""
    def read(status: str) -> tuple[str, int]:
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return fields.get("Name", "").strip(), int(fields.get("voluntary_ctxt_switches", "0"))

    return _by_thread_kind(pid, "status", read)


N = TypeVar("N", int, float)


def _by_thread_kind(pid: int, filename: str, read: Callable[[str], tuple[str, N]]) -> dict[str, N]:
    """``read`` (thread name, value) of each live thread's /proc file, summed by kind of thread:
    ``main`` (the process's own), ``zmq`` (ZeroMQ's I/O threads, named ZMQbg...), ``other``."""
    out: dict[str, Any] = {"main": 0, "zmq": 0, "other": 0}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name, value = read((task / filename).read_text())
        except OSError:
            continue
        kind = "main" if task.name == str(pid) else "zmq" if name.startswith("ZMQbg") else "other"
        out[kind] += value
    return out


def cpu_seconds_of(stat: str) -> float:
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TimedPipeline(InProcessPipeline):
    """The in-process pipeline with each stage's CPU time (this thread's) added up per stage."""

    def __init__(self, fps: float) -> None:
        super().__init__(fps=fps)
        self.cpu_ns = dict.fromkeys(STAGES, 0)

    def frame(self, datagram: bytes) -> None:
        clock = time.thread_time_ns
        t0 = clock()
        self.source.feed(datagram)
        self.capture.send_ready()
        t1 = clock()
        while (msg := self.human.rx.recv(timeout_ms=0)) is not None:
            self.retarget.on_message(msg)
        t2 = clock()
        while (msg := self.robot.rx.recv(timeout_ms=0)) is not None:
            self.streamer.on_robot_frame(RobotFrame.from_bytes(msg.payload), time.time_ns())
            self.streamer.send_ready(timeout_ms=0)
        t3 = clock()
        while (msg := self.mocap.rx.recv(timeout_ms=0)) is not None:
            if msg.header.message_type is not MessageType.END_OF_STREAM:
                frame = self.validator.accept(msg)
                if frame is not None:
                    self.applied.append(frame.posture_index)
                self.applier.apply_pending(self.validator)
        t4 = clock()
        for stage, ns in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            self.cpu_ns[stage] += ns


def kernels(rate_hz: float, frames: int, warmup: int = 60, paced: bool = False) -> dict[str, float]:
    """Each stage's work per frame (us of CPU), one frame at a time, after ``warmup`` frames;
    ``paced``: the frames ``1 / rate_hz`` apart (sleeping between), as they come to a service."""
    take = emitted_take(warmup + frames, fps=rate_hz)
    pipe = TimedPipeline(rate_hz)
    try:
        for data in take[:warmup]:
            pipe.frame(data)
        pipe.cpu_ns = dict.fromkeys(STAGES, 0)
        applied0 = len(pipe.applied)
        start = time.monotonic()
        for k, data in enumerate(take[warmup:]):
            pipe.frame(data)
            if paced and (wait := start + (k + 1) / rate_hz - time.monotonic()) > 0:
                time.sleep(wait)
        if len(pipe.applied) - applied0 < frames - 2:  # the interpolator holds a frame or two back
            raise RuntimeError(f"the kernel pipeline applied {len(pipe.applied) - applied0} of {frames} frames")
        return {stage: ns / frames / 1e3 for stage, ns in pipe.cpu_ns.items()}
    finally:
        pipe.close()


@dataclass
class RunResult:
    name: str
    rate_hz: float
    performers: int
    durable: bool
    seconds: float
    frames: int  # emitted x performers: the frames every stage handles
    applied: int  # frames the viewer applied
    cpu_ms_per_frame: dict[str, float]
    cpu_pct_of_core: dict[str, float]
    threads_ms_per_frame: dict[str, dict[str, float]]  # per process: main loop, ZeroMQ I/O, other threads
    wakeups_per_frame: dict[str, dict[str, float]]  # voluntary context switches, the same split
    stack_ms_per_frame: float
    kernel_ms_per_frame: float
    overhead: dict[str, float]  # a stage's CPU per frame over its kernel
    stack_overhead: float
    latency_ms: dict[str, float | None]
    kernel_us: dict[str, float]  # measured just before this run
    kernel_paced_us: dict[str, float]  # the same, the frames at the run's rate
    overhead_paced: dict[str, float]  # a stage's CPU per frame over its paced kernel
    stack_overhead_paced: float
    code: str = "this"  # or "baseline": the processes ran from --baseline's checkout
    load_average_1m: float = 0.0


def _stack(plan: RunPlan, state: Path, extra_env: dict[str, str]) -> Stack:
    metrics = {name: free_tcp_port() for name in ("capture", "retarget", "streamer", "viewer", "auditor")}
    config = local_config(viewer=True, input_fps=plan.rate_hz, output_fps=plan.rate_hz,
                          state_dir=state / "state" if plan.durable else None, log_dir=state / "logs",
                          metrics_ports=metrics, extra_env={"MOCAPLINE_LOG_LEVEL": "WARNING", **extra_env})
    return Stack(config)


def _pids(stack: Stack) -> dict[str, int]:
    pids = {name: svc.proc.pid for name, svc in stack.services.items() if svc.proc is not None}
    if stack.nats is not None:
        pids["nats"] = stack.nats.pid
    return pids


def run(plan: RunPlan, seconds: float, kernel_us: dict[str, float], paced_us: dict[str, float] | None = None,
        warmup_s: float = 1.0, profile_dir: Path | None = None, baseline: Path | None = None) -> RunResult:
    """One take through the real processes; ``baseline``: they run from that checkout instead
    (PYTHONPATH), for a side-by-side comparison with older code."""
    frames = max(int(plan.rate_hz * seconds), 2)
    with tempfile.TemporaryDirectory(prefix="mocapline-bench-cost-") as tmp:
        env = {PROFILE_ENV: str(profile_dir)} if profile_dir is not None else {}
        if baseline is not None:
            env["PYTHONPATH"] = str(baseline)
        stack = _stack(plan, Path(tmp), env)
        try:
            stack.start()
            stack.wait_ready(120)
            dest = [("127.0.0.1", stack.config.main_port)]
            emit_take(TakePlan(frames=int(plan.rate_hz * warmup_s), first_index=0, performers=plan.performers),
                      dest, rate_hz=plan.rate_hz)
            stack.drain()
            stack.reset()
            pids = _pids(stack)
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            threads0 = {name: thread_cpu(pid) for name, pid in pids.items()}
            wakes0 = {name: wakeups(pid) for name, pid in pids.items()}
            t0 = time.monotonic()
            emit_take(TakePlan(frames=frames, first_index=0, performers=plan.performers), dest, rate_hz=plan.rate_hz)
            # until every frame is through: a stack that fell behind still owes their work
            finals = stack.drain()
            wall = time.monotonic() - t0
            cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
            threads = {name: {k: v - threads0[name][k] for k, v in thread_cpu(pid).items()}
                       for name, pid in pids.items()}
            wakes = {name: {k: v - wakes0[name][k] for k, v in wakeups(pid).items()} for name, pid in pids.items()}
            load = os.getloadavg()[0]
        finally:
            stack.stop()
    viewer = finals.get("viewer", {})
    paced = paced_us or kernel_us
    total = frames * plan.performers
    per_frame = {name: 1e3 * c / total for name, c in cpu.items()}
    stack_ms = sum(per_frame.values())
    kernel_ms = sum(kernel_us.values()) / 1e3
    return RunResult(
        name=plan.name, rate_hz=plan.rate_hz, performers=plan.performers, durable=plan.durable,
        seconds=round(wall, 2), frames=total, applied=int(viewer.get("viewer_applied") or 0),
        cpu_ms_per_frame={k: round(v, 4) for k, v in per_frame.items()},
        cpu_pct_of_core={k: round(100.0 * c / wall, 2) for k, c in cpu.items()},
        threads_ms_per_frame={name: {k: round(1e3 * v / total, 4) for k, v in t.items()}
                              for name, t in threads.items()},
        wakeups_per_frame={name: {k: round(v / total, 2) for k, v in w.items()} for name, w in wakes.items()},
        stack_ms_per_frame=round(stack_ms, 4), kernel_ms_per_frame=round(kernel_ms, 4),
        overhead={s: round(per_frame[s] * 1e3 / kernel_us[s], 2) for s in STAGES if s in per_frame},
        stack_overhead=round(stack_ms / kernel_ms, 2),
        latency_ms={"p50": viewer.get("latency_p50_ms"), "p99": viewer.get("latency_p99_ms")},
        kernel_us={k: round(v, 1) for k, v in kernel_us.items()},
        kernel_paced_us={k: round(v, 1) for k, v in paced.items()},
        overhead_paced={s: round(per_frame[s] * 1e3 / paced[s], 2) for s in STAGES if s in per_frame},
        stack_overhead_paced=round(stack_ms * 1e3 / sum(paced.values()), 2),
        code="this" if baseline is None else "baseline",
        load_average_1m=round(load, 2),
    )


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name  # a built-in: {method 'poll' of ...}
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("mocapline"):]) if "mocapline" in parts else "/".join(parts[-2:])
    return f"{short}:{line}({name})"


def top_functions(path: Path, frames: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions of a stage's loop by own time: us per frame and share of the loop."""
    stats = pstats.Stats(str(path))
    entries = stats.stats  # type: ignore[attr-defined]  # {func: (cc, nc, tottime, cumtime, callers)}
    total = sum(v[2] for v in entries.values()) or 1e-12
    rows = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return [{"function": _where(func), "calls_per_frame": round(v[1] / frames, 2),
             "own_us_per_frame": round(1e6 * v[2] / frames, 1), "share": round(v[2] / total, 3)}
            for func, v in rows]


def profile(plan: RunPlan, seconds: float, kernel_us: dict[str, float], top: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mocapline-bench-profile-") as tmp:
        result = run(plan, seconds, kernel_us, profile_dir=Path(tmp))
        # every frame of the take, the warm-up's and the drain's idle loops included
        frames = result.frames + int(plan.rate_hz) * plan.performers
        out = {path.stem: top_functions(path, frames, top) for path in sorted(Path(tmp).glob("*.pstats"))}
    return {"run": plan.name, "frames": frames, "stages": out}


def _median_stack(runs: list[RunResult], name: str, code: str) -> float:
    return statistics.median(r.stack_ms_per_frame for r in runs if r.name == name and r.code == code)


def measure(plans: list[RunPlan], seconds: float, kernel_frames: int, profile_seconds: float,
            top: int, baseline: Path | None = None, repeat: int = 1) -> dict[str, Any]:
    """Each plan's run ``repeat`` times (with ``baseline``: alternately from that checkout and from
    this one), each after its own kernel timing; then the profile. Ratios are of medians."""
    runs: list[RunResult] = []
    for _ in range(repeat):
        for plan in plans:
            for code in ([baseline, None] if baseline is not None else [None]):
                hot = kernels(plan.rate_hz, kernel_frames)
                paced = kernels(plan.rate_hz, min(kernel_frames, int(plan.rate_hz * 2.5)), paced=True)
                runs.append(run(plan, seconds, hot, paced, baseline=code))
    out: dict[str, Any] = {"cpus": os.cpu_count(), "runs": [asdict(r) for r in runs]}
    names = [p.name for p in plans]
    if "durable_120hz" in names and "plain_120hz" in names:
        out["durable_over_plain_120hz"] = round(_median_stack(runs, "durable_120hz", "this")
                                                / _median_stack(runs, "plain_120hz", "this"), 2)
    if baseline is not None:
        out["this_over_baseline"] = {name: round(_median_stack(runs, name, "this")
                                                 / _median_stack(runs, name, "baseline"), 2) for name in names}
    if profile_seconds > 0:
        plan = PLANS["durable_120hz"]
        out["profile"] = profile(plan, profile_seconds, kernels(plan.rate_hz, kernel_frames), top)
    return out


def _print(result: dict[str, Any]) -> None:
    print("real processes, ms of CPU per frame (x its kernel), latency UDP arrival -> applied")
    for r in result["runs"]:
        stages = "  ".join(f"{s} {r['cpu_ms_per_frame'].get(s, 0):.3f} ({r['overhead'].get(s, 0):.1f}x)"
                           for s in STAGES)
        others = "  ".join(f"{s} {r['cpu_ms_per_frame'][s]:.3f}" for s in ("auditor", "nats")
                           if s in r["cpu_ms_per_frame"])
        lat = r["latency_ms"]
        kernels_line = "  ".join(f"{s} {v:.0f}" for s, v in r["kernel_us"].items())
        paced_line = "  ".join(f"{s} {v:.0f}" for s, v in r["kernel_paced_us"].items())
        print(f"  {r['name']:<17} [{r['code']}] kernels, us/frame: {kernels_line}; paced at the rate: {paced_line} "
              f"(stack {r['stack_overhead_paced']:.1f}x these)")
        print(f"  {'':<17} stack {r['stack_ms_per_frame']:.3f} ms/frame ({r['stack_overhead']:.1f}x kernels "
              f"{r['kernel_ms_per_frame']:.3f})  p50 {lat['p50']} ms  p99 {lat['p99']} ms  "
              f"[{r['applied']}/{r['frames']} applied, load {r['load_average_1m']}]")
        print(f"      {stages}  {others}")
        split = "  ".join(f"{s} " + "/".join(f"{v:.2f}" for v in r["threads_ms_per_frame"][s].values())
                          for s in STAGES if s in r["threads_ms_per_frame"])
        print(f"      main/zmq/other threads: {split}")
        wake = "  ".join(f"{s} " + "/".join(f"{v:.1f}" for v in r["wakeups_per_frame"][s].values())
                         for s in STAGES if s in r["wakeups_per_frame"])
        print(f"      wake-ups per frame, main/zmq/other: {wake}")
    if "durable_over_plain_120hz" in result:
        print(f"\ndurable / plain at 120 Hz, stack CPU per frame: {result['durable_over_plain_120hz']:.2f}x")
    for name, ratio in result.get("this_over_baseline", {}).items():
        print(f"{name}: this code / baseline, stack CPU per frame: {ratio:.2f}x")
    if "profile" in result:
        prof = result["profile"]
        print(f"\nprofile ({prof['run']}, cProfile, {prof['frames']} frames): top functions by own time, us/frame")
        for stage, rows in prof["stages"].items():
            print(f"  {stage}")
            for row in rows:
                print(f"    {row['own_us_per_frame']:8.1f} {100 * row['share']:5.1f}%  "
                      f"{row['calls_per_frame']:6.2f}/frame  {row['function']}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--quick", action="store_true",
                   help="durable and plain at 120 Hz only, 3 s takes, a 2 s profile (what a test runs)")
    p.add_argument("--runs", nargs="+", choices=sorted(PLANS), default=None, help="which runs (default: all)")
    p.add_argument("--seconds", type=float, default=None, help="length of each take (default 15, quick 3)")
    p.add_argument("--kernel-frames", type=int, default=None, help="frames of the kernel timing (default 600)")
    p.add_argument("--profile-seconds", type=float, default=None,
                   help="length of the profiled take (default 10, quick 2; 0 = no profile)")
    p.add_argument("--top", type=int, default=8, help="functions per stage in the profile")
    p.add_argument("--repeat", type=int, default=1, help="rounds of every run (ratios of the medians)")
    p.add_argument("--baseline", type=Path, default=None,
                   help="a checkout of older code (its top folder, holding mocapline/): each run is made with "
                        "the processes from there and from this code alternately, side by side")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    names = args.runs or (QUICK if args.quick else tuple(PLANS))
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 15.0)
    kernel_frames = args.kernel_frames or (150 if args.quick else 600)
    prof = args.profile_seconds if args.profile_seconds is not None else (2.0 if args.quick else 10.0)
    if args.baseline is not None and not (args.baseline / "mocapline" / "cli.py").exists():
        p.error(f"--baseline {args.baseline}: no mocapline/cli.py there")
    result = measure([PLANS[n] for n in names], seconds, kernel_frames, prof, args.top, args.baseline,
                     max(1, args.repeat))
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

