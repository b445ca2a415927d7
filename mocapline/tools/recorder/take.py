"""A take's pipeline run offline, deterministically: .mlrec -> capture core -> retarget -> streamer.

The same classes the live services run, with their sockets replaced by lists:

- capture: :class:`mocapline.services.capture.core.CaptureCore`, fed the recorded datagrams in arrival order
  with the recorded receive times as its clock (as ``mocapline inspect`` does);
- retarget: :class:`mocapline.services.retarget.service.RetargetService` (take splitting, ``elapsed`` frames
  for the velocity limit, the output filter) around :class:`Retargeter`; RobotFrames round-trip
  through their wire bytes;
- streamer: :class:`mocapline.services.streamer.service.Streamer` (MotionStreamInterpolator +
  MocapFrameBuilder); its outbox holds the serialized MocapFrames it would have sent.

Nothing depends on the wall clock, threads or random numbers: the same take and the same
:class:`TakeConfig` give byte-identical MocapFrames. The MocapFrame fields that come from the run
rather than from the motion are set from the recording: ``capture_timestamp_us`` (the recorded
receive time), ``session_id`` (the recording's, or ``replay``), ``traceparent`` (empty: no tracing).
A live run gives other values there; :func:`motion_bytes` clears those three fields, and what is left
(the motion content) is what replay determinism and the record -> replay round trip compare.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mocapline.core import pb
from mocapline.core.frames import HumanFrame, RobotFrame
from mocapline.core.modes import Source
from mocapline.formats.axis_bvh import AxisBvhConfig, HeaderFormat
from mocapline.formats.mlrec import Recording, RecordingError, read_recording, tcp_ports
from mocapline.formats.mxtp02 import PositionUnitSetting
from mocapline.formats.skeleton import SkeletonKind
from mocapline.robot.registry import DEFAULT_ROBOT, get_robot
from mocapline.services.capture.core import (
    AxisDecoder,
    CaptureCore,
    Decoder,
    XsensDecoder,
)
from mocapline.services.retarget.config import DEFAULT_CONFIG, resolve_config_path

if TYPE_CHECKING:  # the retarget service loads the robot model: only when a take is retargeted
    from mocapline.services.retarget.service import Filter

RUN_FIELDS = ("capture_timestamp_us", "traceparent", "session_id")


@dataclass
class TakeConfig:
    """Everything that decides a take's robot motion (recorded next to a take, see record.py)."""

    robot_model: str = DEFAULT_ROBOT
    ik_config: str = DEFAULT_CONFIG
    human_height: float | None = None
    input_fps: float | None = None  # None: the recording's rate_hz, else 60
    output_fps: float | None = None  # None: = input_fps
    source: Source | None = None  # None: the recording's, else axis
    rotation_order: str | None = None  # None: the recording's, else YXZ
    skeleton: str | None = None
    header_format: HeaderFormat = "current"
    position_unit: PositionUnitSetting = "m"
    filter: Filter = "none"
    backend: str = "fast"
    iterations: int | None = None
    lm_damping: float | None = None
    joint_ranges: str = "full"  # RetargetOptions.joint_ranges
    footing: bool = True  # RetargetOptions.footing
    keep_flight: bool = False  # RetargetOptions.keep_flight

    def resolved(self, meta: dict[str, Any]) -> TakeConfig:
        """Defaults filled in from a recording's metadata."""
        c = TakeConfig(**asdict(self))
        c.input_fps = float(c.input_fps or meta.get("rate_hz") or meta.get("input_fps") or 60.0)
        c.output_fps = float(c.output_fps or c.input_fps)
        c.source = c.source or meta.get("source") or "axis"
        c.rotation_order = c.rotation_order or meta.get("rotation_order") or "YXZ"
        c.skeleton = c.skeleton or meta.get("skeleton") or SkeletonKind.AXIS_STUDIO.value
        return c

    def describe(self) -> dict[str, Any]:
        """This configuration with the IK config's full JSON content and the robot model's source."""
        robot = get_robot(self.robot_model)
        path = resolve_config_path(self.ik_config, robot)
        text = path.read_text()
        package = robot.model.package.replace("_", "-")
        try:
            model_version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            model_version = "unknown"
        return {
            **asdict(self),
            "ik_config_path": str(path),
            "ik_config_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "ik_config_content": json.loads(text),
            "model": {"source": f"{robot.title}: {robot.model.directory.rpartition('/')[2]}/{robot.model.file}, "
                                f"mesh-free IK variant", "package": package, "version": model_version},
        }


def decoder_for(config: TakeConfig) -> Decoder:
    if config.source == "xsens":
        return XsensDecoder(config.position_unit)
    return AxisDecoder(AxisBvhConfig(skeleton=SkeletonKind(config.skeleton or "axis_studio"),
                                     rotation_order=config.rotation_order or "YXZ",
                                     header_format=config.header_format))


def human_frames(rec: Recording, config: TakeConfig) -> tuple[list[HumanFrame], dict[str, Any]]:
    """The HumanFrames capture makes of the recording, and capture's ledger."""
    ports = [int(p) for p in rec.meta.get("ports") or []] or sorted({d.port for d in rec.datagrams}) or [0]
    session = str(rec.meta.get("session_id") or "replay")
    core = CaptureCore(decoder_for(config), ports, session_id=session, stream_ports=tcp_ports(rec.meta))
    out: list[HumanFrame] = []
    for dgram in rec.datagrams:
        out.extend(core.feed(dgram, dgram.recv_ns / 1e9))
    out.extend(core.flush())
    return out, core.ledger()


class _Collect:
    """Stands in for a FrameSender: keeps the payloads (None = END_OF_STREAM)."""

    def __init__(self) -> None:
        self.payloads: list[bytes | None] = []

    def send(self, payload: bytes, capture_timestamp_us: int = 0) -> None:
        self.payloads.append(bytes(payload))

    def send_end(self, payload: bytes = b"") -> None:
        self.payloads.append(None)

    def writable(self, timeout_ms: int = 0) -> bool:
        return True

    @property
    def next_frame_id(self) -> int:
        return len(self.payloads)


def retarget_frames(frames: list[HumanFrame], config: TakeConfig) -> list[RobotFrame]:
    """RobotFrames exactly as the retarget service computes them (one per HumanFrame)."""
    from mocapline.services.retarget.config import load_ik_config
    from mocapline.services.retarget.ik.options import RetargetOptions
    from mocapline.services.retarget.ik.retargeter import Retargeter
    from mocapline.services.retarget.service import RetargetService

    opts = RetargetOptions(fps=float(config.input_fps or 60.0), human_height=config.human_height,
                           backend=config.backend, joint_ranges=config.joint_ranges, footing=config.footing,
                           keep_flight=config.keep_flight)
    if config.iterations is not None:
        opts.iterations = config.iterations
    if config.lm_damping is not None:
        opts.lm_damping = config.lm_damping
    robot = get_robot(config.robot_model)
    retargeter = Retargeter(load_ik_config(config.ik_config, robot=robot), opts, robot=robot)
    sink = _Collect()
    service = RetargetService(retargeter, sink, filter=config.filter)
    for frame in frames:
        service.on_frame(frame, 0)
    service.on_end()
    return [RobotFrame.from_bytes(p, robot.joint_count) for p in sink.payloads if p is not None]


def stream_frames(frames: list[RobotFrame], config: TakeConfig) -> list[bytes]:
    """The serialized MocapFrames the streamer makes of these RobotFrames, in sending order."""
    from mocapline.services.streamer.service import Streamer

    streamer = Streamer(None, float(config.input_fps or 60.0), float(config.output_fps or 60.0),  # type: ignore[arg-type]
                        robot=get_robot(config.robot_model))
    out: list[bytes] = []
    for frame in frames:
        streamer.on_robot_frame(frame, 0)
        out.extend(entry[0] for entry in streamer.outbox if entry[1] >= 0)
        streamer.outbox.clear()
    return out


@dataclass
class TakeRun:
    config: TakeConfig  # resolved
    meta: dict[str, Any]
    capture_ledger: dict[str, Any]
    human: list[HumanFrame]
    robot: list[RobotFrame]


def run_recording(path: Path, config: TakeConfig | None = None, *, stream: bool = False) -> tuple[TakeRun, list[bytes]]:
    """The offline pipeline on a .mlrec; MocapFrames too when ``stream``."""
    rec = read_recording(Path(path))
    cfg = (config or TakeConfig()).resolved(rec.meta)
    human, ledger = human_frames(rec, cfg)
    robot = retarget_frames(human, cfg)
    run = TakeRun(cfg, rec.meta, ledger, human, robot)
    return run, (stream_frames(robot, cfg) if stream else [])


def motion_bytes(payload: bytes) -> bytes:
    """A MocapFrame's motion content: the serialized frame with the run-dependent fields cleared."""
    msg = pb.MocapFrame()
    msg.ParseFromString(payload)
    for name in RUN_FIELDS:
        msg.ClearField(name)
    return msg.SerializeToString(deterministic=True)


def digest(payloads: list[bytes], *, motion_only: bool = False) -> str:
    h = hashlib.sha256()
    for p in payloads:
        b = motion_bytes(p) if motion_only else p
        h.update(len(b).to_bytes(4, "little") + b)
    return h.hexdigest()


def take_config(args: Any) -> tuple[Path, TakeConfig]:
    """(recording path, TakeConfig) from a .mlrec or a take folder plus command-line overrides."""
    path = Path(args.take)
    cfg = TakeConfig()
    if path.is_dir():
        saved = path / "config.json"
        if saved.is_file():
            d = json.loads(saved.read_text())
            cfg.robot_model = d.get("robot_model") or cfg.robot_model
            cfg.ik_config = d.get("ik_config_path") or d.get("ik_config") or cfg.ik_config
            if not Path(cfg.ik_config).is_file() and isinstance(d.get("ik_config_content"), dict):
                # the take moved to another machine: use the recorded content itself
                import tempfile

                fd, name = tempfile.mkstemp(prefix="ik_config_", suffix=".json")
                with open(fd, "w") as fh:
                    json.dump(d["ik_config_content"], fh)
                cfg.ik_config = name
            cfg.human_height = d.get("human_height")
            cfg.input_fps = d.get("input_fps")
            cfg.output_fps = d.get("output_fps")
            cfg.source = d.get("source")
            cfg.rotation_order = d.get("rotation_order")
            cfg.skeleton = d.get("skeleton")
            cfg.filter = d.get("filter", "none")
            cfg.joint_ranges = d.get("joint_ranges", "full")
            cfg.footing = bool(d.get("footing", True))
            cfg.keep_flight = bool(d.get("keep_flight", False))
        path = path / "raw.mlrec"
    for name in ("robot_model", "ik_config", "human_height", "input_fps", "output_fps", "rotation_order", "skeleton",
                 "source", "joint_ranges"):
        value = getattr(args, name, None)
        if value is not None:
            setattr(cfg, name, value)
    if getattr(args, "no_footing", False):
        cfg.footing = False
    if getattr(args, "keep_flight", False):
        cfg.keep_flight = True
    return path, cfg



def load_take(prog: str, args: Any, *, stream: bool = False) -> tuple[Path, TakeRun, list[bytes]] | None:
    """take_config + run_recording for a command: on bad input print why (prefixed by ``prog``)
    and return None."""
    try:
        path, cfg = take_config(args)
        if not path.is_file():
            print(f"{prog}: {path}: no such recording", file=sys.stderr)
            return None
        run, frames = run_recording(path, cfg, stream=stream)
    except (ValueError, OSError, RecordingError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    return path, run, frames
