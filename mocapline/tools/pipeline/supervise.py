"""`mocapline supervise-capture`: capture under a process that holds its UDP sockets.

The capture container of docker compose has no `mocapline up` around it. This supervisor binds
capture's UDP ports itself and runs `mocapline capture --udp-fds ...` on them, as `mocapline up`
does in durable mode: when the capture process dies (crash, SIGKILL, OOM killer) the sockets stay
open here, datagrams that arrive meanwhile wait in the kernel's receive buffer, and the capture
started again resumes from its journal and then reads them. Nothing is lost while the buffer
holds them (16 MB requested: minutes of Axis BVH).

Every argument and MOCAPLINE_* variable is capture's (`mocapline capture --help`); the supervisor
reads --ports and --host from them with capture's own parser. SIGTERM / SIGINT are passed on to
capture, which drains; the supervisor then exits with capture's exit code.
"""

from __future__ import annotations

import logging
import socket
import sys
import time

from mocapline.core.lifecycle import setup_logging, stop_on_signals
from mocapline.core.options import EnvArgumentParser
from mocapline.core.udp import open_udp
from mocapline.services.capture import service as capture_service
from mocapline.tools.pipeline.procs import Service

log = logging.getLogger("mocapline.supervise")

POLL_S = 0.2
# A capture that dies within this long after its start is restarted after a growing pause
# (1, 2, 4 ... MAX_BACKOFF_S seconds), so a capture that cannot start does not spin.
QUICK_EXIT_S = 10.0
MAX_BACKOFF_S = 30.0
# Below compose's stop_grace_period (40 s): capture's drain, then SIGKILL.
STOP_TIMEOUT_S = 35.0


def hold_udp(host: str, ports: list[int]) -> list[socket.socket]:
    """Bind every port (as capture would) and keep the sockets: their fds go to each capture."""
    return [open_udp(host, port)[0] for port in ports]


def backoff(quick_exits: int) -> float:
    return 0.0 if quick_exits == 0 else min(MAX_BACKOFF_S, 2.0 ** (quick_exits - 1))


def build_parser() -> EnvArgumentParser:
    """Capture's own parser: the supervisor takes every option of capture and passes it on."""
    parser = capture_service.build_parser()
    parser.prog, parser.description = "mocapline supervise-capture", __doc__
    return parser


def exit_status(code: int | None) -> int:
    """Capture's exit code as a shell reports it (128 + N for a death by signal N)."""
    return 0 if code is None else code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.udp_fds is not None:
        parser.error("--udp-fds: the supervisor binds the sockets itself")
    try:  # the ports as capture resolves them (defaults per source, none with --transport tcp)
        settings = capture_service.CaptureSettings.from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    setup_logging(args.log_level)
    socks = hold_udp(settings.host, settings.ports)
    fds = tuple(s.fileno() for s in socks)
    held = [f"--udp-fds={','.join(map(str, fds))}"] if fds else []
    capture = Service("capture", [*argv, *held], pass_fds=fds)
    stop = stop_on_signals()
    log.info("holding UDP %s on %s; starting capture", " ".join(map(str, settings.ports)) or "-", settings.host)
    try:
        quick_exits = 0
        started = time.monotonic()
        capture.start(stdout=None, stderr=None)
        while not stop.wait(POLL_S):
            assert capture.proc is not None
            code = capture.proc.poll()
            if code is None:
                continue
            quick_exits = quick_exits + 1 if time.monotonic() - started < QUICK_EXIT_S else 0
            pause = backoff(quick_exits)
            capture.restarts += 1
            log.warning("capture exited with code %s; restart %d in %.0f s (the UDP sockets stay open)",
                        code, capture.restarts, pause)
            if stop.wait(pause):
                return exit_status(code)
            started = time.monotonic()
            capture.start(stdout=None, stderr=None)
        return exit_status(capture.stop(timeout=STOP_TIMEOUT_S))
    finally:
        for sock in socks:
            sock.close()


if __name__ == "__main__":
    sys.exit(main())
