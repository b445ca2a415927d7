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

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

from mocapline.core import durable  # noqa: E402
from mocapline.core.bus import Bus  # noqa: E402
from mocapline.core.header import G1_JOINT_COUNT, MessageType  # noqa: E402
from mocapline.core.lifecycle import (
    add_service_arguments,
    setup_logging,
    stop_on_signals,
)
from mocapline.core.metrics import LINK_REJECT_REASONS, PAYLOAD_REJECT_REASONS  # noqa: E402
from mocapline.core.metrics import add_arguments as add_metrics_arguments  # noqa: E402
from mocapline.core.metrics import start as start_metrics  # noqa: E402
from mocapline.core.options import EnvArgumentParser, port_number  # noqa: E402
from mocapline.core.tracing import setup as setup_tracing  # noqa: E402
from mocapline.core.transport import (  # noqa: E402
    FrameReceiver,
    add_curve_client_options,
    client_link,
)
from mocapline.services.viewer.apply import (  # noqa: E402
    FrameApplier,
    FrameValidator,
    QposWriter,
    ViewerCounters,
)

log = logging.getLogger("mocapline.viewer")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline viewer", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5555", help="streamer endpoint to connect the PULL to")
    p.add_argument("--display", choices=("auto", "window", "web", "none"), default="auto",
                   help="auto: a window where a display exists, else the web page; none: apply only")
    p.add_argument("--web-host", default="127.0.0.1", help="address of the web view")
    p.add_argument("--web-port", type=port_number, default=8080, help="port of the web view")
    p.add_argument("--plots-dir", type=Path, default=None,
                   help="a take folder (or a folder of takes): the web view links the PNGs of `mocapline plot` in it")
    p.add_argument("--fps", type=float, default=30.0, help="render rate (frames are applied at any rate)")
    p.add_argument("--width", type=int, default=640, help="offscreen image width")
    p.add_argument("--height", type=int, default=480, help="offscreen image height")
    add_service_arguments(p, nats_help="NATS server for heartbeats and control")
    p.add_argument("--exit-on-end", action="store_true", help="exit when the stream sends END_OF_STREAM")
    durable.add_arguments(p, retain_mb=256)
    add_curve_client_options(p)
    add_metrics_arguments(p, "viewer")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    display = choose_display(args.display)
    from mocapline.robot.g1 import G1_JOINT_NAMES, load_full_model

    model = load_full_model(scene=True)
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, args.width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, args.height)
    data = mujoco.MjData(model)
    writer = QposWriter(model, G1_JOINT_NAMES)
    counters = ViewerCounters()
    validator = FrameValidator(counters)
    metrics = start_metrics("viewer", args, reasons=(*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS, "non_finite"))
    tracer = setup_tracing("viewer")
    applier = FrameApplier(model, data, writer, counters, metrics=metrics, tracer=tracer)

    if args.state_dir is not None and args.curve_client_key:
        print("mocapline viewer: CURVE on an acknowledged link is not supported yet", file=sys.stderr)
        return 2
    ctx = zmq.Context()
    stage: durable.DurableStage | None = None
    try:
        if args.state_dir is not None:
            stage = durable.DurableStage(ctx, args.state_dir, durable.log_config(args),
                                         input=durable.LinkSpec(args.input, MessageType.MOTION_FRAME, G1_JOINT_COUNT))
            rx: Any = stage.rx
            rx.rejects = counters.rejected
            if stage.restored is not None:
                counters.restore(stage.restored)
        else:
            link = client_link(ctx, zmq.PULL, args.input, curve_client_key=args.curve_client_key,
                               curve_server_public=args.curve_server_public)
            rx = FrameReceiver(link, MessageType.MOTION_FRAME, G1_JOINT_COUNT, rejects=counters.rejected)
    except (zmq.ZMQError, ValueError, OSError) as exc:
        print(f"mocapline viewer: cannot connect {args.input}: {exc}", file=sys.stderr)
        return 1
    stop = stop_on_signals()
    ended = False

    def heartbeat() -> dict[str, Any]:
        hb = {**counters.as_dict(), "viewer_pending": len(validator.pending), "ended": ended}
        if stage is not None:
            hb["durable"] = stage.snapshot()
        return hb

    bus = Bus(args.nats, "viewer", heartbeat).start()

    web = None
    window = None
    render_loop = None
    if display == "web":
        from mocapline.services.viewer.web import WebView

        try:
            web = WebView(args.web_host, args.web_port, heartbeat, args.fps, plots_dir=args.plots_dir)
        except OSError as exc:
            print(f"mocapline viewer: cannot serve on {args.web_host}:{args.web_port}: {exc}", file=sys.stderr)
            return 1
        web.start()
        render_loop = RenderLoop(model, args.width, args.height, args.fps, web.publish)
        render_loop.start()
        print(f"mocapline viewer: live view at {web.address}", file=sys.stderr, flush=True)
    elif display == "window":
        from mujoco import viewer as mujoco_viewer

        window = mujoco_viewer.launch_passive(model, data)

    period = 1.0 / args.fps if args.fps > 0 else 0.0
    next_render = time.monotonic()
    last_frame_at = time.monotonic()
    drains: list[Any] = []
    try:
        while not stop.is_set():
            # Take everything that is waiting before the next apply (bounded, to stay responsive).
            for _ in range(1000):
                msg = rx.recv(timeout_ms=10 if not validator.pending else 0)
                if msg is None:
                    break
                last_frame_at = time.monotonic()
                if msg.header.message_type is MessageType.END_OF_STREAM:
                    counters.frame_ids.observe(msg.header.frame_id)
                    ended = True
                    if stage is not None:
                        stage.done(msg.header.frame_id, counters.durable_state(None))
                    if args.exit_on_end:
                        stop.set()
                    break
                ended = False
                frame = validator.accept(msg)
                if stage is not None:  # applied and remembered before the next frame is taken
                    applier.apply_pending(validator)
                    stage.done(msg.header.frame_id, counters.durable_state(None if frame is None else frame.posture_index))
            applier.apply_pending(validator)
            metrics.maybe_sync(heartbeat)
            now = time.monotonic()
            if render_loop is not None:
                render_loop.update(data.qpos)
            if window is not None and now >= next_render:
                if not window.is_running():
                    break
                window.sync()
                next_render = now + period
            for req in bus.poll_requests():
                if req.cmd == "status":
                    req.answer(metrics.synced(heartbeat()))
                elif req.cmd == "reset":
                    metrics.sync(heartbeat())  # the take's counts into the counters first
                    counters = ViewerCounters(rejected=counters.rejected)
                    counters.rejected.clear()
                    validator.counters = counters
                    applier.counters = counters
                    if stage is not None:
                        stage.done(rx.last, counters.durable_state(None))
                    req.answer(metrics.synced(heartbeat()))
                elif req.cmd == "drain":
                    drains.append(req)
                elif req.cmd == "shutdown":
                    req.answer(metrics.synced(heartbeat()))
                    stop.set()
            if drains and (ended or time.monotonic() - last_frame_at > 0.5) and not validator.pending:
                for req in drains:
                    req.answer(metrics.synced(heartbeat()))
                drains.clear()
    finally:
        print(json.dumps(metrics.synced(heartbeat())), flush=True)
        bus.stop()
        metrics.close()
        if tracer is not None:
            tracer.shutdown()
        if render_loop is not None:
            render_loop.stop()
        if web is not None:
            web.stop()
        if window is not None:
            window.close()
        if stage is not None:
            stage.close()
        else:
            rx.socket.close(linger=0)
        ctx.term()
    return 0
