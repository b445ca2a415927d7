"""Which take file a path is, decided in one place: every tool that opens a take (``inspect``,
``plot``, ``export``, ``replay``) asks :func:`check`, and a file it cannot read is refused with the
commands that read it.

=============  ===========================================  ==========================================
kind           made by                                      read by
=============  ===========================================  ==========================================
take folder    ``record --dir``                             inspect, plot, export, replay
``.mlrec``     ``capture --record`` (raw datagrams)         inspect, plot, export, replay
``.mlmf``      ``streamer --record-frames``, ``replay -o``  inspect, plot, export (``replay --compare``)
``.mltap``     ``tap --record``                             inspect, plot, export
clip ``.npz``  ``export``, ``retarget-file``                inspect, plot
clip ``.csv``  ``export``, ``retarget-file --csv``          (its ``.npz``)
pcap / pcapng  tcpdump, Wireshark                           inspect
Axis TCP dump  ``nc HOST 7001 > dump``                      inspect
``.bvh``       Axis Studio, CMU, Mixamo                     retarget-file
=============  ===========================================  ==========================================

The kind comes from the file's first bytes (the recordings' magic, a zip holding a clip's arrays,
the pcap magic, a BVH's ``HIERARCHY``), never from its name alone. :func:`read_mocap_series` reads
the MocapFrames of a ``.mlmf`` or ``.mltap`` as arrays, for the tools that plot or export them.
"""

from __future__ import annotations

import enum
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.frames import FrameFieldError, ProtobufDecodeError, parse_mocap_frame
from mocapline.core.header import HeaderError, MessageType, decode_frame
from mocapline.formats import mlmf, mlrec, mltap
from mocapline.formats.axis_stream import is_stream_dump
from mocapline.formats.pcap import is_pcap

TAKE_RECORDING = "raw.mlrec"  # a take folder's datagrams (record.py)
TAKE_FRAMES = "frames.mlmf"  # ... and the MocapFrames its streamer sent
CLIP_ARRAYS = frozenset({"q.npy", "joint_names.npy", "root_pose.npy", "time.npy"})
CLIP_CSV_HEADER = b"time,progress,root_x"


class TakeKind(enum.Enum):
    """A file about a take: its description and the ``mocapline`` commands that read it."""

    TAKE_FOLDER = ("a take folder of `mocapline record`", ("inspect", "plot", "export", "replay"))
    DATAGRAMS = ("a raw-datagram recording (.mlrec)", ("inspect", "plot", "export", "replay"))
    FRAMES = ("a MocapFrame recording (.mlmf)", ("inspect", "plot", "export"))
    TAP = ("a tap recording (.mltap)", ("inspect", "plot", "export"))
    CLIP = ("a reference clip (.npz of `mocapline export` or `retarget-file`)", ("inspect", "plot"))
    CLIP_CSV = ("the CSV of a reference clip", ())
    PCAP = ("a packet capture (pcap / pcapng)", ("inspect",))
    AXIS_DUMP = ("a raw dump of an Axis TCP stream", ("inspect",))
    BVH = ("a BVH motion file", ("retarget-file",))
    UNKNOWN = ("not a file mocapline reads", ())

    @property
    def what(self) -> str:
        return self.value[0]

    @property
    def readers(self) -> tuple[str, ...]:
        return self.value[1]


# Beside the readers, what to do with a kind no other command reads.
_HINTS = {
    TakeKind.FRAMES: "`mocapline replay TAKE --compare FILE.mlmf` compares a replay with it",
    TakeKind.CLIP: "it is what export writes; `mocapline export` reads the take it came from",
    TakeKind.CLIP_CSV: "inspect or plot the .npz beside it",
    TakeKind.BVH: "`mocapline retarget-file FILE.bvh` makes a reference clip of it, which inspect and plot read",
    TakeKind.UNKNOWN: ("expected a take folder, a .mlrec, .mlmf or .mltap recording, a reference clip .npz, "
                       "a pcap or a .bvh"),
}


class TakeFileError(ValueError):
    """A path that is not a take file the command reads; the message says which command does."""


def detect(path: Path) -> TakeKind:
    """The kind of ``path`` from its first bytes (a folder: a take folder when it holds raw.mlrec)."""
    path = Path(path)
    if path.is_dir():
        return TakeKind.TAKE_FOLDER if (path / TAKE_RECORDING).is_file() else TakeKind.UNKNOWN
    with open(path, "rb") as fh:
        head = fh.read(64)
    magic = head[:8]
    if magic == mlrec.MAGIC:
        return TakeKind.DATAGRAMS
    if magic == mlmf.MAGIC:
        return TakeKind.FRAMES
    if magic == mltap.MAGIC:
        return TakeKind.TAP
    if head.startswith(b"PK") and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            return TakeKind.CLIP if set(zf.namelist()) >= CLIP_ARRAYS else TakeKind.UNKNOWN
    if head.startswith(CLIP_CSV_HEADER):
        return TakeKind.CLIP_CSV
    if head.lstrip().startswith(b"HIERARCHY"):
        return TakeKind.BVH
    if is_pcap(path):
        return TakeKind.PCAP
    if is_stream_dump(head[:2]):
        return TakeKind.AXIS_DUMP
    return TakeKind.UNKNOWN


def refusal(path: Path, kind: TakeKind, command: str) -> str:
    """Why ``mocapline COMMAND`` does not read ``path``, and what does."""
    readers = " and ".join(", ".join(f"`mocapline {r}`" for r in kind.readers).rsplit(", ", 1))
    parts = [f"{path}: {kind.what}" + ("" if kind is TakeKind.UNKNOWN else f", which {command} does not read")]
    if readers:
        parts.append(f"{readers} read{'s' if len(kind.readers) == 1 else ''} it")
    if kind in _HINTS:
        parts.append(_HINTS[kind])
    return "; ".join(parts)


def check(path: Path, command: str) -> TakeKind:
    """The kind of ``path`` if ``mocapline COMMAND`` reads it; else TakeFileError saying which does.
    OSError when the path cannot be read."""
    path = Path(path)
    if not path.exists():
        raise TakeFileError(f"{path}: no such file or folder")
    if path.is_dir() and not (path / TAKE_RECORDING).is_file():
        raise TakeFileError(f"{path}: a folder without {TAKE_RECORDING}, so not a take folder of `mocapline record`")
    kind = detect(path)
    if command not in kind.readers:
        raise TakeFileError(refusal(path, kind, command))
    return kind


@dataclass
class MocapSeries:
    """The MocapFrames of a ``.mlmf`` or ``.mltap``, one row each (END_OF_STREAM left out)."""

    kind: TakeKind
    meta: dict[str, Any]
    t_ns: np.ndarray  # int64: .mltap when the tap received it; .mlmf when it was sent (0: made offline)
    capture_us: np.ndarray  # int64: capture's receive time of the source datagram (unix us)
    frame_id: np.ndarray  # int64: the robot port's frame_id (.mltap; -1 in a .mlmf, which keeps none)
    index: np.ndarray  # int64: MocapFrame.index, the stream's frame number
    posture_index: np.ndarray  # int64
    avatar_index: np.ndarray  # int64
    bridged: np.ndarray  # bool: the frame stands in for a missing posture_index
    source_time_s: np.ndarray  # float64: stream time on the output clock
    root_pos: np.ndarray  # [N,3] m
    root_quat: np.ndarray  # [N,4] w x y z
    joint_pos: np.ndarray  # [N,J] rad, the robot's joints in stream order
    avatar_names: dict[int, str] = field(default_factory=dict)
    robot_model: str = ""  # the robot build the frames are for (MocapFrame.robot_model; "": not said)
    ends: int = 0  # END_OF_STREAM messages
    torn: bool = False  # the file ended in a record torn by a crash (cut off)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def performers(self) -> list[int]:
        return sorted({int(a) for a in self.avatar_index})

    def where(self, keep: np.ndarray) -> MocapSeries:
        """The rows where ``keep`` (a bool mask) is set."""
        arrays = {name: getattr(self, name)[keep] for name in _ARRAYS}
        return MocapSeries(self.kind, self.meta, **arrays, avatar_names=self.avatar_names,
                           robot_model=self.robot_model, ends=self.ends, torn=self.torn)

    def of_performer(self, avatar_index: int) -> MocapSeries:
        return self.where(self.avatar_index == avatar_index)

    @property
    def fps(self) -> float | None:
        """The stream's rate, from its clock (the median step of source_time_s within a take)."""
        steps = np.diff(self.source_time_s)
        steps = steps[steps > 0]
        return None if not len(steps) else float(round(1.0 / float(np.median(steps)), 3))

    def latency_ms(self) -> np.ndarray:
        """capture's receive -> t_ns (the tap's receive, or the send), per frame that has both."""
        ok = (self.t_ns > 0) & (self.capture_us > 0)
        return (self.t_ns[ok].astype(np.float64) - self.capture_us[ok].astype(np.float64) * 1000.0) / 1e6


_ARRAYS = ("t_ns", "capture_us", "frame_id", "index", "posture_index", "avatar_index", "bridged", "source_time_s",
           "root_pos", "root_quat", "joint_pos")


def read_mocap_series(path: Path) -> MocapSeries:
    """The MocapFrames of a ``.mlmf`` or ``.mltap`` (TakeFileError on another file or a bad frame)."""
    kind = detect(path)
    rows: list[tuple[int, int, bytes]] = []  # (t_ns, frame_id, payload)
    ends = 0
    if kind is TakeKind.FRAMES:
        ff = mlmf.read_frame_file(path)
        meta, torn = ff.meta, ff.torn_tail
        rows = [(t, -1, p) for t, p in zip(ff.times_ns, ff.payloads, strict=True)]
    elif kind is TakeKind.TAP:
        tf = mltap.read_tap_file(path)
        meta, torn = tf.meta, tf.torn_tail
        for record in tf.records:
            try:
                header, view = decode_frame(record.wire)
            except HeaderError as exc:
                raise TakeFileError(f"{path}: frame_id {record.frame_id}: {exc}") from None
            if header.message_type is MessageType.END_OF_STREAM:
                ends += 1
            else:
                rows.append((record.t_ns, record.frame_id, bytes(view)))
    else:
        raise TakeFileError(f"{path}: {kind.what}, not a recording of MocapFrames (.mlmf, .mltap)")
    cols: dict[str, list[Any]] = {name: [] for name in _ARRAYS}
    names: dict[int, str] = {}
    robot, joints = "", None
    for k, (t_ns, frame_id, payload) in enumerate(rows):
        try:
            m = parse_mocap_frame(payload, joints)
        except (FrameFieldError, ProtobufDecodeError) as exc:
            raise TakeFileError(f"{path}: frame {k}: {exc}") from None
        joints, robot = len(m.joint_pos), robot or m.robot_model  # every frame as long as the first
        names.setdefault(m.avatar_index, m.avatar_name)
        for name, value in (("t_ns", t_ns), ("capture_us", m.capture_timestamp_us), ("frame_id", frame_id),
                            ("index", m.index), ("posture_index", m.posture_index), ("avatar_index", m.avatar_index),
                            ("bridged", m.bridged), ("source_time_s", m.source_time_s),
                            ("root_pos", list(m.body_pos_w)), ("root_quat", list(m.body_quat_w)),
                            ("joint_pos", list(m.joint_pos))):
            cols[name].append(value)
    widths = {"root_pos": 3, "root_quat": 4, "joint_pos": joints or 1}
    arrays = {name: (np.array(v, dtype=np.float64).reshape(-1, widths[name]) if name in widths
                     else np.array(v, dtype=bool if name == "bridged" else np.float64 if name == "source_time_s"
                                   else np.int64)) for name, v in cols.items()}
    return MocapSeries(kind, meta, **arrays, avatar_names=names, robot_model=robot, ends=ends, torn=torn)


def read_clip(path: Path) -> dict[str, np.ndarray]:
    """A reference clip's arrays (``numpy.load``, no pickles)."""
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def take_name(path: Path) -> str:
    """What a take's outputs are named after: its folder's name, or the file's stem."""
    path = Path(path)
    return path.resolve().name if path.is_dir() else path.stem


def default_output(path: Path, suffix: str) -> Path:
    """Where a tool writes what it makes of ``path`` unless told (``-o`` / ``--out``): the working
    directory, never beside the input (an input may sit in a checkout, a shared folder, or the
    installed package, as the demo take does)."""
    return Path.cwd() / f"{take_name(path)}{suffix}"
