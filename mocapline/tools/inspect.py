"""`mocapline inspect FILE`: any take file mocapline writes, or a capture of what a suit sent, as
JSON lines: one per frame (or clip sample), then one summary line.

Datagrams (a ``.mlrec`` recording or a take folder's, a packet capture: pcap / pcapng, UDP, or with
``--tcp PORT`` the TCP stream Axis Studio's server sent from that port, reassembled; a raw dump of
an Axis TCP stream, ``nc HOST 7001 > dump``) are decoded exactly as capture would:

    {"posture_index": 9368, "bodies": {"Hips": {"pos": [x, y, z], "quat": [w, x, y, z]}, ...}}
    ...
    {"ledger": {...}}

Bodies are the 23 GMR bodies in metres, GMR's Z-up frame; each frame also names its performer
(``avatar_index``, ``avatar_name``) and, from Xsens, carries ``fingers``, ``props`` and
``human_height`` when the stream has them. Use it to check an Axis or MVN set-up.

MocapFrames (a ``.mltap`` of ``mocapline tap --record``, a ``.mlmf`` of the streamer or ``replay``):
one line per frame (``frame_id``, ``index``, ``posture_index``, performer, ``bridged``, times, root
pose, joints), then ``{"frames": {...}}``. A reference clip (``.npz`` of ``export`` or
``retarget-file``): one line per sample, then ``{"clip": {...}}`` (its ``meta``). Another file is
refused with the command that reads it (mocapline/formats/takefile.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.frames import HumanFrame
from mocapline.core.modes import Source
from mocapline.core.options import EnvArgumentParser, choices
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import DEFAULT_CONFIG, AxisBvhConfig, HeaderFormat, add_axis_options
from mocapline.formats.axis_stream import is_stream_dump, stream_datagrams
from mocapline.formats.mlrec import RecordingError, is_recording, read_recording, tcp_ports
from mocapline.formats.mxtp02 import PositionUnitSetting
from mocapline.formats.pcap import PcapError, is_pcap, iter_tcp, iter_udp
from mocapline.formats.skeleton import SkeletonKind
from mocapline.formats.takefile import (
    TAKE_RECORDING,
    MocapSeries,
    TakeKind,
    check,
    read_clip,
    read_mocap_series,
)
from mocapline.services.capture.core import (
    AxisDecoder,
    CaptureCore,
    Decoder,
    XsensDecoder,
)
from mocapline.services.capture.tcp import DEFAULT_AXIS_TCP_PORT


def frame_json(frame: HumanFrame) -> dict[str, Any]:
    out: dict[str, Any] = {
        "posture_index": frame.posture_index,
        "avatar_index": frame.avatar_index,
        "avatar_name": frame.avatar_name,
        "bodies": {
            name: {"pos": frame.positions[i].tolist(), "quat": frame.quaternions[i].tolist()}
            for i, name in enumerate(GMR_BODIES)
        },
    }
    if len(frame.finger_positions):
        out["fingers"] = {"pos": frame.finger_positions.tolist(), "quat": frame.finger_quaternions.tolist()}
    if frame.prop_character:
        out["props"] = [{"character": c, "segment": s, "pos": p.tolist(), "quat": q.tolist()}
                        for c, s, p, q in zip(frame.prop_character, frame.prop_segment, frame.prop_positions,
                                              frame.prop_quaternions, strict=True)]
    if frame.human_height:
        out["human_height"] = frame.human_height
    return out


def load_datagrams(
    path: Path, port: int | None, tcp: int | None = None, config: AxisBvhConfig = DEFAULT_CONFIG
) -> list[Datagram]:
    """The datagrams capture would have taken from FILE; ``tcp``: the Axis TCP server's port (a
    pcap's TCP stream from it, or FILE is a raw dump of such a stream)."""
    if path.is_dir():
        path = path / TAKE_RECORDING
    if is_recording(path):
        rec = read_recording(path)
        if rec.torn_tail:
            print(f"warning: {path} ends in a torn record; decoding what precedes it", file=sys.stderr)
        return [d for d in rec.datagrams if port is None or d.port == port]
    if is_pcap(path):
        if tcp is not None:
            return list(stream_datagrams(iter_tcp(path, tcp), tcp, config))
        return list(iter_udp(path, port))
    with open(path, "rb") as fh:
        head = fh.read(2)
    if tcp is not None or is_stream_dump(head):
        dump_port = tcp or DEFAULT_AXIS_TCP_PORT
        return list(stream_datagrams([(0, 0, path.read_bytes())], dump_port, config))
    raise ValueError(f"{path}: neither a mocapline recording (.mlrec), a pcap/pcapng capture nor an Axis "
                     "TCP stream dump")


def stream_ports(path: Path, tcp: int | None) -> frozenset[int]:
    """The paths of FILE that are an Axis TCP stream (datagrams cut from it come whole)."""
    if tcp is not None:
        return frozenset([tcp])
    if path.is_dir():
        path = path / TAKE_RECORDING
    if is_recording(path):
        return tcp_ports(read_recording(path).meta)
    if is_pcap(path):
        return frozenset()
    return frozenset([DEFAULT_AXIS_TCP_PORT])  # a raw dump of the stream


def inspect_datagrams(datagrams: list[Datagram], decoder: Decoder, ports: list[int],
                      streams: frozenset[int] = frozenset()) -> Iterator[dict[str, Any]]:
    """Replays arrival order through the capture core; the merge clock is the capture timestamps."""
    core = CaptureCore(decoder, ports or sorted({d.port for d in datagrams}) or [0], stream_ports=streams)
    for dgram in datagrams:
        for frame in core.feed(dgram, dgram.recv_ns / 1e9):
            yield frame_json(frame)
    for frame in core.flush():
        yield frame_json(frame)
    yield {"ledger": core.ledger()}


def series_lines(series: MocapSeries) -> Iterator[dict[str, Any]]:
    """One line per MocapFrame of a .mltap / .mlmf, then what the file holds."""
    for k in range(len(series)):
        yield {"frame_id": int(series.frame_id[k]), "index": int(series.index[k]),
               "posture_index": int(series.posture_index[k]), "avatar_index": int(series.avatar_index[k]),
               "bridged": bool(series.bridged[k]), "source_time_s": float(series.source_time_s[k]),
               "capture_timestamp_us": int(series.capture_us[k]), "t_ns": int(series.t_ns[k]),
               "root_pos": series.root_pos[k].tolist(), "root_quat": series.root_quat[k].tolist(),
               "joint_pos": series.joint_pos[k].tolist()}
    latency = series.latency_ms()
    yield {"frames": {
        "file": series.kind.what, "meta": series.meta, "frames": len(series), "end_of_stream": series.ends,
        "bridged": int(series.bridged.sum()), "torn_tail": series.torn,
        "performers": {str(a): {"name": series.avatar_names.get(a, ""),
                                "frames": int((series.avatar_index == a).sum())} for a in series.performers},
        "posture_index": [int(series.posture_index.min()), int(series.posture_index.max())] if len(series) else None,
        "frame_id": [int(series.frame_id[0]), int(series.frame_id[-1])] if len(series) else None,
        "fps": series.fps,
        "latency_ms": None if not len(latency) else {
            "of": "capture -> tap received" if series.kind is TakeKind.TAP else "capture -> sent",
            "p50": round(float(np.percentile(latency, 50)), 3), "p99": round(float(np.percentile(latency, 99)), 3)},
    }}


def clip_lines(clip: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
    """One line per sample of a reference clip, then its metadata."""
    for k in range(len(clip["time"])):
        yield {"time": float(clip["time"][k]), "posture_index": int(clip["posture_index"][k]),
               "valid": bool(clip["valid"][k]), "root_pose": clip["root_pose"][k].tolist(),
               "q": clip["q"][k].tolist()}
    yield {"clip": {"samples": len(clip["time"]), "fps": float(clip["fps"]), "source_fps": float(clip["source_fps"]),
                    "gaps": clip["gaps"].tolist(), "joint_names": clip["joint_names"].tolist(),
                    "meta": json.loads(str(clip["meta"]))}}


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline inspect", description=__doc__)
    p.add_argument("file", type=Path, help="a take file (a take folder, .mlrec, .mltap, .mlmf, a clip .npz) or a "
                                           "pcap / pcapng capture")
    p.add_argument("--port", type=int, default=None,
                   help="only datagrams to this UDP port (default: all ports; for pcaps usually 7014)")
    p.add_argument("--tcp", type=int, nargs="?", const=DEFAULT_AXIS_TCP_PORT, default=None, metavar="PORT",
                   help="Axis over TCP: decode the stream Axis Studio's server sent from PORT (default 7001) "
                        "in a pcap, or read FILE as a raw dump of that stream (detected when it starts "
                        "with a BVH token)")
    p.add_argument("--source", choices=choices(Source), default="axis", help="what sent the datagrams")
    add_axis_options(p)
    p.add_argument("--header-format", choices=choices(HeaderFormat), default="current", help="Axis header format")
    p.add_argument("--position-unit", choices=choices(PositionUnitSetting), default="m",
                   help="Xsens position unit (auto: the first frame's pelvis height decides)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        kind = check(args.file, "inspect") if args.tcp is None else TakeKind.AXIS_DUMP
        if kind in (TakeKind.TAP, TakeKind.FRAMES):
            return _write(series_lines(read_mocap_series(args.file)))
        if kind is TakeKind.CLIP:
            return _write(clip_lines(read_clip(args.file)))
    except (ValueError, OSError) as exc:  # TakeFileError, a damaged recording
        print(f"mocapline inspect: {exc}", file=sys.stderr)
        return 2
    config = AxisBvhConfig(
        skeleton=SkeletonKind(args.skeleton),
        rotation_order=args.rotation_order,
        header_format=args.header_format,
    )
    try:
        datagrams = load_datagrams(args.file, args.port, args.tcp, config)
    except (ValueError, RecordingError, PcapError, OSError) as exc:
        print(f"mocapline inspect: {exc}", file=sys.stderr)
        return 2
    decoder: Decoder
    if args.source == "xsens":
        decoder = XsensDecoder(args.position_unit)
    else:
        decoder = AxisDecoder(config)
    ports = [args.port] if args.port is not None else []
    return _write(inspect_datagrams(datagrams, decoder, ports, stream_ports(args.file, args.tcp)))


def _write(lines: Iterator[dict[str, Any]]) -> int:
    try:
        for obj in lines:
            sys.stdout.write(json.dumps(obj) + "\n")
    except BrokenPipeError:
        return 0
    return 0
