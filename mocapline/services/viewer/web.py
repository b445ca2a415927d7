"""The web viewer: the G1 drawn in the browser (three.js, shipped in the package) from body poses
streamed over a WebSocket, beside the live ledger of every stage and the verdict.

Nothing is rendered on the server, and nothing is computed for a page nobody has open: poses are
packed only while a WebSocket is connected (``watching``), at most ``fps`` times a second; the
stages are asked for their counts only when a page asks for the ledger (at most once a second).

GET /              the page (static/index.html)
GET /static/NAME   its script, style and the vendored three.js (static/vendor/three, MIT)
GET /robot.json    bodies, visual geoms and mesh layout (scene.RobotScene.describe, via scene.RobotAssets)
GET /robot.bin     the meshes, gzip-encoded (scene.RobotScene.mesh_bytes, via scene.RobotAssets)
GET /ws            WebSocket: one binary message per pose update (scene.RobotScene.pose_bytes), with the
                   measured robot (LowState, measured.py) where the viewer was given --robot-domain
GET /ledger.json   the page's data: stage rows (retarget's workers summed, and listed), verdict, viewer
                   counters, latency history, durable rows
GET /healthz       "ok" (compose healthchecks)
GET /plots.json    the PNGs under --plots-dir (`mocapline plot` output), linked from the page
GET /plots/NAME    one of them
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import mimetypes
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from mocapline.core import robotfigures
from mocapline.core.counters import RetargetTotals, Stages, read_stages
from mocapline.core.verdict import performer_layers, pipeline_counts, stage_layers, stage_rows, with_verdict
from mocapline.services.viewer import websocket
from mocapline.services.viewer.apply import LATENCY_WINDOW
from mocapline.services.viewer.scene import MeasuredPose, RobotAssets, RobotScene

STATIC = resources.files("mocapline.services.viewer") / "static"
HISTORY_S = 60


@dataclass
class PoseFeed:
    """The latest pose update and a condition the WebSocket senders wait on."""

    data: bytes = b""
    seq: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def publish(self, data: bytes) -> None:
        with self.cond:
            self.data, self.seq = data, self.seq + 1
            self.cond.notify_all()

    def next_after(self, seq: int, timeout: float) -> tuple[int, bytes]:
        with self.cond:
            self.cond.wait_for(lambda: self.seq != seq, timeout)
            return self.seq, self.data


@dataclass
class LatencyHistory:
    """p50 / p99 of end-to-end latency per second over the last minute, for the page's chart.
    ``take`` returns the latencies (seconds) recorded since it was last called. Seconds during which
    no page watched are gaps: the viewer then takes frames in batches (``--idle-batch-ms``), which
    adds up to a batch to each frame's latency, and the chart is for what a watcher gets."""

    take: Callable[[], list[float]]
    rows: deque[tuple[float, float | None, float | None]] = field(default_factory=lambda: deque(maxlen=HISTORY_S))
    last_tick: float = 0.0

    def tick(self, now: float, watched: bool = True) -> None:
        if now - self.last_tick < 1.0:
            return
        samples = self.take()
        if now - self.last_tick > 5.0 or not watched:  # old samples, or taken in idle batches
            samples = []
        self.last_tick = now
        if samples:
            p50, p99 = np.percentile(np.asarray(samples), [50, 99]) * 1000.0
            self.rows.append((round(time.time(), 1), round(float(p50), 2), round(float(p99), 2)))
        else:
            self.rows.append((round(time.time(), 1), None, None))

    def as_dict(self) -> dict[str, list[Any]]:
        return {"t": [r[0] for r in self.rows], "p50_ms": [r[1] for r in self.rows],
                "p99_ms": [r[2] for r in self.rows]}


def readable_rows(value: Any, prefix: str = "") -> list[list[str]]:
    """A nested dict (the durable state) as [key path, value] rows a person can read."""
    if isinstance(value, dict):
        return [row for key, sub in value.items() for row in readable_rows(sub, f"{prefix}{key}.")]
    label = prefix.rstrip(".")
    if isinstance(value, float):
        return [[label, f"{value:.3f}"]]
    if isinstance(value, list):
        return [[label, ", ".join(map(str, value[:8])) + (" ..." if len(value) > 8 else "")]]
    return [[label, str(value)]]


class PipelineView:
    """The stages' counts, read downstream first (one consistent picture; retarget's workers
    included, as `mocapline up`'s table reads them), at most once a second and only when a page asks."""

    def __init__(self, nats_url: str | None) -> None:
        self.nats_url = nats_url
        self.stages: dict[str, dict[str, Any]] = {}
        self._asked = 0.0
        self._lock = threading.Lock()

    def refresh(self) -> dict[str, dict[str, Any]]:
        if self.nats_url is None:
            return {}
        with self._lock:
            if time.monotonic() - self._asked >= 1.0:
                self._asked = time.monotonic()
                from mocapline.core.bus import request_stages

                try:
                    self.stages = asyncio.run(request_stages(self.nats_url, timeout=1.0, also=("auditor",)))
                except Exception:  # noqa: BLE001 - NATS down: the page shows the viewer's own counts
                    self.stages = {}
            return self.stages


def performer_rows(stages: Stages) -> list[dict[str, Any]]:
    """One row per performer, each judged like a whole take from the same snapshot as the stage
    rows (so no performer's applied count is above its unique frames)."""
    named = {**{k: p.avatar_name for k, p in (stages.viewer.performers if stages.viewer else {}).items()},
             **{k: p.avatar_name for k, p in (stages.capture.performers if stages.capture else {}).items()}}
    keys = sorted(named, key=int)
    rows = []
    for key in keys:
        v = with_verdict(pipeline_counts(performer_layers(stages, key, len(keys) == 1)), final=False)
        rows.append({"performer": int(key), "name": named[key] or "",
                     "applied": v["viewer_applied"], "state": v["state"], "conserved": v["unique_frames_conserved"],
                     "unique": v["source_unique_frames"], "missing": v["source_missing_indices"]})
    return rows


def worker_rows(stages: Stages) -> list[dict[str, Any]]:
    """Retarget as workers (the retarget row is their sum, made by read_stages): who owns which
    performers and the frames each retargeted, as `mocapline up`'s table lists them."""
    if not isinstance(stages.retarget, RetargetTotals):
        return []
    return [{"worker": name, "performers": w.owned, "frames": w.frames, "takeovers": w.takeovers}
            for name, w in stages.retarget.workers.items()]


# The viewer's own latency figures, as the page names them: a longer window than the chart's,
# and they include the seconds no page watched (frames then taken in --idle-batch-ms batches).
VIEWER_LABELS = {
    "latency_p50_ms": f"latency p50 ms (last {LATENCY_WINDOW:,} frames, unwatched time included)",
    "latency_p99_ms": f"latency p99 ms (last {LATENCY_WINDOW:,} frames, unwatched time included)",
}


def source_rows(verdict: dict[str, Any]) -> list[list[Any]]:
    """The page's Source table. The verdict is judged on a drained take: while frames are on their
    way it is the state (``running, N in flight``), not a 0 beside ``unique_frames_conserved``."""
    live = verdict["state"].startswith(("running", "waiting"))
    judged = f"not yet ({verdict['state']}): judged once drained" if live else verdict["unique_frames_conserved"]
    return [
        ["unique frames", verdict["source_unique_frames"]], ["received datagrams", verdict["source_received"]],
        ["missing indices", verdict["source_missing_indices"]],
        ["duplicate indices", verdict["source_duplicate_indices"]],
        ["backward jumps (segments)", f"{verdict['source_backward_indices']} ({verdict['segments']})"],
        ["rejected datagrams", verdict["rejected_datagrams"]], ["last posture_index", verdict["last_posture_index"]],
        ["unique_frames_conserved", judged],
    ]


def page_data(viewer: dict[str, Any], stages: dict[str, dict[str, Any]], latency: LatencyHistory) -> dict[str, Any]:
    """Everything the page shows, in one answer."""
    # The stage rows come from one snapshot (read downstream first); the viewer's own counters,
    # newer than that snapshot, only where there is none.
    answers = dict(stages) if stages else {"viewer": viewer}
    auditor = answers.pop("auditor", {}).get("verdict") or {}
    typed = read_stages(answers)
    verdict = None
    if typed.capture is not None:
        verdict = with_verdict(pipeline_counts(stage_layers(typed)), final=False)
        verdict["missing_by_path"] = auditor.get("missing_by_path")
        verdict["per_segment"] = (verdict.get("per_segment") or [])[-6:]
    viewer_rows = {VIEWER_LABELS.get(k, k): v for k, v in viewer.items()
                   if k != "durable" and not isinstance(v, (list, dict))}
    bridge = typed.robot
    return {
        "stages": [dict(zip(("stage", "in", "out", "pending", "rejected"), row, strict=True))
                   for row in stage_rows(typed)],
        "workers": worker_rows(typed),
        "verdict": verdict,
        "source": source_rows(verdict) if verdict is not None else [],
        "viewer": viewer_rows,
        "latency": latency.as_dict(),
        "durable": readable_rows(viewer.get("durable") or {}),
        "performers": performer_rows(typed),
        # the bridge's own tracking error (measured minus commanded, last 10 s), where it runs, and
        # its figures in words (core/robotfigures.py: as `up` and `status` show them)
        "robot": None if bridge is None else {
            "robot_state": bridge.robot_state, "command_rate_hz": bridge.command_rate_hz,
            "tracking_error_rad": {group: dataclasses.asdict(e) for group, e in bridge.tracking_error_rad.items()},
            "figures": robotfigures.rows(robotfigures.ledger_block(bridge))},
    }


class WebView:
    """The page's server. ``publish_poses`` is called by the viewer's loop (only while ``watching``)."""

    def __init__(self, host: str, port: int, ledger: Callable[[], dict[str, Any]], fps: float = 30.0,
                 plots_dir: Path | None = None, *, assets: RobotAssets | None = None, nats_url: str | None = None,
                 latencies: Callable[[], list[float]] | None = None) -> None:
        self.ledger = ledger
        self.assets = assets
        self.plots_dir = Path(plots_dir).resolve() if plots_dir is not None else None
        self.period = 1.0 / fps if fps > 0 else 1.0 / 30
        self.poses = PoseFeed()
        self.pipeline = PipelineView(nats_url)
        self.latency = LatencyHistory(latencies or list)
        self.clients = 0
        self._clients_lock = threading.Lock()
        self._stopping = threading.Event()
        view = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = unquote(self.path.split("?", 1)[0])
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", view.static("index.html") or b"")
                elif path.startswith("/static/") and (body := view.static(path[len("/static/"):])) is not None:
                    self._send(200, mimetypes.guess_type(path)[0] or "application/octet-stream", body, cache=True)
                elif path == "/robot.json" and view.assets is not None:
                    self._send(200, "application/json", view.assets.describe_bytes(), cache=True)
                elif path == "/robot.bin" and view.assets is not None:
                    self._send(200, "application/octet-stream", view.assets.mesh_bytes(), cache=True, gzip=True)
                elif path == "/ws":
                    view.serve_poses(self)
                elif path == "/ledger.json":
                    self._send(200, "application/json", json.dumps(view.page_data()).encode())
                elif path == "/healthz":
                    self._send(200, "text/plain", b"ok")
                elif path == "/plots.json":
                    self._send(200, "application/json", json.dumps(view.plot_names()).encode())
                elif path.startswith("/plots/") and (png := view.plot(path[len("/plots/"):])) is not None:
                    self._send(200, "image/png", png)
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, code: int, ctype: str, body: bytes, cache: bool = False, gzip: bool = False) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
                if gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.address = f"http://{host}:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, name="web-view", daemon=True)
        self._ticker = threading.Thread(target=self._tick, name="web-latency", daemon=True)

    @property
    def watching(self) -> bool:
        """A page is connected: poses are worth packing."""
        return self.clients > 0

    def start(self) -> None:
        self._thread.start()
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stopping.wait(1.0):
            self.latency.tick(time.monotonic(), self.watching)

    def page_data(self) -> dict[str, Any]:
        return page_data(self.ledger(), self.pipeline.refresh(), self.latency)

    def publish_poses(self, performers: list[tuple[int, int | None, np.ndarray, np.ndarray]],
                      measured: MeasuredPose | None = None) -> None:
        """Every performer's robot: (avatar_index, posture_index, xpos, xquat) each; and the
        measured robot where the viewer reads LowState."""
        self.poses.publish(RobotScene.pose_bytes(performers, measured))

    def serve_poses(self, handler: BaseHTTPRequestHandler) -> None:
        """One page's pose stream, until it goes away or the viewer stops."""
        if not websocket.handshake(handler):
            return
        sock = handler.connection
        with self._clients_lock:
            self.clients += 1
        seq = 0
        try:
            while not self._stopping.is_set():
                new_seq, data = self.poses.next_after(seq, timeout=1.0)
                if websocket.serve_control(sock):
                    break
                if new_seq != seq and data:
                    sock.sendall(websocket.frame(data))
                    seq = new_seq
        except OSError:
            pass  # the page went away
        finally:
            with self._clients_lock:
                self.clients -= 1
            handler.close_connection = True

    def static(self, name: str) -> bytes | None:
        """A file of the page (inside static/ only)."""
        parts = [p for p in name.split("/") if p]
        if not parts or any(p in ("..", ".") for p in parts):
            return None
        target = STATIC.joinpath(*parts)
        return target.read_bytes() if target.is_file() else None

    def plot_names(self) -> list[str]:
        """PNGs under the plots folder (recursively: a folder of takes works), relative paths."""
        if self.plots_dir is None or not self.plots_dir.is_dir():
            return []
        return sorted(str(p.relative_to(self.plots_dir)) for p in self.plots_dir.rglob("*.png"))

    def plot(self, name: str) -> bytes | None:
        """One PNG of the plots folder; None outside it (no path traversal) or when absent."""
        if self.plots_dir is None:
            return None
        target = (self.plots_dir / name).resolve()
        if target.suffix != ".png" or not target.is_file() or self.plots_dir not in target.parents:
            return None
        return target.read_bytes()

    def stop(self) -> None:
        self._stopping.set()
        with self.poses.cond:
            self.poses.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
