"""`mocapline retarget`: one retarget stage, or with --worker one of several workers (scale-out).

The service (``service.py``) and the worker (``worker.py``) both build on ``RetargetService``; this
module only chooses between them, so that neither imports the other.
"""

from __future__ import annotations

import sys

from mocapline.core import durable
from mocapline.core.bodies import GMR_BODIES
from mocapline.core.header import MessageType
from mocapline.core.metrics import LINK_REJECT_REASONS
from mocapline.core.stage import Stage, StageError
from mocapline.robot.registry import get_robot

from .config import load_ik_config
from .ik.retargeter import Retargeter
from .service import RetargetLoop, RetargetService, RetargetSettings, build_parser, log, status_line
from .worker import run_worker


def main(argv: list[str] | None = None) -> int:
    try:
        settings = RetargetSettings.from_args(build_parser().parse_args(argv))
        robot = get_robot(settings.robot_model)
        retargeter = Retargeter(load_ik_config(settings.ik_config, robot=robot), settings.options, robot=robot)
    except (ValueError, OSError) as exc:
        print(f"mocapline retarget: {exc}", file=sys.stderr)
        return 2
    if settings.worker:
        return run_worker(settings, retargeter)
    with Stage("retarget", settings.stage, reasons=(*LINK_REJECT_REASONS, "decode"),
               status_interval=settings.status_interval, status_line=status_line) as stage:
        try:
            links = stage.open_links(
                input=durable.LinkSpec(settings.input, MessageType.HUMAN_FRAME, len(GMR_BODIES)),
                output=durable.LinkSpec(settings.output, MessageType.ROBOT_STATE, robot.joint_count),
                output_linger_ms=int(settings.shutdown_wait * 1000),
            )
        except StageError as exc:
            return stage.fail(str(exc))
        service = RetargetService(retargeter, links.tx, filter=settings.filter, metrics=stage.metrics,
                                  tracer=stage.tracer, heights=settings.performer_height)
        if links.durable is not None and links.durable.restored is not None:
            service.restore(links.durable.restored)
        log.info("retarget %s -> %s (%s, config %s, %d steps/frame, lm_damping %s, filter %s)", settings.input,
                 settings.output, robot.title, retargeter.config.source, settings.options.iterations,
                 settings.options.lm_damping, settings.filter)
        return stage.run(RetargetLoop(service, links, settings.max_takes))


if __name__ == "__main__":
    sys.exit(main())
