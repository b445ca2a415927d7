"""The control messages of an acknowledged link (HELLO, ACK, WELCOME, FORGET, RESTARTED) and how a
logged output goes on the wire; the contract is docs/protocol.md.

Two layouts, told apart by the magic:

    v1  b"MLAK"  <4sB16sq     magic, kind, epoch, seq            (+ name)
    v2  b"MLA2"  <4sBB16sqq   magic, kind, flags, epoch, seq, ref (+ name)

v2 adds ``flags`` (HELLO: ``RESEND``) and ``ref`` (WELCOME: the seq of the HELLO it answers; HELLO
and ACK with the ``TAKEN`` flag: the data messages the consumer has taken off its socket, the
credit the sender's flow control counts against, docs/protocol.md).
A sender answers each HELLO in the layout it came in, so a v1 consumer keeps working: its WELCOME
carries the answered seq as decimal text in the name, as v1 did.
"""

from __future__ import annotations

import struct
from typing import NamedTuple
from urllib.parse import urlsplit

from mocapline.core.header import MessageType, encode_frame
from mocapline.core.stagelog import Output
from mocapline.core.transport import now_us

CONTROL = struct.Struct("<4sB16sq")
CONTROL_V2 = struct.Struct("<4sBB16sqq")
CONTROL_MAGIC = b"MLAK"
CONTROL_MAGIC_V2 = b"MLA2"
# RESTARTED (v2 only): a port that came back tells the consumers it knows (docs/protocol.md)
HELLO, ACK, WELCOME, FORGET, RESTARTED = 1, 2, 3, 4, 5
KINDS = (HELLO, ACK, WELCOME, FORGET, RESTARTED)
RESEND = 1  # HELLO flag: frames after seq already sent did not all arrive (a gap, a reject, a restart)
TAKEN = 2  # HELLO / ACK flag: ``ref`` is the number of data messages taken off the consumer's socket
NO_EPOCH = bytes(16)
ACK_PORT_OFFSET = 1000
DEFAULT_WINDOW = 2048
MAX_NAME = 64  # bytes of name a control message may carry after the fixed part


def ack_endpoint(endpoint: str) -> str:
    """The control endpoint beside a data endpoint: same host, port + 1000."""
    parts = urlsplit(endpoint)
    if parts.scheme != "tcp" or parts.port is None:
        raise ValueError(f"{endpoint!r}: reliable links need a tcp://host:port endpoint")
    host = endpoint[len("tcp://"):].rpartition(":")[0]
    return f"tcp://{host}:{parts.port + ACK_PORT_OFFSET}"


class Control(NamedTuple):
    kind: int
    epoch: bytes
    seq: int
    name: str = ""  # HELLO: the consumer's stable name; FORGET: the consumer to forget
    flags: int = 0  # v2
    ref: int | None = None  # v2 WELCOME: the seq of the HELLO it answers; v1 WELCOME: parsed from name
    version: int = 1
    taken: int | None = None  # v2 HELLO / ACK with TAKEN: data messages the consumer has taken off its socket


def encode_control(kind: int, epoch: bytes, seq: int, name: str = "", *, flags: int = 0, ref: int = 0,
                   version: int = 2) -> bytes:
    if version == 1:
        return CONTROL.pack(CONTROL_MAGIC, kind, epoch, seq) + name.encode()[:MAX_NAME]
    return CONTROL_V2.pack(CONTROL_MAGIC_V2, kind, flags, epoch, seq, ref) + name.encode()[:MAX_NAME]


def decode_control(body: bytes) -> Control | None:
    """The control message (either layout), or None for anything that is not well-formed."""
    if body[:4] == CONTROL_MAGIC_V2:
        fixed = CONTROL_V2
        if not fixed.size <= len(body) <= fixed.size + MAX_NAME:
            return None
        _, kind, flags, epoch, seq, ref = fixed.unpack_from(body)
        version = 2
    else:
        fixed = CONTROL
        if not fixed.size <= len(body) <= fixed.size + MAX_NAME or body[:4] != CONTROL_MAGIC:
            return None
        _, kind, epoch, seq = fixed.unpack_from(body)
        flags, ref, version = 0, 0, 1
    if kind not in KINDS or seq < -1 or (version == 1 and kind == RESTARTED):
        return None
    try:
        name = body[fixed.size:].decode()
    except UnicodeDecodeError:
        return None
    answered: int | None = ref if version == 2 and kind == WELCOME else None
    if version == 1 and kind == WELCOME and name.lstrip("-").isdigit():
        answered = int(name)
    taken = ref if version == 2 and kind in (HELLO, ACK) and flags & TAKEN and ref >= 0 else None
    return Control(kind, epoch, seq, name, flags, answered, version, taken)


def welcome(epoch: bytes, next_seq: int, answered: int, version: int) -> bytes:
    """WELCOME in the layout of the HELLO it answers (v1: the answered seq as decimal text)."""
    if version == 1:
        return encode_control(WELCOME, epoch, next_seq, str(answered), version=1)
    return encode_control(WELCOME, epoch, next_seq, ref=answered)


def header_epoch(epoch: bytes) -> int:
    """The 16-bit link epoch a frame's header carries: the first two bytes of the sender's epoch
    (its log identity). A frame_id that goes back under a new header epoch is a new sender, not
    a replay (docs/protocol.md)."""
    return int.from_bytes(epoch[:2], "little")


def encode_output(out: Output, seq: int, joint_count: int, epoch: bytes) -> bytes:
    """One logged output as it goes on the wire: the 44-byte header (frame_id = seq) + payload."""
    is_end = out.message_type is MessageType.END_OF_STREAM
    return encode_frame(out.message_type, seq, out.payload, capture_timestamp_us=out.capture_timestamp_us,
                        send_timestamp_us=now_us(), joint_count=0 if is_end else joint_count,
                        epoch=header_epoch(epoch))
