"""``mocapline bench load``: `mocapline up --demo` under load, stopped by SIGTERM, judged by its final
ledger. The promise under test: the pipeline may be slow and may wait, but every frame arrives.

Each run starts ``mocapline up --demo`` as a child process on free loopback ports (its own NATS,
/metrics off: it never meets a running `up`), lets it run ``--duration`` seconds beside one load,
sends it SIGTERM (as the incident's runs were stopped) and keeps the load going through the drain.
The loads:

- ``none``: the machine as it is;
- ``busy``: one spinning process per core, at the services' priority;
- ``fsync``: a process writing and fsync-ing 64 KiB at a time (the logs' disk is the same);
- ``stop``: the viewer (the robot port's consumer) starved of CPU: SIGSTOP for ``--stop-s``, then
  SIGCONT for ``--run-s``, over and over (the kernel's worst scheduling of it, as a 2-core machine
  under a test suite gives it now and then);
- ``io``: the viewer's ZeroMQ I/O thread starved while its main thread is not: that thread made
  SCHED_IDLE beside one spinning process per core, so frames wait in the kernel while the viewer
  runs and finds none (what a loaded machine does to it now and then, made to happen every time);
- ``memory``: ``--memory-mb`` allocated and touched page by page, again and again;
- ``suite``: the project's own test suite (``--suite-args``, a subset by default), killed at the end;
- ``race``: no `up`: the storm's trigger made to happen every time (``mocapline/bench/race.py``):
  the robot port played from a process of the code under test to a real viewer, a burst, and the
  RESEND HELLO that crosses it (``--duration`` s of stream after it).

Per run it prints the take, what the viewer applied, the verdict, and what the robot port did to
the viewer: messages resent, duplicates the viewer dropped, HELLOs, both as counts and as a ratio to
the take. ``--code DIR`` (repeatable) runs the same loads against other source trees (an older
commit unpacked with ``git archive``), side by side. Everything is bounded: each load ends with its
run, every process started here is stopped by its pid, a drain is given ``--drain-timeout-s``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mocapline.tools.pipeline.procs import child_pids, free_tcp_port, free_udp_port, signal_group

LOADS = ("none", "busy", "fsync", "stop", "io", "memory", "suite", "race")
DEFAULT_SUITE_ARGS = '-q -p no:cacheprovider -m "not integration" -x'
_LEDGER_LINE = re.compile(r"^([a-z_]+)\s{2,}(.*)$")


@dataclass(frozen=True)
class LoadConfig:
    """One load beside one run (see the module docstring)."""

    name: str
    stop_s: float = 0.8
    run_s: float = 0.2
    memory_mb: int = 1024
    suite_args: str = DEFAULT_SUITE_ARGS
    service: str = "viewer"  # whose process ``stop`` stops and whose I/O thread ``io`` starves


@dataclass
class RunResult:
    """One run of `up --demo` beside one load, from its final ledger and the viewer's last line."""

    load: str
    code: str
    take: int | None = None  # source_unique_frames
    viewer_applied: int | None = None
    zmq_sent: int | None = None
    unconfirmed: int | None = None
    state: str = "no ledger"
    conserved: bool = False
    resent: int = 0  # messages the robot port sent the viewer again
    duplicates: int = 0  # copies the viewer dropped as already had
    out_of_order: int = 0  # frames beyond a gap the viewer dropped
    hellos: int = 0
    withheld: int = 0  # RESEND HELLOs not resent to: what it asked for was on its way
    in_flight_max: int | None = None  # the most messages on their way to the viewer at once (if reported)
    drain_s: float = 0.0  # SIGTERM to the ledger
    exit_code: int | None = None
    load_average: float = 0.0
    log_dir: str = ""

    @property
    def resent_ratio(self) -> float | None:
        return self.resent / self.take if self.take else None

    @property
    def duplicate_ratio(self) -> float | None:
        return self.duplicates / self.take if self.take else None


# --- the loads -----------------------------------------------------------------------------------


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def _fsync_writer(directory: str, deadline: float) -> None:
    path = Path(directory) / "fsync-load.bin"
    block = os.urandom(64 * 1024)
    with open(path, "wb") as fh:
        written = 0
        while time.monotonic() < deadline:
            fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
            written += len(block)
            if written >= 64 * 1024 * 1024:  # the same 64 MiB, rewritten: bounded on disk
                fh.seek(0)
                written = 0
    path.unlink(missing_ok=True)


def zmq_threads(pid: int) -> list[int]:
    """The thread ids of ZeroMQ's background threads in process ``pid`` (named ``ZMQbg/...``)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (task / "comm").read_text().startswith("ZMQbg"):
                out.append(int(task.name))
    return out


def _memory_hog(megabytes: int, deadline: float) -> None:
    size = megabytes * 1024 * 1024
    buf = mmap.mmap(-1, size)
    page = mmap.PAGESIZE
    while time.monotonic() < deadline:
        for offset in range(0, size, page):
            buf[offset] = (buf[offset] + 1) & 0xFF
        time.sleep(0.1)
    buf.close()


class Load:
    """A load's processes (or thread), started beside a run and stopped by their pids."""

    def __init__(self, config: LoadConfig, deadline: float, scratch: Path, repo: Path, env: dict[str, str]) -> None:
        self.config = config
        self.deadline = deadline
        self.scratch = scratch
        self.repo = repo
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.halt = threading.Event()
        self.thread: threading.Thread | None = None
        self.stopped_pid: int | None = None

    def _python(self, code: str) -> None:
        self.procs.append(subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=self.env))

    def start(self, target_pid: int | None) -> None:
        for part in self.config.name.split("+"):
            self._start(part, target_pid)

    def _start(self, part: str, target_pid: int | None) -> None:
        c, deadline = self.config, self.deadline
        remaining = max(1.0, deadline - time.monotonic())
        here = f"from mocapline.bench import load as l; import time; d = time.monotonic() + {remaining:.1f}; "
        if part in ("busy", "io"):
            for _ in range(os.cpu_count() or 2):
                self._python(here + "l._spin(d)")
        if part == "io":
            if target_pid is None:
                raise SystemExit(f"mocapline bench load: --load io found no {c.service} process")
            for tid in zmq_threads(target_pid):
                with contextlib.suppress(OSError):
                    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        elif part == "fsync":
            self._python(here + f"l._fsync_writer({str(self.scratch)!r}, d)")
        elif part == "memory":
            self._python(here + f"l._memory_hog({c.memory_mb}, d)")
        elif part == "suite":
            if not (self.repo / "tests").is_dir():
                raise SystemExit(f"mocapline bench load: no tests/ under {self.repo} for --load suite")
            self.procs.append(subprocess.Popen(
                f"exec timeout {remaining:.0f} {sys.executable} -m pytest {c.suite_args}", shell=True,
                cwd=self.repo, env=self.env, start_new_session=True, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        elif part == "stop":
            if target_pid is None:
                raise SystemExit(f"mocapline bench load: --load stop found no {c.service} process")
            self.stopped_pid = target_pid
            self.thread = threading.Thread(target=self._duty_cycle, args=(target_pid,), daemon=True)
            self.thread.start()

    def _duty_cycle(self, pid: int) -> None:
        c = self.config
        while not self.halt.is_set() and time.monotonic() < self.deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            self.halt.wait(c.stop_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.halt.wait(c.run_s)

    def stop(self) -> None:
        self.halt.set()
        if self.thread is not None:
            self.thread.join(5)
        if self.stopped_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.stopped_pid, signal.SIGCONT)
        for proc in self.procs:
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


# --- one run -------------------------------------------------------------------------------------


def up_command(log_dir: Path, code: Path) -> list[str]:
    """`up --demo` on private ports, with the flags of the tree at ``code`` (the retarget ->
    streamer link's was ``--robot-port`` until issue 34)."""
    nats = free_tcp_port()
    up = (code / "mocapline" / "tools" / "pipeline" / "up.py").read_text()
    link = "--retarget-port" if "--retarget-port" in up else "--robot-port"
    return [sys.executable, "-m", "mocapline.cli", "up", "--demo", "--main-port", str(free_udp_port()),
            "--side-port", str(free_udp_port()), "--output-port", str(free_tcp_port()),
            "--human-port", str(free_tcp_port()), link, str(free_tcp_port()),
            "--nats", f"nats://127.0.0.1:{nats}", "--web-port", str(free_tcp_port()), "--display", "web",
            "--log-dir", str(log_dir)]


def find_service(up_pid: int, name: str) -> int | None:
    """The pid of ``up``'s child running ``mocapline <name>``."""
    for pid in child_pids(up_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mocapline.cli" in argv and argv[argv.index(b"mocapline.cli") + 1:][:1] == [name.encode()]:
            return pid
    return None


def parse_ledger(text: str) -> dict[str, Any]:
    """The final ledger `up` printed (``print_ledger``: one ``field  value`` a line)."""
    ledger: dict[str, Any] = {}
    for line in text.splitlines():
        m = _LEDGER_LINE.match(line)
        if m is None:
            continue
        key, raw = m.group(1), m.group(2).strip()
        try:
            ledger[key] = json.loads(raw)
        except ValueError:
            ledger[key] = raw
    return ledger


def last_json_line(path: Path) -> dict[str, Any] | None:
    """A service's final counts: the last JSON object line of its log."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    return value
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def result_from(load: str, code: str, ledger: dict[str, Any], viewer: dict[str, Any] | None) -> RunResult:
    r = RunResult(load, code, take=_int(ledger.get("source_unique_frames")),
                  viewer_applied=_int(ledger.get("viewer_applied")), zmq_sent=_int(ledger.get("zmq_sent")),
                  unconfirmed=_int(ledger.get("unconfirmed")), state=str(ledger.get("state", "no ledger")),
                  conserved=ledger.get("unique_frames_conserved") == 1)
    consumer = (ledger.get("consumers") or {}).get("viewer") if isinstance(ledger.get("consumers"), dict) else None
    if isinstance(consumer, dict):
        r.resent = int(consumer.get("resent", 0))
        r.hellos = int(consumer.get("hellos", 0))
        r.withheld = int(consumer.get("resends_withheld", 0))
        r.in_flight_max = _int(consumer.get("in_flight_max"))
    link = ((viewer or {}).get("durable") or {}).get("input_link") or {}
    r.duplicates = int(link.get("duplicates", 0))
    r.out_of_order = int(link.get("out_of_order", 0))
    return r


def race_once(code: Path, duration_s: float) -> RunResult:
    """``--load race``: race.py run with the code under test on its path (it uses only what f243c4f had)."""
    script = Path(__file__).with_name("race.py")
    env = {**os.environ, "PYTHONPATH": str(code), "MOCAPLINE_METRICS_PORT": "0"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                           str(duration_s)], capture_output=True, text=True, env=env, cwd=code,
                          timeout=duration_s + 240)
    r = RunResult("race", str(code), load_average=os.getloadavg()[0], exit_code=done.returncode,
                  drain_s=round(time.monotonic() - started - duration_s, 1))
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
    if line is None:
        r.state = "race failed: " + done.stderr.strip()[-200:]
        return r
    got = json.loads(line)
    r.take, r.viewer_applied = got["take"], got["viewer_applied"]
    r.resent, r.duplicates, r.hellos, r.withheld = got["resent"], got["duplicates"], got["hellos"], got["withheld"]
    r.in_flight_max = got["in_flight_max"]
    r.conserved = r.viewer_applied == r.take
    r.state = "conserved" if r.conserved else f"not conserved: the viewer applied {r.viewer_applied} of {r.take}"
    return r


def run_once(load: LoadConfig, code: Path, duration_s: float, drain_timeout_s: float, repo: Path) -> RunResult:
    if load.name == "race":
        return race_once(code, duration_s)
    log_dir = Path(tempfile.mkdtemp(prefix="mocapline-load-"))
    env = {**os.environ, "PYTHONPATH": str(code), "MOCAPLINE_METRICS_PORT": "0"}
    load_env = {**os.environ, "PYTHONPATH": str(repo)}
    up = subprocess.Popen(up_command(log_dir, code), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, cwd=code, start_new_session=True)
    assert up.stdout is not None
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(up.stdout or ()), daemon=True)
    reader.start()
    result = RunResult(load.name, str(code), log_dir=str(log_dir))
    runner = Load(load, time.monotonic() + 60 + duration_s + drain_timeout_s, log_dir, repo, load_env)
    try:
        started = time.monotonic()
        while not any("pipeline up" in line for line in list(out)):
            if up.poll() is not None or time.monotonic() - started > 120:
                result.state = "did not start: " + "".join(out[-5:]).strip()
                return result
            time.sleep(0.2)
        runner.start(find_service(up.pid, load.service))
        time.sleep(duration_s)
        result.load_average = os.getloadavg()[0]
        os.kill(up.pid, signal.SIGTERM)
        sigterm_at = time.monotonic()
        try:
            result.exit_code = up.wait(drain_timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(up.pid, signal.SIGTERM)  # the second one: stop at once
            result.exit_code = up.wait(60)
        result.drain_s = round(time.monotonic() - sigterm_at, 1)
    finally:
        runner.stop()
        if up.poll() is None:
            signal_group(up.pid, signal.SIGKILL)
            up.wait()
        reader.join(5)
    text = "".join(out)
    (log_dir / "up.out").write_text(text)
    parsed = result_from(load.name, str(code), parse_ledger(text), last_json_line(log_dir / "viewer.log"))
    parsed.drain_s, parsed.exit_code, parsed.load_average, parsed.log_dir = (result.drain_s, result.exit_code,
                                                                              result.load_average, str(log_dir))
    return parsed


# --- the report ----------------------------------------------------------------------------------


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(results: Sequence[RunResult]) -> str:
    head = (f"{'load':<7} {'code':<22} {'take':>6} {'applied':>7} {'verdict':<13} {'resent':>7} {'/take':>6} "
            f"{'dups':>6} {'/take':>6} {'hellos':>6} {'withh':>5} {'inflt':>5} {'drain_s':>7} {'load':>5}")
    rows = [head]
    for r in results:
        verdict = "conserved" if r.conserved else ("NOT conserved" if r.take is not None else r.state[:13])
        rows.append(f"{r.load:<7} {Path(r.code).name[-22:]:<22} {r.take if r.take is not None else '-':>6} "
                    f"{r.viewer_applied if r.viewer_applied is not None else '-':>7} {verdict:<13} {r.resent:>7} "
                    f"{_ratio(r.resent_ratio):>6} {r.duplicates:>6} {_ratio(r.duplicate_ratio):>6} {r.hellos:>6} "
                    f"{r.withheld:>5} "
                    f"{r.in_flight_max if r.in_flight_max is not None else '-':>5} {r.drain_s:>7} "
                    f"{r.load_average:>5.1f}")
    return "\n".join(rows)


def summary(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per (code, load): runs, conserved runs, the worst resent and duplicate ratios."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        key = f"{Path(r.code).name}/{r.load}"
        s = out.setdefault(key, {"runs": 0, "conserved": 0, "max_resent_ratio": 0.0, "max_duplicate_ratio": 0.0})
        s["runs"] += 1
        s["conserved"] += int(r.conserved)
        s["max_resent_ratio"] = max(s["max_resent_ratio"], r.resent_ratio or 0.0)
        s["max_duplicate_ratio"] = max(s["max_duplicate_ratio"], r.duplicate_ratio or 0.0)
    return out


def load_name(text: str) -> str:
    unknown = [part for part in text.split("+") if part not in LOADS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown load {', '.join(unknown)} (loads: {', '.join(LOADS)})")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mocapline bench load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", action="append", type=load_name, default=None,
                   help=f"a load to run beside `up --demo`, one of {', '.join(LOADS)} or several joined by + "
                        "(stop+busy); repeatable; default: each alone, once")
    p.add_argument("--runs", type=int, default=1, help="runs per load and code tree")
    p.add_argument("--duration", type=float, default=40.0, help="seconds of `up --demo` before its SIGTERM")
    p.add_argument("--drain-timeout-s", type=float, default=300.0,
                   help="how long `up` may drain after SIGTERM before a second SIGTERM stops it at once")
    p.add_argument("--code", action="append", type=Path, default=None,
                   help="a source tree to run `up` from (PYTHONPATH; repeatable; default: this package's)")
    p.add_argument("--stop-s", type=float, default=0.8, help="--load stop: the viewer's SIGSTOP, seconds")
    p.add_argument("--run-s", type=float, default=0.2, help="--load stop: the viewer's SIGCONT, seconds")
    p.add_argument("--service", default="viewer",
                   help="--load stop / io: the service stopped or whose ZeroMQ I/O thread is starved")
    p.add_argument("--memory-mb", type=int, default=1024, help="--load memory: megabytes touched over and over")
    p.add_argument("--suite-args", default=DEFAULT_SUITE_ARGS, help="--load suite: pytest's arguments")
    p.add_argument("--json", action="store_true", help="one JSON object: every run and the summary")
    return p


def runs(args: argparse.Namespace, repo: Path) -> Iterator[RunResult]:
    for _ in range(args.runs):
        for name in args.load or LOADS:
            for code in args.code or [repo]:
                config = LoadConfig(name, stop_s=args.stop_s, run_s=args.run_s, memory_mb=args.memory_mb,
                                    suite_args=args.suite_args, service=args.service)
                yield run_once(config, code.resolve(), args.duration, args.drain_timeout_s, repo)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    results: list[RunResult] = []
    for result in runs(args, repo):
        results.append(result)
        if not args.json:
            print(table([result]).splitlines()[-1] if len(results) > 1 else table([result]), flush=True)
    if args.json:
        print(json.dumps({"runs": [{**asdict(r), "resent_ratio": r.resent_ratio, "duplicate_ratio": r.duplicate_ratio}
                                   for r in results], "summary": summary(results)}))
    else:
        print(json.dumps(summary(results)))
    return 0 if all(r.conserved for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
