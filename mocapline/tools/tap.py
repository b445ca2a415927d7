"""`mocapline tap`: a consumer of the robot port, printing or recording every frame exactly once.

    mocapline tap --name bench-tap                           # one JSON line per frame
    mocapline tap --name rec1 --record take.mltap --until-end  # record; a restart appends where it stopped

A named, acknowledging consumer built on ``mocapline.client``: it gets every frame from where it
joined, in order, and frames it has not acknowledged wait for it in the streamer's log. With
``--record`` the recording is its position store: each record holds the sender's epoch and the
frame_id, so a tap killed and started again with the same ``--record`` and ``--name`` continues
after the last intact record, with nothing lost and nothing twice (a record torn by the kill is
cut off). Without ``--record``, ``--state FILE`` keeps the position.

Recording: ``.mltap`` (mocapline/formats/mltap.py), which ``inspect``, ``plot`` and ``export`` read.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mocapline.client import ClientSettings, Frame, MocapClient
from mocapline.core.counters import RobotConsumerCounts, as_published, from_parts
from mocapline.core.header import HEADER_SIZE
from mocapline.core.lifecycle import stop_on_signals
from mocapline.core.options import EnvArgumentParser
from mocapline.formats.mltap import EPOCH_BYTES, FIELDS, MAGIC, WHAT, read_tap_file
from mocapline.formats.recordfile import RecordWriter, read_records_at


class TapRecording:
    """The recording, and the client's position store (the last intact record's epoch, frame_id)."""

    def __init__(self, path: Path, meta: dict[str, Any], fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.position: tuple[bytes, int] | None = None
        append_at = None
        if self.path.exists() and self.path.stat().st_size > 0:
            _, records, torn, append_at = read_records_at(self.path, MAGIC, FIELDS, WHAT)
            if records:
                (_, frame_id), data = records[-1]
                self.position = (data[:EPOCH_BYTES], frame_id)
            if torn:
                print(f"mocapline tap: {self.path}: cut a record torn by a crash", file=sys.stderr)
        self.writer = RecordWriter(self.path, MAGIC, meta, FIELDS, append_at=append_at)

    def write(self, frame: Frame) -> None:
        self.writer.write_record((time.time_ns(), frame.frame_id), frame.epoch + self.wire(frame))
        self.writer.flush()  # in the kernel before the position can be acknowledged
        self.position = (frame.epoch, frame.frame_id)

    @staticmethod
    def wire(frame: Frame) -> bytes:
        from mocapline.core.header import encode_frame

        h = frame.header
        wire = encode_frame(h.message_type, h.frame_id, frame.payload, capture_timestamp_us=h.capture_timestamp_us,
                            send_timestamp_us=h.send_timestamp_us, joint_count=h.joint_count, epoch=h.epoch)
        assert len(wire) == HEADER_SIZE + len(frame.payload)
        return wire

    # PositionStore
    def load(self) -> tuple[bytes, int] | None:
        return self.position

    def save(self, epoch: bytes, frame_id: int) -> None:
        """The records are the position: written (and flushed) before they can be acknowledged."""
        if self.fsync:
            self.writer.sync()

    def close(self) -> None:
        self.writer.close()


def read_tap(path: Path) -> list[tuple[bytes, int, bytes]]:
    """(epoch, frame_id, wire frame) of every intact record."""
    return [(r.epoch, r.frame_id, r.wire) for r in read_tap_file(path).records]


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline tap", description=__doc__)
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="the streamer's robot port")
    p.add_argument("--name", default="tap", help="this consumer's name at the streamer (stable, unique)")
    p.add_argument("--record", type=Path, default=None, help="append every frame to this .mltap recording")
    p.add_argument("--state", type=Path, default=None, help="without --record: keep the position in this file")
    p.add_argument("--quiet", action="store_true", help="do not print a line per frame")
    p.add_argument("--until-end", action="store_true", help="exit after END_OF_STREAM")
    p.add_argument("--idle-s", type=float, default=0.0, help="exit after this long without a frame; 0 = never")
    p.add_argument("--fsync", action="store_true", help="flush every record / position to disk")
    p.add_argument("--performer", type=int, action="append", default=None, metavar="AVATAR_INDEX",
                   help="only this performer's frames (repeatable); default: every performer")
    p.add_argument("--curve-client-key", default="", help="CURVE: this client's secret certificate")
    p.add_argument("--curve-server-public", default="", help="CURVE: the streamer's public certificate")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    recording = None
    if args.record is not None:
        recording = TapRecording(args.record, {"generator": "mocapline tap", "name": args.name,
                                               "endpoint": args.endpoint}, args.fsync)
    settings = ClientSettings(args.endpoint, name=args.name, state=args.state, fsync=args.fsync,
                              curve_client_key=args.curve_client_key, curve_server_public=args.curve_server_public,
                              performers=frozenset(args.performer) if args.performer else None)
    try:
        client = MocapClient(settings, store=recording)
    except (ValueError, OSError) as exc:
        print(f"mocapline tap: {exc}", file=sys.stderr)
        return 2
    stop = stop_on_signals()
    last = time.monotonic()
    try:
        while not stop.is_set():
            frame = client.recv(100)
            if frame is None:
                if args.idle_s and time.monotonic() - last > args.idle_s:
                    break
                continue
            last = time.monotonic()
            if recording is not None:
                recording.write(frame)
            if not args.quiet:
                line: dict[str, Any] = {"frame_id": frame.frame_id, "epoch": frame.header.epoch}
                if frame.end is not None:
                    e = frame.end
                    line["end"] = {"last_frame_id": e.last_frame_id, "frames_sent": e.frames_sent, "reason": e.reason}
                elif frame.mocap is not None:
                    m = frame.mocap
                    line.update(index=m.index, posture_index=m.posture_index, bridged=m.bridged)
                print(json.dumps(line), flush=True)
            if frame.is_end and args.until_end:
                break
    finally:
        snap = client.snapshot()
        client.close()
        if recording is not None:
            recording.close()
        print(json.dumps({"tap": as_published(from_parts(RobotConsumerCounts, snap))}), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
