"""`mocapline replay TAKE`: a recorded take back through the pipeline's logic.

TAKE is a raw-datagram recording (``.mlrec``) or a take folder of ``mocapline record`` (its
``raw.mlrec`` and the configuration in its ``config.json``; options given here override it): the
datagrams are what a replay re-runs. A recording of MocapFrames (``.mltap``, ``.mlmf``) or a clip is
refused with the commands that read it (``--compare`` reads a ``.mlmf``).

Offline (default): the datagrams go through the capture core, the retarget service and the
streamer in process, no sockets and no clock (``mocapline/tools/recorder/take.py``), and the MocapFrames
are written with ``-o FRAMES.mlmf`` (format: ``mocapline/formats/mlmf.py``). Deterministic:
the same take and configuration give byte-identical MocapFrames; the printed ``sha256`` covers the
frames' bytes, ``motion_sha256`` their motion content (``capture_timestamp_us``, ``traceparent``
and ``session_id`` cleared: the fields a live run sets from its clock, tracer and session).

``--compare RECORDED.mlmf`` (default for a take folder holding ``frames.mlmf``): compare the replay
with the frames the live streamer sent, on the motion content, frame by frame; exit 1 on the first
difference. This holds when the live run saw every datagram the recording holds, in the same order,
with the same configuration (the record -> replay round trip).

``--push ENDPOINT`` also serves the frames as the streamer does (44-byte header, lossless PUSH,
bound), at the take's timing (``--speed 1``), faster, or as fast as possible (``--speed 0``), so a
viewer or robot can consume a replay without the IK running. To drive a whole running pipeline with
the recorded datagrams instead, use ``mocapline emit --replay TAKE/raw.mlrec --speed S``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mocapline.core.modes import Source
from mocapline.core.options import EnvArgumentParser, choices
from mocapline.formats.axis_bvh import add_axis_options
from mocapline.robot.registry import add_robot_model_argument


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline replay", description=__doc__)
    p.add_argument("take", type=Path, help="a .mlrec recording or a take folder of `mocapline record`")
    p.add_argument("-o", "--output", type=Path, default=None, help="write the MocapFrames to this .mlmf file")
    p.add_argument("--input-fps", type=float, default=None, help="the recording's frame rate (default: its own)")
    p.add_argument("--output-fps", type=float, default=None, help="the stream's rate (default: the take's, else input)")
    add_robot_model_argument(p, None, " (default: the take's, else g1)")
    p.add_argument("--ik-config", default=None, help="IK config name or JSON (default: the take's, else axis_studio)")
    p.add_argument("--human-height", type=float, default=None, help="performer height in m (default: the take's)")
    add_axis_options(p, from_take=True)
    p.add_argument("--source", choices=choices(Source), default=None, help="what sent the datagrams")
    p.add_argument("--compare", type=Path, default=None, help="a recorded .mlmf to compare the motion content with")
    p.add_argument("--push", default=None, help="also serve the frames on this endpoint (bind), e.g. tcp://*:5555")
    p.add_argument("--speed", type=float, default=1.0, help="with --push: 1 = original timing, 0 = as fast as possible")
    return p


def compare(replayed: list[bytes], recorded: list[bytes]) -> dict[str, Any]:
    """Motion-content comparison, frame by frame."""
    from mocapline.tools.recorder.take import motion_bytes

    first = next((k for k, (a, b) in enumerate(zip(replayed, recorded, strict=False))
                  if motion_bytes(a) != motion_bytes(b)), None)
    same = first is None and len(replayed) == len(recorded)
    return {"identical_motion": same, "replayed": len(replayed), "recorded": len(recorded),
            "first_difference": first if first is not None else (None if same else min(len(replayed), len(recorded)))}


def push(frames: list[bytes], endpoint: str, fps: float, speed: float) -> int:
    import zmq

    from mocapline.core import pb
    from mocapline.core.header import MessageType
    from mocapline.core.transport import FrameSender, lossless_socket

    ctx = zmq.Context()
    sock = lossless_socket(ctx, zmq.PUSH, endpoint, bind=True)
    joints = len(pb.MocapFrame.FromString(frames[0]).joint_pos) if frames else 0  # the take's robot's
    sender = FrameSender(sock, MessageType.MOTION_FRAME, joints)
    t0 = time.perf_counter()
    try:
        for k, payload in enumerate(frames):
            if speed > 0:
                delay = t0 + k / fps / speed - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            msg = pb.MocapFrame()
            msg.ParseFromString(payload)
            sender.send(payload, capture_timestamp_us=msg.capture_timestamp_us)
        sender.send_end()
    finally:
        sock.close(linger=30000)
        ctx.term()
    return len(frames)


def main(argv: list[str] | None = None) -> int:
    from mocapline.formats.mlmf import (
        FrameFileError,
        FrameFileWriter,
        read_frame_file,
    )
    from mocapline.formats.takefile import check
    from mocapline.tools.recorder.take import digest, load_take

    args = build_parser().parse_args(argv)
    try:
        check(args.take, "replay")
    except (ValueError, OSError) as exc:  # TakeFileError: which command reads it
        print(f"mocapline replay: {exc}", file=sys.stderr)
        return 2
    loaded = load_take("mocapline replay", args, stream=True)
    if loaded is None:
        return 2
    path, run, frames = loaded
    summary: dict[str, Any] = {
        "take": str(path), "human_frames": len(run.human), "robot_frames": len(run.robot),
        "mocap_frames": len(frames), "input_fps": run.config.input_fps, "output_fps": run.config.output_fps,
        "sha256": digest(frames), "motion_sha256": digest(frames, motion_only=True),
    }
    if args.output is not None:
        with FrameFileWriter(args.output, {"generator": "mocapline replay", "take": str(path),
                                           "config": run.config.describe()}) as w:
            for payload in frames:
                w.write(payload)
        summary["output"] = str(args.output)
    recorded_path = args.compare
    if recorded_path is None and Path(args.take).is_dir() and (Path(args.take) / "frames.mlmf").is_file():
        recorded_path = Path(args.take) / "frames.mlmf"
    code = 0
    if recorded_path is not None:
        try:
            recorded = read_frame_file(recorded_path)
        except (FrameFileError, OSError) as exc:
            print(f"mocapline replay: {exc}", file=sys.stderr)
            return 2
        summary["compare"] = {"file": str(recorded_path), **compare(frames, recorded.payloads)}
        code = 0 if summary["compare"]["identical_motion"] else 1
    if args.push:
        summary["pushed"] = push(frames, args.push, float(run.config.output_fps or 60.0), args.speed)
    print(json.dumps(summary))
    return code


if __name__ == "__main__":
    sys.exit(main())
