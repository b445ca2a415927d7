"""What the pipeline commands show in the terminal: `mocapline up`'s live table, the final ledger.

The start-up lines (URL, logs, state folder, ports) are printed once and stay; below them the live
table is redrawn in place (cursor up over the last table, clear to the end of the screen), so
nothing above it is ever wiped. Notices (a service's warning or error from its log, a restart) are
printed once, between the two, where they scroll up with the start-up lines.

The table is one consistent picture: the stages are asked downstream first
(``bus.request_stages``), so no stage shows more frames than the one that feeds it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mocapline.core import robotfigures
from mocapline.core.bus import request_stages
from mocapline.core.counters import RetargetTotals, Stages, WorkerShare, from_parts, read_stages
from mocapline.core.verdict import stage_rows
from mocapline.services.auditor.audit import audit, with_workers
from mocapline.tools.pipeline.drain import DrainWait
from mocapline.tools.sim.service import SimCounters

# A service's log line (core/lifecycle.LOG_FORMAT) at WARNING or above.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (\S+) (WARNING|ERROR|CRITICAL) (.*)$")
# A line a service prints itself when it gives up ("mocapline viewer: cannot serve on ...").
_SERVICE_SAYS = re.compile(r"^(mocapline \w+: .*)$")


def snapshot(nats_url: str, timeout: float = 2.0, also: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Every stage's counts, read downstream first (``bus.request_stages``: one consistent picture,
    retarget's workers included); {} when NATS is down. Retarget as workers: ``retarget`` is their
    sum (``with_workers``). ``also``: services asked after them (the sim)."""
    try:
        stages = asyncio.run(request_stages(nats_url, timeout, also))
    except Exception:  # noqa: BLE001 - the next tick asks again
        return {}
    return with_workers(stages)


def verdict_line(stages: dict[str, dict[str, Any]]) -> str:
    """The live verdict in words, e.g. ``running, 3 in flight; segments 2, missing 0, duplicate 0``."""
    if "capture" not in stages:
        return "verdict: waiting for the stages"
    v = audit({"services": stages, "side": None}, final=False)
    if v["source_received"] == 0:
        return f"verdict: {v['state']} (nothing received yet; rejected {_n(v['rejected_datagrams'])})"
    return (f"verdict: {v['state']}; segments {v.get('segments') or 0}, missing {v['source_missing_indices']}, "
            f"duplicate {v['source_duplicate_indices']}, last_posture_index {_n(v['last_posture_index'])}")


@dataclass
class LogWatch:
    """Reads the services' logs as they grow; returns each new warning or error as one line."""

    log_dir: Path
    names: tuple[str, ...]
    offsets: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.names:  # a restarted run appends: only what comes from now on
            path = self.log_dir / f"{name}.log"
            self.offsets[name] = path.stat().st_size if path.exists() else 0

    def new_notices(self, limit: int = 20) -> list[str]:
        out: list[str] = []
        for name in self.names:
            path = self.log_dir / f"{name}.log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets[name])
                    chunk = fh.read(1 << 20)
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a half-written line waits for the next tick
            self.offsets[name] += len(complete)
            for raw in complete.decode(errors="replace").splitlines():
                notice = self._notice(name, raw)
                if notice is not None and len(out) < limit:
                    out.append(notice)
        return out

    def _notice(self, name: str, line: str) -> str | None:
        if m := _LOG_LINE.match(line):
            return f"mocapline: {name}: {m.group(2).lower()}: {m.group(3)}"
        if line.startswith("Traceback "):
            return f"mocapline: {name}: error: a traceback in {self.log_dir / (name + '.log')}"
        if m := _SERVICE_SAYS.match(line):
            return m.group(1)
        return None


class LiveConsole:
    """Notices above, the live table below, redrawn in place on a terminal; one line per tick
    otherwise (a log file, a pipe)."""

    FOOTER = "(Ctrl-C: drain, stop and print the final ledger)"

    def __init__(self, out: TextIO | None = None, interactive: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.interactive = self.out.isatty() if interactive is None else interactive
        self._lines_drawn = 0
        self._notices: list[str] = []
        self._lock = threading.Lock()

    def notice(self, line: str) -> None:
        """Printed once, above the table, at the next draw (thread-safe)."""
        with self._lock:
            self._notices.append(line)

    def draw(self, stages: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            notices, self._notices = self._notices, []
        if self.interactive:
            width = min(shutil.get_terminal_size((120, 40)).columns, 120) - 1
            text = "\n".join([format_table(read_stages(stages)), *robot_lines(stages, width), verdict_line(stages),
                              self.FOOTER])
            erase = f"\x1b[{self._lines_drawn}F\x1b[J" if self._lines_drawn else ""
            self.out.write(erase + "".join(n + "\n" for n in notices) + text + "\n")
            self._lines_drawn = text.count("\n") + 1
        else:
            self.out.write("".join(n + "\n" for n in notices) + format_line(read_stages(stages)) + "\n")
        self.out.flush()

    def release(self) -> None:
        """Leave the last table on screen; what is printed next goes below it."""
        with self._lock:
            notices, self._notices = self._notices, []
        if notices:
            self.out.write("".join(n + "\n" for n in notices))
            self.out.flush()
        self._lines_drawn = 0


class DrainDisplay:
    """The drain's wait for the consumers (``drain.DrainWait.line``): one line redrawn in place on
    a terminal; elsewhere (a log, a pipe) a line when a consumer is done or gone, and every
    ``every_s`` while the wait goes on."""

    def __init__(self, out: TextIO | None = None, interactive: bool | None = None, every_s: float = 5.0) -> None:
        self.out = out or sys.stdout
        self.interactive = self.out.isatty() if interactive is None else interactive
        self.every_s = every_s
        self._drawn = False  # a line on the terminal, not ended yet
        self._shown = False  # anything said
        self._said: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._said_at = float("-inf")

    def show(self, wait: DrainWait) -> None:
        if wait.complete and not self._shown and not wait.gone:
            return  # nothing was waited for: nothing to say
        self._shown = True
        line = "mocapline: draining: " + wait.line()
        if self.interactive:
            self.out.write("\r\x1b[K" + line)
            self._drawn = True
        else:
            who = (tuple(c.name for c in wait.waiting_for), tuple(c.name for c in wait.gone))
            if who == self._said and wait.waited_s - self._said_at < self.every_s and not wait.complete:
                return
            self.out.write(line + "\n")
            self._said, self._said_at = who, wait.waited_s
        self.out.flush()

    def close(self, wait: DrainWait | None) -> None:
        """The end of the wait: the line left as it is, and why it ended if it was not complete."""
        if self._drawn:
            self.out.write("\n")
            self._drawn = False
        if wait is not None and wait.stalled:
            why = "no frame applied for minutes" if wait.ended else "the take's end never reached the streamer"
            self.out.write(f"mocapline: draining: stopped waiting after {wait.waited_s:.0f} s ({why}); "
                           f"{wait.not_applied()}\n")
        self.out.flush()


def format_table(stages: Stages) -> str:
    """Per-stage counts for the live terminal display."""
    cap = stages.capture
    lines = [f"{'stage':<9} {'in':>9} {'out':>9} {'pending':>8} {'rejected':>9}"]
    for name, a, b, c, d in stage_rows(stages):
        lines.append(f"{name:<9} {_n(a):>9} {_n(b):>9} {_n(c):>8} {_n(d):>9}")
        if name == "retarget" and isinstance(stages.retarget, RetargetTotals):
            lines += worker_lines(stages.retarget.workers)
    lines.append(
        f"missing={_n(cap and cap.source_missing_indices)} duplicate={_n(cap and cap.source_duplicate_indices)} "
        f"backward={_n(cap and cap.source_backward_indices)} "
        f"last_posture_index={_n(cap.last_posture_index if cap else None)}"
    )
    return "\n".join(lines)


def robot_lines(stages: Mapping[str, dict[str, Any]], width: int = 100) -> list[str]:
    """The robot end, where it runs: how the bridge keeps up, and what the sim takes of its
    commands; lines of at most ``width`` (a line the terminal wrapped would break the redraw)."""
    robot = read_stages(stages).robot
    if robot is None:
        return []
    out = packed("robot: ", [f"{label} {value}" for label, value in
                             robotfigures.rows(robotfigures.ledger_block(robot))], width)
    if stages.get("sim"):
        out += packed("sim: ", SimCounters.from_json(stages["sim"]).summary().split(", "), width)
    return out


def packed(prefix: str, items: list[str], width: int) -> list[str]:
    """``items`` joined by ", " after ``prefix``, in lines of at most ``width`` where they fit."""
    lines = [prefix]
    for item in items:
        sep = "" if lines[-1] in (prefix, " " * len(prefix)) else ", "
        if len(lines[-1]) + len(sep) + len(item) > width and lines[-1].strip():
            lines[-1] += ","
            lines.append(" " * len(prefix))
            sep = ""
        lines[-1] += sep + item
    return lines


def worker_lines(workers: Mapping[str, WorkerShare]) -> list[str]:
    """Retarget as workers: which worker owns which performers, and the frames each retargeted."""
    return [f"  {name}: performers {','.join(map(str, w.owned)) or '-'}, {w.frames} frames"
            + (f", {w.takeovers} taken over" if w.takeovers else "")
            for name, w in workers.items()]


def format_line(stages: Stages) -> str:
    """One line of per-stage counts, for logs and terminals that are not interactive."""
    cap, ret, st, view = stages.capture, stages.retarget, stages.streamer, stages.viewer
    return (
        f"capture {_n(cap and cap.source_unique_frames)} (rejected {_n(cap and cap.rejected_datagrams)}, "
        f"missing {_n(cap and cap.source_missing_indices)}) | retarget {_n(ret and ret.gmr_processed)} | "
        f"streamer {_n(st and st.on_the_wire)} (pending {_n(st and st.pending)}) | "
        f"viewer {_n(view and view.viewer_applied)} | "
        + (f"robot {stages.robot.robot_applied} ({robotfigures.line(robotfigures.ledger_block(stages.robot))}) | "
           if stages.robot else "")
        + f"last_posture_index {_n(cap.last_posture_index if cap else None)}"
    )


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def print_ledger(ledger: dict[str, Any], *, segments_shown: int = 3) -> None:
    """The ledger, one field a line; per_segment as one line per segment (the latest few)."""
    width = max(len(k) for k in ledger)
    for key, value in ledger.items():
        if key == "per_segment" and isinstance(value, list):
            earlier = max(0, (ledger.get("segments") or len(value)) - segments_shown)
            print(f"{key:<{width}}  " + (f"({earlier} earlier segments not shown)" if earlier else ""))
            for seg in value[-segments_shown:]:
                print(f"  segment {seg['segment']}: {seg['first_index']}-{seg['last_index']}, "
                      f"unique {seg['unique_frames']}, missing {seg['missing_indices']}")
            continue
        if key == "performers" and isinstance(value, dict):
            if len(value) > 1:  # one performer's ledger is the ledger above
                print(key)
                for name, led in value.items():
                    print(f"  performer {name} ({led.get('avatar_name', '')}): {led.get('state')}, unique "
                          f"{led.get('source_unique_frames')}, missing {led.get('source_missing_indices')}")
            continue
        if key == "robot" and isinstance(value, dict):  # the bridge's figures, one a line
            print(key)
            for label, text in robotfigures.rows(value):
                print(f"  {label:<20} {text}")
            continue
        if key == "sim" and isinstance(value, dict):
            print(f"{key:<{width}}  {SimCounters.from_json(value).summary()}")
            continue
        if key == "retarget_workers" and isinstance(value, dict):
            print(key)
            print("\n".join(worker_lines({k: from_parts(WorkerShare, w) for k, w in value.items()})))
            continue
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        print(f"{key:<{width}}  {value}")
