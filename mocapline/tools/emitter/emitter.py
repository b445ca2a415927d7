"""`mocapline emit`: a synthetic Axis Studio that sends binary BVH datagrams over UDP or TCP, or
(``--format mvn``) a synthetic Xsens MVN network streamer (mocapline/tools/emitter/mvn.py).

Generates a walking / arm-raising take (or replays a .mlrec recording) to one or more destinations,
the first being the "main" path and the second the "side" path. With ``--tcp-listen PORT`` the main
path is a TCP server as Axis Studio runs one (capture connects to it) and ``--dest`` lists the UDP
side paths. ``--performers N`` sends N avatars per frame (avatar_index 0..N-1). Faults for tests
and demos: duplicated indices, indices skipped on one destination, on all, or for one performer,
non-BVH datagrams mixed in, TCP connections dropped in the middle of a datagram.

``--format mvn`` reads the take's flags (--dest, --frames, --rate, --first-index, --performers,
--speed, --duplicate, --duplicate-last, --skip, --skip-main, --skip-side, --skip-performer) and the
ones marked mvn: (gloves, props, names, heights); the other flags are Axis's, refused under it.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mocapline.core.lifecycle import interrupt_self, watch_supervisor
from mocapline.core.modes import SOURCE_PORTS
from mocapline.core.options import (
    EnvArgumentParser,
    non_negative_float,
    non_negative_int,
    parse_index_list,
    positive_int,
)
from mocapline.core.paths import DEMO_TAKE
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, add_axis_options, encode_datagram
from mocapline.formats.mlrec import RecordingWriter, read_recording
from mocapline.formats.skeleton import get_skeleton
from mocapline.tools.emitter import mvn
from mocapline.tools.emitter.motion import pose_channels
from mocapline.tools.emitter.take import EmitStats, Pacer, TakePlan, performer_name
from mocapline.tools.emitter.tcp_server import AxisTcpServer

GARBAGE_KINDS = ("calculation", "unknown_small", "random", "truncated_bvh")


def parse_dest(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"destination {text!r} is not HOST:PORT")
    return host, int(port)


def garbage_datagram(kind: str, rng: random.Random, valid: bytes) -> bytes:
    """Non-BVH datagrams of the kinds Axis Studio (or a broken network) produces."""
    if kind == "calculation":
        body = bytes(rng.getrandbits(8) for _ in range(120))
        return struct.pack("<H", 0x88FF) + body + struct.pack("<H", 0x99FF)
    if kind == "unknown_small":
        return bytes(rng.getrandbits(8) for _ in range(rng.choice((192, 193, 194, 195))))
    if kind == "truncated_bvh":
        return valid[: rng.randrange(1, len(valid))]
    return bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 1600)))


def emit_take(
    plan: TakePlan,
    dests: list[tuple[str, int]],
    *,
    rate_hz: float = 60.0,
    config: AxisBvhConfig | None = None,
    with_displacement: bool = True,
    with_reference: bool = False,
    speed: float = 1.0,
    tcp: AxisTcpServer | None = None,
    tcp_hold_s: float = 10.0,
    stop: threading.Event | None = None,
) -> EmitStats:
    """Send the take. With ``tcp`` the main path is that server and ``dests`` are the side paths;
    before each frame the server waits up to ``tcp_hold_s`` for a client (0: frames sent while no
    client is connected are lost, as with Axis Studio). ``stop`` (set by a Ctrl-C, say) ends it early."""
    config = config or AxisBvhConfig()
    skeleton = get_skeleton(config.skeleton)
    rng = random.Random(plan.seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    def udp_send(to: tuple[str, int]) -> Callable[[bytes], object]:
        return lambda data: sock.sendto(data, to)

    paths: list[tuple[str, Callable[[bytes], object]]] = [(f"{h}:{p}", udp_send((h, p))) for h, p in dests]
    if tcp is not None:
        paths.insert(0, (f"tcp:{tcp.port}", tcp.send))
    stats = EmitStats(datagrams={name: 0 for name, _ in paths})
    in_take = range(plan.first_index, plan.first_index + plan.frames)
    total = plan.frames + sum(1 for i in plan.duplicate if i in in_take)
    garbage_at = sorted(rng.randrange(total + 1) for _ in range(plan.garbage))
    gi = 0
    pacer = Pacer(rate_hz)
    fps = rate_hz if rate_hz > 0 else 60.0
    last = None
    frame: list[bytes] = []
    main_send = paths[0][1]
    for k, index in enumerate(plan.indices()):
        if stop is not None and stop.is_set():
            break
        pacer.wait()
        if index != last:
            t = (index - plan.first_index) / fps
            frame = [
                encode_datagram(
                    index,
                    pose_channels(skeleton, config.rotation_order, t + 0.7 * avatar, speed),
                    config=config,
                    with_displacement=with_displacement,
                    with_reference=with_reference,
                    avatar_index=avatar,
                    avatar_name=performer_name(avatar),
                    version=plan.version,
                )
                for avatar in range(plan.performers)
            ]
            stats.frames += 1
            last = index
        if tcp is not None and tcp_hold_s > 0:
            tcp.wait_for_client(tcp_hold_s)
        while gi < len(garbage_at) and garbage_at[gi] == k:
            junk = garbage_datagram(GARBAGE_KINDS[gi % len(GARBAGE_KINDS)], rng, frame[0])
            main_send(junk)
            stats.garbage += 1
            gi += 1
        if tcp is not None and index in plan.tcp_cut:
            plan.tcp_cut.discard(index)  # once: the reconnected client gets the frame whole
            tcp.cut(frame[0], len(frame[0]) // 2)
            stats.tcp_cuts += 1
            if tcp_hold_s > 0:
                tcp.wait_for_client(tcp_hold_s)
        _send_frame(plan, paths, index, frame, split_main=tcp is None, stats=stats)
    for _ in range(gi, len(garbage_at)):
        main_send(garbage_datagram("random", rng, b""))
        stats.garbage += 1
    sock.close()
    return stats


def _send_frame(plan: TakePlan, paths: list[tuple[str, Callable[[bytes], object]]], index: int, frame: list[bytes],
                *, split_main: bool, stats: EmitStats) -> None:
    for d, (name, send) in enumerate(paths):
        if plan.sends_to(d, index):
            for avatar, data in enumerate(frame):
                if plan.performs(avatar, index):
                    for part in plan.parts(index, data) if d == 0 and split_main else [data]:
                        send(part)
                        stats.datagrams[name] += 1


def write_take(
    plan: TakePlan,
    path: Path,
    *,
    rate_hz: float = 60.0,
    config: AxisBvhConfig | None = None,
    port: int = 7014,
    speed: float = 1.0,
) -> EmitStats:
    """Write the take as a .mlrec recording (receive times on the ideal rate_hz clock) instead of
    sending it: how the bundled demo take was made."""
    config = config or AxisBvhConfig()
    skeleton = get_skeleton(config.skeleton)
    stats = EmitStats(datagrams={str(path): 0})
    meta = {"source": "axis", "ports": [port], "rate_hz": rate_hz, "rotation_order": config.rotation_order,
            "skeleton": config.skeleton.value, "generator": "mocapline emit --write"}
    with RecordingWriter(path, meta) as writer:
        for k, index in enumerate(plan.indices()):
            t = (index - plan.first_index) / rate_hz
            data = encode_datagram(index, pose_channels(skeleton, config.rotation_order, t, speed), config=config)
            writer.write(Datagram(int(round(k * 1e9 / rate_hz)), port, "", data))
            stats.frames += 1
    stats.datagrams[str(path)] = stats.frames
    return stats


def replay(path: Path, dests: list[tuple[str, int]], speed: float = 1.0) -> EmitStats:
    """Send a recording's datagrams again: at original timing (speed 1), faster, or asap (0).

    Recorded port k (in sorted order) goes to destination k, extra ports folding onto the last. A
    recording of one port (the bundled demo take: capture's main path) goes to every destination,
    as Axis Studio sends each frame to each of its destinations: the side path gets it too."""
    rec = read_recording(path)
    if rec.torn_tail:
        print(f"warning: {path} ends in a torn record; replaying what precedes it", file=sys.stderr)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stats = EmitStats(datagrams={f"{h}:{p}": 0 for h, p in dests})
    ports = sorted({d.port for d in rec.datagrams})
    route = {port: list(dests) if len(ports) == 1 else [dests[min(i, len(dests) - 1)]]
             for i, port in enumerate(ports)}
    t0 = time.perf_counter()
    first_ns = rec.datagrams[0].recv_ns if rec.datagrams else 0
    for dgram in rec.datagrams:
        if speed > 0:
            delay = t0 + (dgram.recv_ns - first_ns) / 1e9 / speed - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        for dest in route[dgram.port]:
            sock.sendto(dgram.data, dest)
            stats.datagrams[f"{dest[0]}:{dest[1]}"] += 1
        stats.frames += 1
    sock.close()
    return stats


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline emit", description=__doc__)
    mvn.add_format_argument(p)
    p.add_argument("--dest", nargs="*", default=None,
                   help="UDP HOST:PORT destinations; the first is the main path, the second the side path "
                        "(default 127.0.0.1:7014, mvn 127.0.0.1:9763; with --tcp-listen these are side paths "
                        "only, default none)")
    p.add_argument("--tcp-listen", type=str, default=None, metavar="[HOST:]PORT",
                   help="serve the main path over TCP as Axis Studio does (capture connects: --transport tcp); "
                        "HOST defaults to 127.0.0.1")
    p.add_argument("--tcp-hold-s", type=non_negative_float, default=10.0,
                   help="TCP: before each frame wait up to this long for a client (0 = frames with no client "
                        "connected are lost, as with Axis Studio)")
    p.add_argument("--tcp-cut", type=parse_index_list, default=[],
                   help="TCP: drop every connection half-way through these indices (the reconnected client "
                        "gets them whole)")
    p.add_argument("--performers", type=positive_int, default=1,
                   help="avatars per frame (avatar_index 0..N-1; mvn: suits, character ids 0..N-1)")
    p.add_argument("--skip-performer", type=parse_performer_skip, action="append", default=[],
                   metavar="AVATAR:INDICES", help="indices one performer misses on every path, e.g. 1:100-103")
    p.add_argument("--frames", type=non_negative_int, default=600, help="frames in the take (0 = until Ctrl-C)")
    p.add_argument("--rate", type=non_negative_float, default=60.0, help="frames per second; 0 = as fast as possible")
    p.add_argument("--first-index", type=non_negative_int, default=0, help="posture_index of the first frame")
    p.add_argument("--duplicate", type=parse_index_list, default=[], help="indices sent twice, e.g. 5,9-12")
    p.add_argument("--duplicate-last", action="store_true", help="send the last frame twice (as Axis does)")
    p.add_argument("--skip", type=parse_index_list, default=[], help="indices sent to no destination")
    p.add_argument("--skip-main", type=parse_index_list, default=[], help="indices the first destination misses")
    p.add_argument("--skip-side", type=parse_index_list, default=[], help="indices the second destination misses")
    p.add_argument("--garbage", type=non_negative_int, default=0, help="non-BVH datagrams to mix into the main path")
    add_axis_options(p)
    p.add_argument("--legacy-header", action="store_true", help="Axis Studio's 'use old header format'")
    p.add_argument("--version", type=parse_version, default=None, metavar="A.B.C.D",
                   help="the header's data version (Axis Studio 1.1.0.1, the default; Axis Neuron 1.1.0.0)")
    p.add_argument("--split", type=split_size, default=0, metavar="BYTES",
                   help="UDP main path: send each frame as parts of at most BYTES, as Axis Neuron does (1024)")
    p.add_argument("--split-every", type=positive_int, default=1, help="--split: only every N-th frame")
    p.add_argument("--lose-head", type=parse_index_list, default=[], help="--split: indices whose first part is lost")
    p.add_argument("--lose-tail", type=parse_index_list, default=[], help="--split: indices whose last part is lost")
    p.add_argument("--no-displacement", action="store_true", help="send rotations only (no bone translations)")
    p.add_argument("--with-reference", action="store_true", help="prepend the 6-float reference block")
    p.add_argument("--speed", type=non_negative_float, default=1.0,
                   help="motion tempo multiplier; with --replay, playback speed (0 = as fast as possible)")
    p.add_argument("--replay", type=Path, default=None, help="replay this .mlrec recording instead of generating")
    p.add_argument("--demo", action="store_true", help="replay the bundled demo take (assets/demo)")
    p.add_argument("--loop", action="store_true", help="with --replay/--demo: replay again and again until Ctrl-C")
    p.add_argument("--write", type=Path, default=None,
                   help="write the generated take to this .mlrec file, send nothing")
    p.add_argument("--seed", type=int, default=0, help="seed for the garbage generator")
    mvn.add_arguments(p)
    return p


def split_size(text: str) -> int:
    size = non_negative_int(text)
    if 0 < size < 64:
        raise argparse.ArgumentTypeError(f"{size}: the first part must hold the 64-byte header")
    return size


def parse_version(text: str) -> tuple[int, int, int, int]:
    """``1.1.0.0`` -> (1, 1, 0, 0)."""
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected four numbers 0-255, e.g. 1.1.0.0")
    return int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])


def parse_performer_skip(text: str) -> tuple[int, list[int]]:
    """``AVATAR:INDICES`` (``1:100-103,200``) -> (avatar_index, indices)."""
    avatar, sep, indices = text.partition(":")
    if not sep or not avatar.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected AVATAR:INDICES, e.g. 1:100-103")
    return int(avatar), parse_index_list(indices)


def destinations(args: argparse.Namespace) -> tuple[list[tuple[str, int]], tuple[str, int] | None]:
    """The UDP destinations and the TCP address to serve on (None: UDP only); ValueError says why not."""
    if args.dest is None:
        port = SOURCE_PORTS["xsens" if args.format == "mvn" else "axis"]
        args.dest = [] if args.tcp_listen else [f"127.0.0.1:{port}"]
    dests = [parse_dest(d) for d in args.dest]
    listen = parse_dest(args.tcp_listen if ":" in args.tcp_listen else f"127.0.0.1:{args.tcp_listen}") \
        if args.tcp_listen else None
    if listen is not None and (args.replay is not None or args.demo or args.write is not None):
        raise ValueError("--tcp-listen serves a generated take (not --replay, --demo or --write)")
    if not dests and listen is None:
        raise ValueError("no destination (--dest or --tcp-listen)")
    return dests, listen


def take_plan(args: argparse.Namespace) -> TakePlan:
    """The take the flags describe (either format)."""
    frames = args.frames if args.frames > 0 else 10**12
    last = args.first_index + frames - 1
    return TakePlan(
        frames=frames,
        first_index=args.first_index,
        duplicate=set(args.duplicate) | ({last} if args.duplicate_last else set()),
        skip_all=set(args.skip),
        skip_main=set(args.skip_main),
        skip_side=set(args.skip_side),
        garbage=args.garbage,
        seed=args.seed,
        performers=args.performers,
        skip_performer={avatar: set(indices) for avatar, indices in args.skip_performer},
        tcp_cut=set(args.tcp_cut),
        split_bytes=args.split,
        split_every=args.split_every,
        lose_head=set(args.lose_head),
        lose_tail=set(args.lose_tail),
        version=args.version,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    foreign = mvn.foreign_flags(parser, args)
    if foreign:
        print(f"mocapline emit: {foreign}", file=sys.stderr)
        return 2
    watch_supervisor(interrupt_self)  # under `up --demo` it loops: it ends when `up` is gone
    try:
        dests, listen = destinations(args)
    except ValueError as exc:
        print(f"mocapline emit: {exc}", file=sys.stderr)
        return 2
    if args.demo:
        args.replay = DEMO_TAKE
    if args.replay is not None:
        if not args.replay.exists():
            print(f"mocapline emit: {args.replay}: no such recording", file=sys.stderr)
            return 2
        try:
            stats = replay(args.replay, dests, args.speed)
            while args.loop:
                replay(args.replay, dests, args.speed)
        except KeyboardInterrupt:
            return 130
    else:
        plan = take_plan(args)
        if args.format == "mvn":
            return mvn.main_mvn(args, plan, dests)
        config = AxisBvhConfig(
            skeleton=args.skeleton,
            rotation_order=args.rotation_order,
            header_format="legacy" if args.legacy_header else "current",
        )
        if args.write is not None:
            stats = write_take(plan, args.write, rate_hz=args.rate or 60.0, config=config, speed=args.speed)
            print(json.dumps({"frames": stats.frames, "file": str(args.write)}))
            return 0
        server = None
        try:
            if listen is not None:
                server = AxisTcpServer(*listen)
                print(f"mocapline emit: serving Axis BVH on tcp {listen[0]}:{server.port}", file=sys.stderr,
                      flush=True)
            stats = emit_take(
                plan, dests, rate_hz=args.rate, config=config,
                with_displacement=not args.no_displacement, with_reference=args.with_reference,
                speed=args.speed, tcp=server, tcp_hold_s=args.tcp_hold_s,
            )
        except KeyboardInterrupt:
            return 130
        except OSError as exc:
            print(f"mocapline emit: {exc}", file=sys.stderr)
            return 1
        finally:
            if server is not None:
                server.close()
    print(json.dumps({"frames": stats.frames, "datagrams": stats.datagrams, "garbage": stats.garbage,
                      "tcp_cuts": stats.tcp_cuts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
