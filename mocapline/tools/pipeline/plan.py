"""What a stack runs: its config (``StackConfig``), and its processes planned as each service's
settings: the config says what to change from a service's defaults, and the service writes its
own command line (``to_argv``), so no flag of a service is spelled a second time here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mocapline.core.metrics import DEFAULT_HOST as METRICS_HOST
from mocapline.core.modes import Display, Source, Transport
from mocapline.core.options import declared_defaults
from mocapline.core.segmentlog import Fsync
from mocapline.formats.skeleton import skeleton_kind
from mocapline.robot.registry import DEFAULT_ROBOT
from mocapline.tools.pipeline.procs import free_tcp_port, free_udp_port

if TYPE_CHECKING:
    from mocapline.core.stage import StageSettings
    from mocapline.services.retarget.service import RetargetSettings


@dataclass
class StackConfig:
    source: Source = "axis"
    rotation_order: str = "YXZ"
    skeleton: str = "axis_studio"  # Axis: axis_studio, or pn_pro (alias pn) for Axis Neuron
    transport: Transport = "udp"
    axis_host: str = "127.0.0.1"
    axis_port: int = 7001
    main_port: int = 7014
    side_port: int = 7015
    merge: bool = False
    nats_url: str = "nats://127.0.0.1:4222"
    human_port: int = 5556
    robot_port: int = 5557  # the retarget -> streamer link (RobotFrames; `up --retarget-port`)
    output_port: int = 5555  # the robot port (robots, viewers, taps: `up --output-port`)
    # The robot port's address: loopback unless told otherwise (another one without CURVE warns).
    bind_host: str = "127.0.0.1"
    # Durable mode: the robot port as a plain PUSH fed from the streamer's log, for consumers that
    # cannot acknowledge (frames handed out are unconfirmed). Default: the acknowledged fan-out.
    plain_output: bool = False
    viewer: bool = True
    display: Display = "auto"
    web_port: int = 8080
    plots_dir: Path | None = None  # the web viewer links the PNGs of `mocapline plot` found here
    input_fps: float = 60.0
    output_fps: float = 60.0
    human_height: float | None = None
    robot_model: str = DEFAULT_ROBOT  # the build every stage that touches a robot is told (mocapline/robot/builds)
    ik_config: Path | None = None
    log_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # /metrics port per service ("capture", ..., "auditor"; 0 = off). A service not named here uses
    # its own default (9101-9105, or MOCAPLINE_METRICS_PORT) and only warns if that port is taken.
    metrics_ports: dict[str, int] = field(default_factory=dict)
    metrics_host: str = METRICS_HOST  # every service's /metrics address: loopback unless told
    # Durable mode: every service keeps its logs under state_dir/<service>, every link runs with
    # ACKs and resends, the stack holds the UDP sockets (a restarted capture finds what arrived
    # meanwhile) and restarts a service that dies. None = plain links, nothing on disk.
    state_dir: Path | None = None
    fsync: Fsync = "interval"
    # Durable mode only: retarget as this many workers sharing the performers (0 = one retarget).
    # Capture's port becomes a fan-out, the streamer fans in, NATS runs with JetStream (the
    # assignment), services "retarget.w1" .. (mocapline/services/retarget/worker.py).
    retarget_workers: int = 0
    # The robot end (docs/robot.md): "sim" = `mocapline robot` driving `mocapline sim` (the robot in
    # physics); "real" = the bridge alone, for a real robot (domain 0, its network interface); "" = none.
    robot: str = ""
    robot_domain: int = 1
    robot_interface: str = "lo"
    robot_args: list[str] = field(default_factory=list)  # more flags of `mocapline robot` (the benchmark's)
    robot_base: str = "band"  # sim: band | fixed | free (on its feet: --controller policy)
    robot_controller: str = "pd"  # the bridge's --controller: pd | policy | arm-sdk
    robot_policy: str = ""  # --controller policy: the ONNX file
    robot_hands: str = "none"  # the bridge's --hands: none | dex3
    # lockstep: the sim steps once per command and the bridge ticks on its LowState (simulated time,
    # whatever the machine's load; the stream then plays at 1x of it); realtime: both on wall time
    robot_clock: str = "realtime"


def local_config(**settings: Any) -> StackConfig:
    """A StackConfig on free loopback ports, with its own NATS and no display: a stack that runs
    beside any other (how `mocapline demo`, the benchmarks and the tests start one)."""
    ports: dict[str, Any] = {
        "main_port": free_udp_port(), "side_port": free_udp_port(), "axis_port": free_tcp_port(),
        "nats_url": f"nats://127.0.0.1:{free_tcp_port()}", "human_port": free_tcp_port(),
        "robot_port": free_tcp_port(), "output_port": free_tcp_port(), "web_port": free_tcp_port(),
    }
    return StackConfig(**{"display": "none", **ports, **settings})


class ServiceSettings(Protocol):
    def to_argv(self) -> list[str]: ...


@dataclass(frozen=True)
class Planned:
    """One process: its name in the stack ("retarget.w1"), its settings and the subcommand."""

    name: str
    settings: ServiceSettings

    @property
    def command(self) -> str:
        return self.name.partition(".")[0]


def plan(config: StackConfig, fds: dict[str, tuple[int, ...]], workers: list[str]) -> list[Planned]:
    """Each service to start, in order. ``fds``: the UDP sockets the stack holds for capture (and
    the auditor's side path) in durable mode; ``workers``: retarget's worker names (scale-out)."""
    from mocapline.services.auditor.service import AuditorSettings
    from mocapline.services.capture.service import CaptureSettings
    from mocapline.services.retarget.service import RetargetSettings
    from mocapline.services.streamer.service import StreamerSettings
    from mocapline.services.viewer.service import ViewerSettings

    c = config
    scale_out = bool(workers) and c.state_dir is not None
    auditor = AuditorSettings.defaults()
    capture = CaptureSettings.defaults()
    retarget = RetargetSettings.defaults()
    streamer = StreamerSettings.defaults()
    out = [Planned("auditor", replace(
        auditor, side_port=0 if c.merge else c.side_port,
        side_fd=fds["auditor"][0] if fds.get("auditor") else None,
        metrics_port=c.metrics_ports.get("auditor", auditor.metrics_port), metrics_host=c.metrics_host))]
    out.append(Planned("capture", replace(
        capture, source=c.source, transport=c.transport, rotation_order=c.rotation_order,
        skeleton=skeleton_kind(c.skeleton),
        ports=capture_ports(c), axis=(c.axis_host, c.axis_port) if c.transport == "tcp" else None,
        output=f"tcp://127.0.0.1:{c.human_port}", status_interval=0.0, output_fanout=scale_out,
        udp_fds=list(fds["capture"]) if fds.get("capture") else None,
        stage=stage_settings(c, "capture", capture.stage))))
    retarget = replace(
        retarget, input=f"tcp://127.0.0.1:{c.human_port}", output=f"tcp://127.0.0.1:{c.robot_port}",
        robot_model=c.robot_model,
        ik_config=str(c.ik_config) if c.ik_config is not None else "xsens" if c.source == "xsens"
        else retarget.ik_config,
        options=replace(retarget.options, fps=c.input_fps, human_height=c.human_height,
                        # a learned policy follows one shoulder branch only (docs/retarget.md)
                        joint_ranges="human" if c.robot and c.robot_controller == "policy"
                        else retarget.options.joint_ranges),
        stage=stage_settings(c, "retarget", retarget.stage))
    if scale_out:
        first = replace(retarget, output="tcp://127.0.0.1:*", stage=replace(retarget.stage, metrics_port=0))
        out += [Planned(f"retarget.{w}", as_worker(first, w, c.state_dir)) for w in workers]
    else:
        out.append(Planned("retarget", retarget))
    out.append(Planned("streamer", replace(
        streamer, input=f"tcp://127.0.0.1:{c.robot_port}", output=f"tcp://{c.bind_host}:{c.output_port}",
        robot_model=c.robot_model,
        input_fps=c.input_fps, output_fps=c.output_fps, fan_in=scale_out,
        plain_output=c.plain_output and c.state_dir is not None,
        stage=stage_settings(c, "streamer", streamer.stage))))
    if c.viewer:
        viewer = ViewerSettings.defaults()
        out.append(Planned("viewer", replace(
            viewer, input=f"tcp://127.0.0.1:{c.output_port}", robot_model=c.robot_model, display=c.display,
            web_port=c.web_port,
            plots_dir=c.plots_dir, stage=stage_settings(c, "viewer", viewer.stage),
            # the page draws the physics robot (LowState) over the target
            robot_domain=c.robot_domain if c.robot else None, robot_interface=c.robot_interface if c.robot else "")))
    if c.robot:
        out += robot_end(c)
    return out


def robot_end(c: StackConfig) -> list[Planned]:
    """The robot bridge (its extra flags from ``robot_args``) and, for ``robot="sim"``, the robot in
    physics it drives, both on the config's DDS domain and interface."""
    from mocapline.services.robot.service import RobotSettings
    from mocapline.services.robot.service import build_parser as robot_parser
    from mocapline.tools.sim.service import SimSettings

    out = []
    lockstep = c.robot == "sim" and c.robot_clock == "lockstep"
    if c.robot == "sim":
        out.append(Planned("sim", replace(SimSettings.defaults(), robot_model=c.robot_model, domain=c.robot_domain,
                                          interface=c.robot_interface, base=c.robot_base,
                                          clock="lockstep" if lockstep else "realtime",
                                          vendor_controller="stand" if c.robot_controller == "arm-sdk" else "none")))
    parser = robot_parser()  # the extra flags over the declared defaults, not this process's MOCAPLINE_* variables
    planned = ["--controller", c.robot_controller, *(["--policy", c.robot_policy] if c.robot_policy else []),
               *(["--hands", c.robot_hands] if c.robot_hands != "none" else []),
               *(["--clock", "lowstate", "--max-speed", "1"] if lockstep else []),
               *(["--no-bias"] if c.robot_base == "free" and c.robot_controller == "pd" else [])]
    robot = RobotSettings.from_args(parser.parse_args([*planned, *c.robot_args], namespace=declared_defaults(parser)))
    out.append(Planned("robot", replace(
        robot, input=f"tcp://127.0.0.1:{c.output_port}", robot_model=c.robot_model, domain=c.robot_domain,
        interface=c.robot_interface,
        stage=stage_settings(c, "robot", robot.stage))))
    return out


def as_worker(retarget: RetargetSettings, worker: str, state_dir: Path | None) -> RetargetSettings:
    """Retarget as the worker ``worker``: its state under ``state_dir/retarget.NAME`` (in which
    the service keeps a folder per worker name, as ``--worker`` does)."""
    folder = state_dir / f"retarget.{worker}" / worker if state_dir is not None else None
    return replace(retarget, worker=worker, stage=replace(retarget.stage, state_dir=folder))


def stage_settings(c: StackConfig, name: str, stage: StageSettings) -> StageSettings:
    """A stage's shared settings in this stack: its /metrics port if the config names one, its
    /metrics address, and in durable mode its state folder and the fsync policy."""
    stage = replace(stage, metrics_port=c.metrics_ports.get(name, stage.metrics_port), metrics_host=c.metrics_host)
    if c.state_dir is None:
        return stage
    return replace(stage, state_dir=c.state_dir / name, log=replace(stage.log, fsync=c.fsync))


def capture_ports(c: StackConfig) -> list[int]:
    """Capture's UDP ports. Over TCP the main path is the connection to Axis, and only the side
    path (when merging) is UDP."""
    main = [] if c.transport == "tcp" else [c.main_port]
    return [*main, c.side_port] if c.merge else main
