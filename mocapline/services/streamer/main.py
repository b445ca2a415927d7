"""`mocapline streamer`: the stage reading one retarget, or with --fan-in every retarget worker.

The fan-in (``fanin.py``) wraps the streamer's loop (``service.py``); this module only chooses, so
that neither imports the other.
"""

from __future__ import annotations

import sys
import time

import zmq

from mocapline.core import durable
from mocapline.core.header import MessageType
from mocapline.core.metrics import LINK_REJECT_REASONS, PAYLOAD_REJECT_REASONS
from mocapline.core.options import parse_settings
from mocapline.core.stage import Links, Stage, StageError
from mocapline.core.transport import server_link
from mocapline.robot.registry import get_robot

from .fanin import fan_in_loop
from .service import Streamer, StreamerLoop, StreamerSettings, build_parser, exposed, log


def open_links(stage: Stage, settings: StreamerSettings) -> Links:
    """The input (none with --fan-in: the workers' links are the fan-in's) and the robot port."""

    def plain_output(ctx: zmq.Context) -> zmq.Socket:
        sock, auth = server_link(ctx, zmq.PUSH, settings.output, curve_server_key=settings.curve_server_key,
                                 curve_clients=settings.curve_clients)
        if auth is not None:
            stage.exits.callback(auth.stop)
            log.info("CURVE on %s: clients admitted from %s", settings.output, settings.curve_clients)
        return sock

    if exposed(settings.output) and not settings.curve_server_key:
        print(f"mocapline streamer: WARNING: the robot port {settings.output} is reachable from other hosts "
              "without CURVE: anyone there can connect (use `mocapline keys` and --curve-server-key, or bind "
              "127.0.0.1)", file=sys.stderr, flush=True)
    joints = get_robot(settings.robot_model).joint_count
    output = durable.LinkSpec(settings.output, MessageType.MOTION_FRAME, joints,
                              kind="push" if settings.plain_output else "fanout",
                              curve_server_key=settings.curve_server_key, curve_clients=settings.curve_clients,
                              max_backlog=settings.consumer_backlog)
    source = None if settings.fan_in else durable.LinkSpec(settings.input, MessageType.ROBOT_STATE, joints)
    return stage.open_links(input=source, output=output, plain_output=plain_output, output_linger_ms=5000)


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(StreamerSettings.from_args, build_parser(), argv)
    if settings is None:
        return 2
    with Stage("streamer", settings.stage, reasons=(*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS)) as stage:
        try:
            links = open_links(stage, settings)
        except StageError as exc:
            return stage.fail(str(exc))
        streamer = Streamer(links.tx, settings.input_fps, settings.output_fps, metrics=stage.metrics,
                            tracer=stage.tracer, robot=get_robot(settings.robot_model))
        if links.durable is not None and links.durable.restored is not None:
            streamer.restore(links.durable.restored)
        if settings.record_frames is not None:
            from mocapline.formats.mlmf import FrameFileWriter

            streamer.recorder = FrameFileWriter(settings.record_frames, {
                "generator": "mocapline streamer --record-frames", "input_fps": settings.input_fps,
                "output_fps": settings.output_fps, "started_ns": time.time_ns()})
        loop = StreamerLoop(streamer, links)
        if settings.fan_in:
            assert links.durable is not None
            loop = fan_in_loop(loop, stage.ctx, settings.stage.nats, links.durable.restored)
        return stage.run(loop)


if __name__ == "__main__":
    sys.exit(main())
