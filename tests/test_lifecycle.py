"""What a person sees at the keyboard: `mocapline up`, `demo` and `record` in a terminal (a pty), a
Ctrl-C (SIGINT to the terminal's process group, as the shell sends it) at start-up, while running
and twice while draining: no traceback, one clear last line, and no process or port left behind.
And a take that loops (each loop a backward jump of posture_index) ends conserved."""

from __future__ import annotations

import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import wait_until

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.procs import (
    child_pids,
    describe_process,
    free_tcp_port,
    free_udp_port,
    holds_any,
    port_free,
    process_alive,
)
from mocapline.tools.pipeline.stack import Stack, local_config

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Terminal:
    """A command in its own session on a pty, like a shell's foreground job."""

    proc: subprocess.Popen[bytes]
    master: int
    output: bytes = b""

    @classmethod
    def start(cls, *args: str) -> Terminal:
        """`mocapline ARGS` of this checkout."""
        return cls.start_command([sys.executable, "-m", "mocapline.cli", *args],
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})

    @classmethod
    def start_command(cls, argv: list[str], *, env: dict[str, str], cwd: Path | None = None) -> Terminal:
        master, slave = pty.openpty()
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, cwd=cwd,
                                env={**env, "COLUMNS": "120", "LINES": "40"})
        os.close(slave)
        return cls(proc, master)

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.output += chunk
            elif self.proc.poll() is not None:
                return

    def wait_for(self, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while text.encode() not in self.output:
            assert time.monotonic() < end, f"{text!r} not seen in:\n{self.text}"
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.text}"
            self.read(0.2)

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)  # the whole foreground group, as a terminal does

    def finish(self, timeout: float = 90.0) -> int:
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            self.read(0.2)
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the tool stops its services (a SIGKILL would orphan them)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            pytest.fail(f"did not exit within {timeout:.0f} s:\n{self.text}")
        self.read(0.5)
        os.close(self.master)
        return self.proc.returncode

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    @property
    def last_line(self) -> str:
        lines = [ln.strip() for ln in self.text.replace("\r", "").splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def up_args(tmp_path: Path) -> tuple[list[str], list[tuple[int, int]]]:
    """`up --demo` on free ports (beside anything else on this machine), and those ports."""
    udp = [free_udp_port(), free_udp_port()]
    tcp = [free_tcp_port() for _ in range(5)]
    args = ["up", "--demo", "--log-dir", str(tmp_path / "logs"), "--main-port", str(udp[0]), "--side-port", str(udp[1]),
            "--output-port", str(tcp[0]), "--human-port", str(tcp[1]), "--retarget-port", str(tcp[2]),
            "--web-port", str(tcp[3]), "--nats", f"nats://127.0.0.1:{tcp[4]}"]
    return args, [(p, socket.SOCK_DGRAM) for p in udp] + [(p, socket.SOCK_STREAM) for p in tcp]


def assert_nothing_left(term: Terminal, ports: list[tuple[int, int]]) -> None:
    assert "Traceback" not in term.text, term.text
    assert child_pids(term.proc.pid) == []
    for port, kind in ports:  # every port is free again (the services and NATS are gone)
        assert port_free(port, kind, "0.0.0.0"), f"port {port} still taken after:\n{term.text}"
    leftovers = subprocess.run(["pgrep", "-f", f"--web-port={ports[5][0]}"], capture_output=True, text=True).stdout
    assert leftovers == "", f"processes left: {leftovers}"


def wait_for_file(term: Terminal, path: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end and term.proc.poll() is None, f"{path} never appeared:\n{term.text}"
        term.read(0.05)


def _loaded(pid: int, library: str) -> bool:
    """Whether process ``pid`` has mapped a file whose path names ``library``."""
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_ctrl_c_while_python_still_imports(tmp_path) -> None:
    """So early that nothing was started: one line, no traceback, nothing to stop."""
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    # Once the interpreter runs mocapline's imports (numpy is among the first): a signal before
    # Python's own start-up is done (its site module) is the interpreter's to report, not ours.
    wait_until(lambda: _loaded(term.proc.pid, "numpy"), 60, interval=0.01, what="mocapline's imports to begin")
    term.ctrl_c()
    assert term.finish() == 130, term.text
    early = ("mocapline: interrupted", "mocapline up: interrupted during start-up")
    assert term.last_line.startswith(early), term.text
    assert_nothing_left(term, ports)


@pytest.mark.parametrize("started", ["nats.log", "viewer.log"])
def test_ctrl_c_during_start_up_stops_everything(tmp_path, started) -> None:
    """Once NATS is starting, and once every service is (their logs appear as they start). A log
    is opened just before its process is spawned: a Ctrl-C between the two finds nothing started
    and says so (truthfully), so the signal waits for the first child process as well."""
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    wait_for_file(term, tmp_path / "logs" / started)
    wait_until(lambda: bool(child_pids(term.proc.pid)), 60, interval=0.005, what="up's first child process")
    term.ctrl_c()
    assert term.finish() == 130, term.text
    expected = "mocapline up: interrupted during start-up; every process it started has exited"
    assert term.last_line.startswith(expected), term.text
    assert_nothing_left(term, ports)


def test_ctrl_c_while_running_drains_and_prints_the_final_ledger(tmp_path) -> None:
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    term.wait_for("verdict: running", timeout=90)
    term.read(2.0)
    term.ctrl_c()
    assert term.finish() == 0, term.text
    text = term.text
    # The start-up lines are still on screen above the live table (only the table is redrawn).
    assert text.index("web viewer at http://127.0.0.1:") < text.index("stage ")
    assert "\x1b[2J" not in text  # the screen is never cleared
    assert "unique_frames_conserved   1" in text and "state                     conserved" in text, text
    assert term.last_line.startswith("mocapline up: stopped; every process it started has exited"), text
    assert_nothing_left(term, ports)


def test_a_hangup_drains_and_leaves_nothing_running(tmp_path) -> None:
    """The terminal closed (or the ssh session dropped): SIGHUP reaches `up` alone (the services
    run in sessions of their own). It ends the take as Ctrl-C does instead of dying and leaving
    every service running on its ports."""
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    term.wait_for("verdict: running", timeout=90)
    os.kill(term.proc.pid, signal.SIGHUP)
    assert term.finish() == 0, term.text
    assert "state                     conserved" in term.text, term.text
    assert_nothing_left(term, ports)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = child_pids(todo.pop())
        found += children
        todo += children
    return found


def test_up_killed_with_sigkill_leaves_no_service_running(tmp_path) -> None:
    """`kill -9` of `up` runs none of its clean-up: each process it started (in a session of its
    own, so no signal reaches it) sees its supervisor gone and stops by itself, NATS included, and
    every port is free again."""
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    term.wait_for("verdict: running", timeout=90)
    started = _descendants(term.proc.pid)
    assert len(started) >= 7, started  # NATS, capture's holder and capture, retarget, streamer, viewer, auditor, emit
    term.proc.kill()
    term.proc.wait()
    wait_until(lambda: not any(process_alive(pid) for pid in started), timeout=30,
               what="every process `up` started to stop")
    for port, kind in ports:
        assert port_free(port, kind, "0.0.0.0"), f"port {port} still taken by {[describe_process(p) for p in started]}"
    os.close(term.master)


def test_up_xsens_demo_streams_a_synthetic_mvn_take_and_ends_conserved(tmp_path) -> None:
    """`up --source xsens --demo`: the Xsens path without a suit (`emit --format mvn` looping into
    capture --source xsens); Ctrl-C drains it conserved, nothing rejected, nothing left running."""
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args, "--source", "xsens")
    term.wait_for("verdict: running", timeout=90)
    term.read(3.0)
    term.ctrl_c()
    assert term.finish() == 0, term.text
    text = term.text
    assert "Xsens MVN -> udp" in text and "state                     conserved" in text, text
    assert "rejected_datagrams        0" in text and "gmr_processed             0" not in text, text
    assert_nothing_left(term, ports)


def test_a_second_ctrl_c_while_draining_stops_at_once(tmp_path) -> None:
    args, ports = up_args(tmp_path)
    term = Terminal.start(*args)
    term.wait_for("verdict: running", timeout=90)
    term.ctrl_c()
    term.wait_for("draining", timeout=10)
    term.ctrl_c()
    assert term.finish(timeout=30) == 130, term.text
    assert "stopped at once" in term.last_line, term.text
    assert_nothing_left(term, ports)


def _sending_udp(pid: int) -> bool:
    """Whether process ``pid`` holds a UDP socket that has sent (an unbound one is in no table):
    the demo's emitter, once the take is under way (the demo itself holds none before)."""
    table = Path("/proc/net/udp").read_text().splitlines()[1:]
    return holds_any(Path(f"/proc/{pid}/fd"), {f"socket:[{line.split()[9]}]" for line in table})


def test_demo_interrupted_mid_take_judges_what_was_sent(tmp_path) -> None:
    term = Terminal.start("demo", "--frames", "3000", "--rate", "60")
    end = time.monotonic() + 180  # start-up on a loaded machine: as long as it takes, within reason
    while not _sending_udp(term.proc.pid):  # (it was 9 s of reading: under load, still starting)
        assert time.monotonic() < end and term.proc.poll() is None, f"the take never started:\n{term.text}"
        term.read(0.1)
    term.read(1.0)  # emitting
    term.ctrl_c()
    assert term.finish() == 130, term.text
    assert "interrupted while emitting" in term.text and "unique_frames_conserved" in term.text, term.text
    assert "Traceback" not in term.text
    assert child_pids(term.proc.pid) == []


def test_record_interrupted_during_start_up(tmp_path) -> None:
    term = Terminal.start("record", "--dir", str(tmp_path / "take"), "--main-port", str(free_udp_port()),
                          "--side-port", str(free_udp_port()), "--output-port", str(free_tcp_port()),
                          "--nats", f"nats://127.0.0.1:{free_tcp_port()}", "--no-viewer")
    wait_for_file(term, tmp_path / "take" / "logs" / "capture.log")
    term.ctrl_c()
    assert term.finish() == 130, term.text
    assert "interrupted during start-up" in term.text and "Traceback" not in term.text, term.text


def test_a_looping_take_ends_conserved_segment_by_segment(tmp_path) -> None:
    """Three loops of the same take (posture_index 1000-1239, as the demo take replays): two backward
    jumps, three complete segments, conserved."""
    stack = Stack(local_config(log_dir=tmp_path / "logs", input_fps=240.0, output_fps=240.0))
    try:
        stack.start()
        stack.wait_ready()
        dests = [("127.0.0.1", stack.config.main_port), ("127.0.0.1", stack.config.side_port)]
        for _ in range(3):
            emit_take(TakePlan(frames=240, first_index=1000), dests, rate_hz=240.0)
        verdict = stack.verdict(stack.drain())
    finally:
        stack.stop()
    assert verdict["source_backward_indices"] == 2 and verdict["segments"] == 3
    assert [s["unique_frames"] for s in verdict["per_segment"]] == [240, 240, 240]
    assert all(s["missing_indices"] == 0 and s["first_index"] == 1000 for s in verdict["per_segment"])
    assert verdict["viewer_applied"] == 720 and verdict["unique_frames_conserved"] == 1, verdict
    assert verdict["state"] == "conserved"


def test_preflight_names_the_process_holding_a_port(tmp_path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import socket,time; s=socket.socket(); "
                               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                               "s.bind(('127.0.0.1', int(__import__('sys').argv[1]))); s.listen(); time.sleep(60)",
                               str(port := free_tcp_port())])
    try:
        time.sleep(0.5)
        stack = Stack(local_config(output_port=port))
        problems = stack.preflight()
    finally:
        holder.kill()
        holder.wait()
    named = f"TCP port {port} (streamer output) is in use by PID {holder.pid} (python"
    assert any(named in p for p in problems), problems
