"""`mocapline viewer`: PULL MocapFrames, validate, apply every frame to the G1 in MuJoCo, render.

Every valid frame is applied (qpos written, ``mj_forward``) in arrival order; rendering runs at
display rate. Where a display exists the MuJoCo window opens; headless (servers, containers, CI)
the view is rendered offscreen and served as a live web page with the ledger (default
http://127.0.0.1:8080/).
"""

from __future__ import annotations

import os

# MuJoCo picks its GL backend at import: headless machines need EGL for offscreen rendering.
if "MUJOCO_GL" not in os.environ and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ["MUJOCO_GL"] = "egl"

import argparse  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

from mocapline.core import durable  # noqa: E402
from mocapline.core.header import G1_JOINT_COUNT, MessageType  # noqa: E402
from mocapline.core.metrics import LINK_REJECT_REASONS, PAYLOAD_REJECT_REASONS  # noqa: E402
from mocapline.core.options import EnvArgumentParser, port_number, settings_from  # noqa: E402
from mocapline.core.stage import (  # noqa: E402
    Links,
    Stage,
    StageError,
    StageSettings,
    add_stage_arguments,
)
from mocapline.core.transport import add_curve_client_options, client_link  # noqa: E402
from mocapline.services.viewer.apply import (  # noqa: E402
    FrameApplier,
    FrameValidator,
    QposWriter,
    ViewerCounters,
)

log = logging.getLogger("mocapline.viewer")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline viewer", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5555",
                   help="the streamer's robot port (durable mode: as a named, acknowledging consumer through "
                        "mocapline.client; plain mode: a PULL)")
    p.add_argument("--name", default="viewer", help="durable mode: this viewer's consumer name at the streamer "
                                                    "(stable across restarts; unique per viewer)")
    p.add_argument("--display", choices=("auto", "window", "web", "none"), default="auto",
                   help="auto: a window where a display exists, else the web page; none: apply only")
    p.add_argument("--web-host", default="127.0.0.1", help="address of the web view")
    p.add_argument("--web-port", type=port_number, default=8080, help="port of the web view")
    p.add_argument("--plots-dir", type=Path, default=None,
                   help="a take folder (or a folder of takes): the web view links the PNGs of `mocapline plot` in it")
    p.add_argument("--fps", type=float, default=30.0, help="render rate (frames are applied at any rate)")
    p.add_argument("--width", type=int, default=640, help="offscreen image width")
    p.add_argument("--height", type=int, default=480, help="offscreen image height")
    p.add_argument("--exit-on-end", action="store_true", help="exit when the stream sends END_OF_STREAM")
    add_curve_client_options(p)
    add_stage_arguments(p, "viewer", nats_help="NATS server for heartbeats and control", retain_mb=256)
    return p


def choose_display(mode: str) -> str:
    if mode != "auto":
        return mode
    return "window" if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") else "web"


class RenderLoop(threading.Thread):
    """Offscreen rendering in its own thread, from a copy of the latest pose, so that a slow
    (software) renderer never delays applying frames. The camera follows the pelvis."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int, fps: float, publish: Any) -> None:
        super().__init__(name="render", daemon=True)
        self.model = model
        self.width, self.height = width, height
        self.period = 1.0 / fps if fps > 0 else 0.1
        self.publish = publish
        self.frames_rendered = 0
        self._qpos = np.zeros(model.nq)
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def update(self, qpos: np.ndarray) -> None:
        with self._lock:
            self._qpos[:] = qpos

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        renderer = mujoco.Renderer(self.model, self.height, self.width)
        data = mujoco.MjData(self.model)
        camera = mujoco.MjvCamera()
        camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        camera.trackbodyid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "pelvis")
        camera.distance, camera.elevation, camera.azimuth = 3.0, -12.0, 135.0
        while not self._halt.is_set():
            start = time.monotonic()
            with self._lock:
                data.qpos[:] = self._qpos
            mujoco.mj_kinematics(self.model, data)
            renderer.update_scene(data, camera)
            # Shadows and reflections cost 4x on a software renderer; the view stays readable.
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            self.publish(renderer.render())
            self.frames_rendered += 1
            self._halt.wait(max(0.0, self.period - (time.monotonic() - start)))
        renderer.close()


@dataclass(frozen=True)
class ViewerSettings:
    """`mocapline viewer`'s flags."""

    input: str
    name: str
    display: str
    web_host: str
    web_port: int
    plots_dir: Path | None
    fps: float
    width: int
    height: int
    exit_on_end: bool
    curve_client_key: str
    curve_server_public: str
    stage: StageSettings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ViewerSettings:
        return settings_from(cls, args, display=choose_display(args.display), stage=StageSettings.from_args(args))


@dataclass
class ViewerLoop:
    """The viewer's part of the stage loop: take what is waiting, apply it, show the pose."""

    links: Links
    data: mujoco.MjData
    counters: ViewerCounters
    validator: FrameValidator
    applier: FrameApplier
    exit_on_end: bool = False
    render_loop: RenderLoop | None = None
    window: Any = None
    period: float = 0.0
    ended: bool = False
    _last_frame_at: float = field(default_factory=time.monotonic)
    _next_render: float = 0.0

    def step(self) -> bool:
        rx, links = self.links.rx, self.links
        go_on = True
        for _ in range(1000):  # everything that is waiting before the next apply, bounded to stay responsive
            msg = rx.recv(timeout_ms=10 if not self.validator.pending else 0)
            if msg is None:
                break
            self._last_frame_at = time.monotonic()
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.counters.observe_frame_id(msg.header)
                self.ended = True
                links.done(msg.header.frame_id, self.counters.durable_state(None))
                go_on = not self.exit_on_end
                break
            self.ended = False
            frame = self.validator.accept(msg)
            if links.durable is not None:  # applied and remembered before the next frame is taken
                self.applier.apply_pending(self.validator)
                applied = None if frame is None else frame.posture_index
                links.done(msg.header.frame_id, self.counters.durable_state(applied))
        self.applier.apply_pending(self.validator)
        if self.render_loop is not None:
            self.render_loop.update(self.data.qpos)
        now = time.monotonic()
        if self.window is not None and now >= self._next_render:
            if not self.window.is_running():
                return False
            self.window.sync()
            self._next_render = now + self.period
        return go_on

    def heartbeat(self) -> dict[str, Any]:
        return {**self.counters.as_dict(), "viewer_pending": len(self.validator.pending), "ended": self.ended}

    def reset(self) -> None:
        counters = ViewerCounters(rejected=self.counters.rejected)
        counters.rejected.clear()
        self.counters = self.validator.counters = self.applier.counters = counters
        self.links.remember(counters.durable_state(None))

    def begin_drain(self, args: dict[str, Any]) -> None:
        pass

    def drained(self) -> bool:
        quiet = time.monotonic() - self._last_frame_at > 0.5
        return (self.ended or quiet) and not self.validator.pending

    def finish(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    try:
        settings = ViewerSettings.from_args(build_parser().parse_args(argv))
    except ValueError as exc:
        print(f"mocapline viewer: {exc}", file=sys.stderr)
        return 2
    from mocapline.robot.g1 import G1_JOINT_NAMES, load_full_model

    model = load_full_model(scene=True)
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, settings.width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, settings.height)
    data = mujoco.MjData(model)
    counters = ViewerCounters()
    reasons = (*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS, "non_finite")
    with Stage("viewer", settings.stage, reasons=reasons) as stage:
        try:
            links = stage.open_links(
                input=durable.LinkSpec(settings.input, MessageType.MOTION_FRAME, G1_JOINT_COUNT, kind="fanout",
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
        applier = FrameApplier(model, data, QposWriter(model, G1_JOINT_NAMES), counters, metrics=stage.metrics,
                               tracer=stage.tracer)
        loop = ViewerLoop(links, data, counters, FrameValidator(counters), applier, settings.exit_on_end,
                          period=1.0 / settings.fps if settings.fps > 0 else 0.0)
        try:
            open_display(stage, settings, model, loop)
        except OSError as exc:
            return stage.fail(f"cannot serve on {settings.web_host}:{settings.web_port}: {exc}")
        return stage.run(loop)


def open_display(stage: Stage, settings: ViewerSettings, model: mujoco.MjModel, loop: ViewerLoop) -> None:
    """The web page (offscreen rendering) or the MuJoCo window; closed with the stage."""
    if settings.display == "web":
        from mocapline.services.viewer.web import WebView

        web = WebView(settings.web_host, settings.web_port, lambda: stage.heartbeat(loop), settings.fps,
                      plots_dir=settings.plots_dir)
        web.start()
        stage.exits.callback(web.stop)
        loop.render_loop = RenderLoop(model, settings.width, settings.height, settings.fps, web.publish)
        loop.render_loop.start()
        stage.exits.callback(loop.render_loop.stop)
        print(f"mocapline viewer: live view at {web.address}", file=sys.stderr, flush=True)
    elif settings.display == "window":
        from mujoco import viewer as mujoco_viewer

        loop.window = mujoco_viewer.launch_passive(model, loop.data)
        stage.exits.callback(loop.window.close)


if __name__ == "__main__":
    sys.exit(main())
