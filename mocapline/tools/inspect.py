"""`mocapline inspect FILE`: decode a recording (.mlrec), a packet capture (pcap / pcapng; UDP, or
with ``--tcp PORT`` the TCP stream Axis Studio's server sent from that port, reassembled) or a raw
dump of an Axis TCP stream (``nc HOST 7001 > dump``) exactly as capture would, and print one JSON
line per unique frame, then the ledger:

    {"posture_index": 9368, "bodies": {"Hips": {"pos": [x, y, z], "quat": [w, x, y, z]}, ...}}
    ...
    {"ledger": {...}}

Bodies are the 23 GMR bodies in metres, GMR's Z-up frame; each frame also names its performer
(``avatar_index``, ``avatar_name``) and, from Xsens, carries ``fingers``, ``props`` and
``human_height`` when the stream has them. Use it to check an Axis or MVN set-up.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.frames import HumanFrame
from mocapline.core.modes import Source
from mocapline.core.options import EnvArgumentParser, choices
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import DEFAULT_CONFIG, ROTATION_ORDERS, AxisBvhConfig, HeaderFormat
from mocapline.formats.axis_stream import is_stream_dump, stream_datagrams
from mocapline.formats.mlrec import RecordingError, is_recording, read_recording, tcp_ports
from mocapline.formats.mxtp02 import PositionUnitSetting
from mocapline.formats.pcap import PcapError, is_pcap, iter_tcp, iter_udp
from mocapline.formats.skeleton import SKELETON_CHOICES, SkeletonKind, skeleton_kind
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


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline inspect", description=__doc__)
    p.add_argument("file", type=Path, help="a .mlrec recording or a pcap / pcapng capture")
    p.add_argument("--port", type=int, default=None,
                   help="only datagrams to this UDP port (default: all ports; for pcaps usually 7014)")
    p.add_argument("--tcp", type=int, nargs="?", const=DEFAULT_AXIS_TCP_PORT, default=None, metavar="PORT",
                   help="Axis over TCP: decode the stream Axis Studio's server sent from PORT (default 7001) "
                        "in a pcap, or read FILE as a raw dump of that stream (detected when it starts "
                        "with a BVH token)")
    p.add_argument("--source", choices=choices(Source), default="axis", help="what sent the datagrams")
    p.add_argument("--rotation-order", choices=ROTATION_ORDERS, default="YXZ", help="Axis BVH rotation order")
    p.add_argument("--skeleton", type=skeleton_kind, choices=SKELETON_CHOICES, default="axis_studio",
                   help="skeleton (pn: Axis Neuron's Perception Neuron skeleton)")
    p.add_argument("--header-format", choices=choices(HeaderFormat), default="current", help="Axis header format")
    p.add_argument("--position-unit", choices=choices(PositionUnitSetting), default="m",
                   help="Xsens position unit (auto: the first frame's pelvis height decides)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.file.exists():
        print(f"mocapline inspect: {args.file}: no such file", file=sys.stderr)
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
    out = sys.stdout
    try:
        for obj in inspect_datagrams(datagrams, decoder, ports, stream_ports(args.file, args.tcp)):
            out.write(json.dumps(obj) + "\n")
    except BrokenPipeError:
        return 0
    return 0
