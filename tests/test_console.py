"""The terminal side of `mocapline up`: the live table redrawn under the start-up lines, notices
from the services' logs, signals by phase, and the numbers flags accept."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from helpers import published

from mocapline.core.counters import (
    CaptureCounts,
    RetargetCounts,
    RobotCounts,
    StreamerCounts,
    TrackingError,
    ViewerCounts,
    read_stages,
)
from mocapline.core.lifecycle import stop_on_signals
from mocapline.core.options import EnvArgumentParser, non_negative_float, parse_index_list, positive_int
from mocapline.tools.pipeline.console import LiveConsole, LogWatch, print_ledger, verdict_line
from mocapline.tools.pipeline.interrupt import Interrupted, Phase, SignalGuard
from mocapline.tools.pipeline.procs import busy_port_message, child_pids, kill_children
from mocapline.tools.sim.service import SimCounters, command_balance

CAPTURE = {"source_received": 10, "human_frames_sent": 10, "source_unique_frames": 10,
           "source_backward_indices": 1, "last_posture_index": 4, "segments": 2}
STAGES = {
    "capture": published(CaptureCounts, **CAPTURE),
    "retarget": published(RetargetCounts, frames_in=10, robot_frames_sent=9, gmr_processed=9, pending=1),
    "streamer": published(StreamerCounts, frames_in=9, zmq_sent=8, motion_generated=8, pending=1),
    "viewer": published(ViewerCounts, viewer_received=8, viewer_applied=8),
}


def test_the_table_is_redrawn_in_place_below_what_was_printed() -> None:
    out = io.StringIO()
    console = LiveConsole(out, interactive=True)
    console.draw(STAGES)
    first = out.getvalue()
    assert "\x1b[" not in first  # nothing above is erased the first time
    console.notice("mocapline: viewer: warning: /metrics is off")
    console.draw(STAGES)
    second = out.getvalue()[len(first):]
    table_lines = first.count("\n")
    # cursor up exactly over the last table, clear below it: the start-up lines above stay
    assert second.startswith(f"\x1b[{table_lines}F\x1b[J")
    assert second.index("/metrics is off") < second.index("stage ")
    assert "\x1b[2J" not in out.getvalue()


def test_not_a_terminal_gets_one_line_per_tick() -> None:
    out = io.StringIO()
    LiveConsole(out, interactive=False).draw(STAGES)
    assert out.getvalue().count("\n") == 1 and "\x1b" not in out.getvalue()


def test_verdict_line_says_frames_in_flight() -> None:
    assert verdict_line(STAGES).startswith("verdict: running, 2 in flight; segments 2, missing 0")
    assert verdict_line({}) == "verdict: waiting for the stages"


def test_before_the_first_frame_the_verdict_says_it_waits_not_conserved() -> None:
    """The first live table, before any frame, read `verdict: conserved; segments 0 ...
    last_posture_index None`."""
    from mocapline.services.auditor.audit import audit

    empty = {"capture": published(CaptureCounts), "retarget": published(RetargetCounts),
             "streamer": published(StreamerCounts), "viewer": published(ViewerCounts)}
    assert verdict_line(empty) == "verdict: waiting for the first frame (nothing received yet; rejected 0)"
    live = audit({"services": empty, "side": None}, final=False)
    assert live["state"] == "waiting for the first frame" and live["unique_frames_conserved"] == 0
    assert audit({"services": empty, "side": None})["state"] == "conserved"  # a drained empty take: nothing lost


def test_log_watch_reports_warnings_errors_and_tracebacks_once(tmp_path) -> None:
    log = tmp_path / "viewer.log"
    log.write_text("2026-12-01 01:00:00,000 old WARNING before the start\n")
    watch = LogWatch(tmp_path, ("viewer", "capture"))
    with open(log, "a") as fh:
        fh.write("2026-12-01 01:00:01,000 mocapline.metrics WARNING metrics: cannot serve on 0.0.0.0:9104; "
                 "/metrics is off\n2026-12-01 01:00:01,500 mocapline.viewer INFO fine\n"
                 "Traceback (most recent call last):\n2026-12-01 01:00:02,000 x ERROR half a li")
    notices = watch.new_notices()
    assert notices[0] == "mocapline: viewer: warning: metrics: cannot serve on 0.0.0.0:9104; /metrics is off"
    assert notices[1].startswith("mocapline: viewer: error: a traceback in")
    assert len(notices) == 2  # the INFO line is not news; the half line waits for its end
    with open(log, "a") as fh:
        fh.write("ne\n")
    assert watch.new_notices() == ["mocapline: viewer: error: half a line"]
    assert watch.new_notices() == []


def test_a_signal_while_starting_raises_and_while_running_only_asks_to_stop() -> None:
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite was started in the background
    with SignalGuard() as guard:
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        assert info.value.phase is Phase.STARTING
        guard.enter(Phase.RUNNING)
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.stop.wait(5)  # no exception: the main loop drains
        guard.enter(Phase.DRAINING)
        with pytest.raises(Interrupted):  # the next one while draining: stop at once
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        guard.enter(Phase.STOPPING)
        os.kill(os.getpid(), signal.SIGINT)  # noted, ignored
        assert guard.signals == 4
    assert signal.getsignal(signal.SIGINT) is before


def _returns_while_the_event_is_locked(handler, stop: threading.Event) -> bool:
    """Call ``handler`` as a signal would, while ``stop``'s lock is held (as the main thread holds
    it inside ``stop.wait()`` just after a timeout): True when it returned before the lock was
    let go, and ``stop`` was set after."""
    held, released = threading.Event(), []

    def owner() -> None:
        with stop._cond:  # type: ignore[attr-defined]
            held.set()
            time.sleep(1.0)
            released.append(True)

    t = threading.Thread(target=owner)
    t.start()
    held.wait(5)
    handler(signal.SIGTERM, None)
    returned_first = not released
    t.join()
    return returned_first and stop.wait(5)


def test_a_signal_handler_never_waits_for_the_stop_events_lock() -> None:
    guard = SignalGuard()
    guard.enter(Phase.RUNNING)
    assert _returns_while_the_event_is_locked(guard._handle, guard.stop)
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        stop = stop_on_signals()
        assert _returns_while_the_event_is_locked(signal.getsignal(signal.SIGTERM), stop)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def test_stray_children_are_found_and_stopped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    assert child.pid in child_pids()
    assert child.pid in kill_children(timeout=5)
    assert child.wait(5) is not None and child.pid not in child_pids()


def test_a_busy_port_is_named_with_its_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        message = busy_port_message(port, what="web viewer")
    assert message.startswith(f"TCP port {port} (web viewer) is in use by PID {os.getpid()} (")


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--frames", "-5", "argument --frames: -5 is not allowed: must be 1 or more"),
    ("--frames", "x", "argument --frames: 'x' is not a whole number"),
    ("--rate", "-1", "argument --rate: -1 is not allowed: must be 0 or a number above 0"),
    ("--rate", "nan", "argument --rate: nan is not allowed"),
    ("--drop", "5-x", "argument --drop: '5-x' is not a posture index or a range of them"),
    ("--drop", "9-3", "argument --drop: range '9-3' runs backwards"),
])
def test_nonsense_values_are_refused_naming_the_flag(capsys, flag, value, says) -> None:
    p = EnvArgumentParser(prog="t")
    p.add_argument("--frames", type=positive_int, default=1)
    p.add_argument("--rate", type=non_negative_float, default=1.0)
    p.add_argument("--drop", type=parse_index_list, default=[])
    with pytest.raises(SystemExit):
        p.parse_args([flag, value])
    assert says in capsys.readouterr().err


def test_demo_says_in_one_line_why_it_exits_1() -> None:
    from mocapline.tools.pipeline.demo import why_not_conserved

    line = why_not_conserved({"state": "not conserved: 4 posture indices missing at the source",
                              "missing_by_path": {"main_only": [[80, 80]], "both": [[50, 52]], "side_only": []}})
    assert line == ("exit 1, frames not conserved: 4 posture indices missing at the source "
                    "(missing by path: main_only 1, both 3)")


def test_no_stage_shows_more_than_the_one_feeding_it_while_acknowledgements_are_on_their_way(capsys) -> None:
    """Durable mode: the viewer applied 3159 and acknowledged 3111 so far (48 acknowledgements on
    their way): the streamer's output is the 3159 on the wire, not the 3111 acknowledged."""
    from mocapline.core.counters import RobotCounts
    from mocapline.core.verdict import stage_rows
    from mocapline.services.auditor.audit import audit
    from mocapline.tools.pipeline.console import format_line, print_ledger
    from mocapline.tools.pipeline.status import readable

    stages = {
        "capture": published(CaptureCounts, **{**CAPTURE, "source_received": 3170, "human_frames_sent": 3170,
                                               "source_unique_frames": 3170}),
        "retarget": published(RetargetCounts, frames_in=3170, robot_frames_sent=3165, gmr_processed=3165, pending=5),
        "streamer": published(StreamerCounts, frames_in=3165, zmq_sent=3111, unconfirmed=48, motion_generated=3160,
                              pending=1),
        "viewer": published(ViewerCounts, viewer_received=3159, viewer_applied=3159),
    }
    outs = [row[2] for row in stage_rows(read_stages(stages))]
    assert outs == [3170, 3165, 3159, 3159]
    assert "streamer 3159 " in format_line(read_stages(stages)) and "robot" not in format_line(read_stages(stages))
    with_robot = read_stages({**stages, "robot": published(RobotCounts, robot_received=3150, robot_applied=3149)})
    assert "viewer 3159 | robot 3149 (" in format_line(with_robot)
    assert stage_rows(with_robot)[-1][:3] == ("robot", 3150, 3149)
    ledger = audit({"services": stages, "side": None}, final=False)
    assert ledger["state"] == "running, 11 in flight"
    print_ledger(readable(ledger))
    shown = capsys.readouterr().out
    assert "3159 on the wire (3111 acknowledged, 48 not yet)" in shown
    assert readable({**ledger, "unconfirmed": 0})["zmq_sent"] == 3111


NO_VIEWER_LEDGER = {
    "source_unique_frames": 240, "source_missing_indices": 0, "gmr_processed": 240, "motion_generated": 240,
    "zmq_sent": 0, "unconfirmed": 0, "viewer_applied": None, "input_pending": 0, "robot_pending": 240,
    "streamer_pending": 240, "unique_frames_conserved": 0, "state": "not conserved: motion_generated 240 > zmq_sent 0",
}


def test_demo_without_a_viewer_is_judged_through_the_streamer_and_says_so() -> None:
    from mocapline.tools.pipeline.demo import unconsumed_output

    judged = unconsumed_output(NO_VIEWER_LEDGER)
    assert judged is not None and judged["unique_frames_conserved"] == 1
    assert judged["state"].startswith("conserved through the streamer; its output was not consumed (240 frames")
    assert judged["verdict_covers"].startswith("capture..streamer")


@pytest.mark.parametrize("change", [
    {"source_missing_indices": 3},  # a loss upstream stays a loss
    {"gmr_processed": 239},
    {"streamer_pending": 200, "robot_pending": 200},  # 40 frames neither sent nor waiting
    {"viewer_applied": 0},  # a viewer ran: its count is judged as it is
])
def test_demo_without_a_viewer_still_reports_a_real_loss(change) -> None:
    from mocapline.tools.pipeline.demo import unconsumed_output

    assert unconsumed_output({**NO_VIEWER_LEDGER, **change}) is None


# The robot end of `up --demo --robot sim` as a new user saw it, its figures only in robot.log.
BRIDGE = published(RobotCounts, robot_received=8, robot_applied=8, commands_sent=20551, command_rate_hz=498.0,
                   command_rate_mean_hz=487.3, period_p99_ms=7.5, deadline_misses=516, stalls=2, damped_s=0.0,
                   catchup_ticks=41, clamps_by_reason={"range": 12}, latency_p50_ms=6.0, latency_p99_ms=354.9,
                   tracking_error_rad={"legs": TrackingError(0.04, 0.03, 0.27), "waist": TrackingError(0.06, 0.05, 0.2),
                                       "arms": TrackingError(0.02, 0.01, 0.11)},
                   robot_state="tracking")
SIM = asdict(SimCounters(commands_received=20551, commands_applied=18043, commands_superseded=2508))
ROBOT_FIGURES = ("LowCmd rate 498/s (mean 487.3/s over 20551 commands)", "period p99 7.5 ms", "deadline misses 516",
                 "stalls 2", "catch-up ticks 41", "clamps range 12", "latency p50 / p99 6.0 ms / 354.9 ms",
                 "legs 0.270 rad, waist 0.200 rad, arms 0.110 rad")


def test_the_live_table_shows_how_the_robot_keeps_up_and_what_the_sim_takes() -> None:
    out = io.StringIO()
    LiveConsole(out, interactive=True).draw({**STAGES, "robot": BRIDGE, "sim": SIM})
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) < 120, lines  # a line the terminal wraps would break the redraw in place
    first = next(k for k, line in enumerate(lines) if line.startswith("robot: "))
    robot = " ".join(line.strip() for line in lines[first:] if not line.startswith(("sim: ", "verdict")))
    for figure in ROBOT_FIGURES:
        assert figure in robot, robot
    sim = " ".join(line.strip() for line in lines if line.startswith("sim: ") or line.startswith("     "))
    assert "received 20551 LowCmd: 18043 stepped with, 2508 superseded" in sim, lines
    out = io.StringIO()
    LiveConsole(out, interactive=False).draw({**STAGES, "robot": BRIDGE})
    assert "deadline misses 516" in out.getvalue() and out.getvalue().count("\n") == 1


def test_the_final_ledger_and_status_carry_the_robots_figures(capsys) -> None:
    from mocapline.services.auditor.audit import audit

    verdict = audit({"services": {**STAGES, "robot": BRIDGE}, "side": None})
    block = verdict["robot"]  # status --json, the drained ledger
    assert block["deadline_misses"] == 516 and block["period_p99_ms"] == 7.5 and block["stalls"] == 2
    assert block["latency_p99_ms"] == 354.9 and block["tracking_error_rad"]["arms"]["p99"] == 0.11
    assert block["clamps_by_reason"] == {"range": 12} and block["catchup_ticks"] == 41
    print_ledger({**verdict, "sim": SIM})
    text = capsys.readouterr().out
    for line in ("  deadline misses      516", "  period p99           7.5 ms",
                 "  stalls               2 (damped 0.0 s)", "  latency p50 / p99    6.0 ms / 354.9 ms",
                 "  catch-up ticks       41", "  tracking error p99   legs 0.270 rad, waist 0.200 rad, arms 0.110 rad"):
        assert line in text, text
    assert "received 20551 LowCmd: 18043 stepped with, 2508 superseded" in text


def test_the_sims_count_and_the_bridges_agree_or_the_difference_is_named() -> None:
    """The sim said commands_received 18043 against the bridge's commands_sent 20551, and nothing
    said what the 2508 were: now every LowCmd is received (the reader keeps what comes between two
    steps), and those a newer one replaced before the step are counted as superseded."""
    sim = SimCounters(commands_received=20551, commands_applied=18043, commands_superseded=2500,
                      rejected_by_reason={"crc_or_non_finite": 8})
    line = command_balance(20551, sim)
    assert line == ("the bridge sent 20551 LowCmd; the sim received 20551 LowCmd: 18043 stepped with, 2500 "
                    "superseded (a newer one came before the physics step), 8 rejected")
    assert "3 not received (sent before the sim's reader matched, or lost by DDS)" in command_balance(20554, sim)
    assert "another publisher on the DDS domain" in command_balance(20000, sim)


def test_the_sim_is_asked_again_until_it_has_taken_what_the_stopped_bridge_sent() -> None:
    """CI: the bridge sent 2867 LowCmd, and the sim, asked at once after the bridge stopped, had
    taken 2866 (the last on its way through DDS on a loaded machine). Its counts are read once
    they have caught up; a count that stops short for the settle time is returned as it is."""
    from mocapline.tools.sim.service import settled_counts

    answers = iter([2866, 2866, 2866, 2867, 2867])
    asked: list[int] = []

    def ask() -> dict:
        asked.append(received := next(answers))
        return {"commands_received": received, "commands_applied": received}

    assert settled_counts(ask, 2867).commands_received == 2867 and len(asked) == 4
    lost = settled_counts(lambda: {"commands_received": 2866}, 2867, settle_s=0.2)
    assert lost.commands_received == 2866
    assert "1 not received" in command_balance(2867, lost)


def test_the_run_folder_up_made_goes_after_a_clean_exit_and_stays_named_after_a_failure(tmp_path) -> None:
    """Each `up` left a 10-13 MB /tmp/mocapline-XXXX folder that nothing removed or reused."""
    from mocapline.tools.pipeline.up import tidy_run_folder

    def run_folder(name: str) -> Path:
        folder = tmp_path / name
        (folder / "state" / "capture").mkdir(parents=True)
        (folder / "capture.log").write_text("...\n")
        return folder

    clean = run_folder("clean")
    assert tidy_run_folder(clean, 0, keep=False) is None and not clean.exists()
    failed = run_folder("failed")
    assert tidy_run_folder(failed, 1, keep=False) == f"mocapline up: logs kept in {failed}" and failed.is_dir()
    kept = run_folder("kept")
    assert tidy_run_folder(kept, 0, keep=True) == f"mocapline up: logs kept in {kept}" and kept.is_dir()
    empty = tmp_path / "preflight"  # pre-flight failed: nothing was started, nothing to read
    empty.mkdir()
    assert tidy_run_folder(empty, 1, keep=False) is None and not empty.exists()
