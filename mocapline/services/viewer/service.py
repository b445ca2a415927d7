"""`mocapline viewer`: PULL MocapFrames, validate, apply every frame to the G1 in MuJoCo, show it.

Every valid frame is applied (qpos written, ``mj_kinematics``) in arrival order. Where a display
exists the MuJoCo window opens and is redrawn at ``--fps``, not once per frame. Headless (servers,
containers, CI) the robot is drawn by the browser: a web page (default http://127.0.0.1:8080/)
gets the body poses over a WebSocket, at most ``--fps`` times a second and only while a page is
open, beside the live ledger of every stage (``web.py``); with ``--robot-domain`` also the physics
robot from its LowState, over the target, with the tracking error (``measured.py``). Nothing is
rendered in this process. While no page is open the loop takes the frames in batches
``--idle-batch-ms`` apart instead of waking per frame (at 120 Hz most of its CPU was the
wake-ups); a page, a window or ``--display none`` (the end-to-end latency benchmark's viewer)
take each frame as it comes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import mujoco
import zmq

from mocapline.core import durable
from mocapline.core.counters import ViewerCounts, to_json
from mocapline.core.header import MessageType
from mocapline.core.metrics import LINK_REJECT_REASONS, PAYLOAD_REJECT_REASONS
from mocapline.core.modes import Display
from mocapline.core.options import (
    EnvArgumentParser,
    argv,
    choices,
    declared_defaults,
    non_negative_float,
    non_negative_int,
    parse_settings,
    port_number,
    positive_float,
    settings_from,
)
from mocapline.core.stage import (
    Links,
    Stage,
    StageError,
    StageSettings,
    add_stage_arguments,
)
from mocapline.core.transport import add_curve_client_options, client_link
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.viewer.apply import (
    FrameApplier,
    FrameValidator,
    QposWriter,
    ViewerCounters,
)
from mocapline.services.viewer.measured import MeasuredRobot
from mocapline.services.viewer.window import Window

log = logging.getLogger("mocapline.viewer")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline viewer", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5555",
                   help="the streamer's robot port (durable mode: as a named, acknowledging consumer through "
                        "mocapline.client; plain mode: a PULL)")
    p.add_argument("--name", default="viewer", help="durable mode: this viewer's consumer name at the streamer "
                                                    "(stable across restarts; unique per viewer)")
    add_robot_model_argument(p)
    p.add_argument("--display", choices=choices(Display), default="auto",
                   help="auto: a window where a display exists, else the web page; none: apply only")
    p.add_argument("--web-host", default="127.0.0.1", help="address of the web view")
    p.add_argument("--web-port", type=port_number, default=8080, help="port of the web view")
    p.add_argument("--plots-dir", type=Path, default=None,
                   help="a folder of `mocapline plot` output (./TAKE_plots, or a folder of them): the web view "
                        "links every PNG below it")
    p.add_argument("--fps", type=positive_float, default=60.0,
                   help="window redraws / poses sent to a web page per second (frames are applied at any rate)")
    p.add_argument("--idle-batch-ms", type=non_negative_float, default=50.0,
                   help="web display with no page open: take frames in batches this far apart (one wake-up "
                        "per batch, not per frame; each frame's latency grows by up to this); 0 = per frame")
    p.add_argument("--robot-domain", type=non_negative_int, default=None,
                   help="web page: also draw the physics robot from its LowState (rt/lowstate) on this DDS domain "
                        "(1 `mocapline sim` and Unitree's simulator, 0 a real G1), over the target, with the "
                        "tracking error; read only while a page is open; needs the [robot] extra")
    p.add_argument("--robot-interface", default="",
                   help="network interface for that DDS domain (lo = loopback only; empty = Cyclone's choice)")
    p.add_argument("--exit-on-end", action="store_true", help="exit when the stream sends END_OF_STREAM")
    p.add_argument("--report-applied", action="store_true",
                   help="durable mode: print one JSON line per message applied and remembered (the report "
                        "`mocapline port-check --consumer` reads)")
    add_curve_client_options(p)
    add_stage_arguments(p, "viewer", nats_help="NATS server for heartbeats and control", retain_mb=256)
    return p


def choose_display(mode: Display) -> Display:
    if mode != "auto":
        return mode
    return "window" if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") else "web"


@dataclass(frozen=True)
class ViewerSettings:
    """`mocapline viewer`'s flags."""

    input: str
    name: str
    robot_model: str
    display: Display
    web_host: str
    web_port: int
    plots_dir: Path | None
    fps: float
    idle_batch_ms: float
    robot_domain: int | None
    robot_interface: str
    exit_on_end: bool
    report_applied: bool
    curve_client_key: str
    curve_server_public: str
    stage: StageSettings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ViewerSettings:
        return settings_from(cls, args, stage=StageSettings.from_args(args))

    @classmethod
    def defaults(cls) -> ViewerSettings:
        """The settings of ``mocapline viewer`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return cls.from_args(declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        parser = build_parser()
        return argv(parser, {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "stage"}) + \
            self.stage.to_argv(parser)


@dataclass
class ViewerLoop:
    """The viewer's part of the stage loop: take what is waiting, apply it, show the pose."""

    links: Links
    data: mujoco.MjData
    counters: ViewerCounters
    validator: FrameValidator
    applier: FrameApplier
    exit_on_end: bool = False
    web: Any = None  # web.WebView
    window: Window | None = None
    period: float = 0.0
    idle_batch_s: float = 0.0
    report_applied: bool = False
    measured: MeasuredRobot | None = None  # the physics robot from LowState (--robot-domain)
    ended: bool = False
    _last_frame_at: float = field(default_factory=time.monotonic)
    _next_render: float = 0.0
    _next_batch: float = 0.0

    def step(self) -> bool:
        rx, links = self.links.rx, self.links
        go_on = True
        wait_ms = self._wait_before_taking()
        for _ in range(1000):  # everything that is waiting before the next apply, bounded to stay responsive
            msg = rx.recv(timeout_ms=wait_ms)
            if msg is None:
                break
            wait_ms = 0  # after the first: only what is already waiting
            self._last_frame_at = time.monotonic()
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.counters.observe_frame_id(msg.header)
                self.ended = True
                links.done(msg.header.frame_id, self.counters.durable_state(None))
                self._report({"frame_id": msg.header.frame_id, "end": True})
                go_on = not self.exit_on_end
                break
            self.ended = False
            frame = self.validator.accept(msg)
            if links.durable is not None:  # applied and remembered before the next frame is taken
                self.applier.apply_pending(self.validator)
                applied = None if frame is None else frame.posture_index
                links.done(msg.header.frame_id, self.counters.durable_state(applied))
                self._report({"frame_id": msg.header.frame_id, "posture_index": applied})  # None: not applied
        self.applier.apply_pending(self.validator)
        now = time.monotonic()
        watching = self.web is not None and self.web.watching
        if watching and now >= self._next_render:  # nobody watching: nothing
            performers = sorted(self.applier.performers.items())
            measured = None
            if self.measured is not None:  # compared with the first performer (the bridge's default)
                self.measured.poll(True, now)
                measured = self.measured.view((performers[0][0], performers[0][1].data.qpos) if performers else None,
                                              now)
            self.web.publish_poses([(k, p.posture_index, p.data.xpos, p.data.xquat) for k, p in performers],
                                   measured)
            self._next_render = now + self.period
        elif self.measured is not None and not watching:
            self.measured.poll(False, now)
        if self.window is not None and now >= self._next_render:
            if not self.window.is_running():
                return False
            poses = self.applier.performers  # the first performer's pose is the window's own data
            order = sorted(poses, key=lambda k: poses[k].data is not self.data)
            self.window.show([poses[k].data for k in order[1:]],
                             [self.counters.performer_names.get(k, "") for k in order])
            self._next_render = now + self.period
        return go_on

    def _report(self, line: dict[str, Any]) -> None:
        if self.report_applied:
            print(json.dumps(line), flush=True)

    def _wait_before_taking(self) -> int:
        """How long the first receive of a step may wait (ms). While a web page could show the
        frames but none is open, the loop sleeps until the next ``idle_batch_s`` tick and then takes
        everything that queued meanwhile: one wake-up per batch instead of one per frame (the
        frames wait in the socket; their latency, measured when applied, includes the wait)."""
        if self.idle_batch_s <= 0 or self.web is None or self.web.watching:
            return 10
        now = time.monotonic()
        if now < self._next_batch:
            time.sleep(self._next_batch - now)
        self._next_batch = max(now, self._next_batch) + self.idle_batch_s
        return 0

    def heartbeat(self) -> ViewerCounts:
        counts = self.counters.counts(pending=len(self.validator.pending), ended=self.ended)
        return counts if self.measured is None else replace(counts, **self.measured.as_dict())

    def reset(self) -> None:
        counters = ViewerCounters(rejected=self.counters.rejected)
        counters.rejected.clear()
        self.counters = self.validator.counters = self.applier.counters = counters
        if self.web is not None:
            self.web.latency.take = counters.take_recent_latencies
        self.links.remember(counters.durable_state(None))

    def begin_drain(self, args: dict[str, Any]) -> None:
        pass

    def drained(self) -> bool:
        quiet = time.monotonic() - self._last_frame_at > 0.5
        return (self.ended or quiet) and not self.validator.pending

    def finish(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(ViewerSettings.from_args, build_parser(), argv)
    if settings is None:
        return 2
    from mocapline.robot.model import load_full_model, load_ik_model

    # The window draws the meshes itself; otherwise only the kinematics are needed (the web page
    # gets the meshes from scene.RobotAssets), a small fraction of the memory (docs/benchmarks.md).
    robot = get_robot(settings.robot_model)
    display = choose_display(settings.display)
    hands = robot.hands.left + robot.hands.right if robot.hands is not None else ()
    # a build with hands: the model with their joints free (the IK's locks them), so that they move
    model = (load_full_model(robot, scene=True) if display == "window"
             else load_full_model(robot) if hands else load_ik_model(robot))
    data = mujoco.MjData(model)
    counters = ViewerCounters()
    reasons = (*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS, "non_finite")
    with Stage("viewer", settings.stage, reasons=reasons) as stage:
        try:
            links = stage.open_links(
                input=durable.LinkSpec(settings.input, MessageType.MOTION_FRAME, robot.joint_count, kind="fanout",
                                       name=settings.name, curve_client_key=settings.curve_client_key,
                                       curve_server_public=settings.curve_server_public),
                plain_input=lambda ctx: client_link(ctx, zmq.PULL, settings.input,
                                                    curve_client_key=settings.curve_client_key,
                                                    curve_server_public=settings.curve_server_public),
            )
        except StageError as exc:
            return stage.fail(str(exc))
        links.rx.rejects = counters.rejected
        if links.durable is not None and links.durable.restored is not None:
            counters.restore(links.durable.restored)
        applier = FrameApplier(model, data, QposWriter(model, robot.joint_names, hands), counters,
                               metrics=stage.metrics, tracer=stage.tracer)
        loop = ViewerLoop(links, data, counters, FrameValidator(counters, robot.name), applier, settings.exit_on_end,
                          period=1.0 / settings.fps if settings.fps > 0 else 0.0,
                          idle_batch_s=settings.idle_batch_ms / 1000, report_applied=settings.report_applied)
        try:
            open_display(stage, settings, model, loop)
        except OSError as exc:
            return stage.fail(f"cannot serve on {settings.web_host}:{settings.web_port}: {exc}")
        return stage.run(loop)


def open_display(stage: Stage, settings: ViewerSettings, model: mujoco.MjModel, loop: ViewerLoop) -> None:
    """The web page (drawn by the browser from poses) or the MuJoCo window; closed with the stage."""
    display = choose_display(settings.display)
    if display == "web":
        from mocapline.services.viewer.scene import RobotAssets
        from mocapline.services.viewer.web import WebView

        web = WebView(settings.web_host, settings.web_port, lambda: to_json(stage.heartbeat(loop)), settings.fps,
                      plots_dir=settings.plots_dir, assets=RobotAssets(settings.robot_model),
                      nats_url=settings.stage.nats,
                      latencies=loop.counters.take_recent_latencies)
        web.start()
        stage.exits.callback(web.stop)
        loop.web = web
        if settings.robot_domain is not None:
            loop.measured = MeasuredRobot(get_robot(settings.robot_model), settings.robot_domain,
                                          settings.robot_interface, model, loop.applier.writer.joint_adr,
                                          loop.applier.writer.hand_adr)
            stage.exits.callback(loop.measured.close)
        print(f"mocapline viewer: live view at {web.address}", file=sys.stderr, flush=True)
    elif display == "window":
        loop.window = Window(model, loop.data)
        stage.exits.callback(loop.window.close)


if __name__ == "__main__":
    sys.exit(main())
