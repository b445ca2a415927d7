"""A robot-port consumer written from docs/protocol.md alone: pyzmq, struct, zlib and protobuf
descriptors, nothing from mocapline. Run as a process:

    python doc_consumer.py ENDPOINT NAME STATE_DIR [BREAK]

It prints one JSON line per applied frame (the report ``mocapline port-check`` reads), and one
per HELLO it sends (``{"hello": seq, "resend": bool}``, ignored by port-check), and keeps its
position in STATE_DIR/position (written atomically, before the ACK that covers it). SIGUSR1 makes
it busy for 5 s without reading (a robot's long blocking call): its idle timer, nothing having
arrived for 0.25 s, then says a keep-alive HELLO with frames queued behind it. BREAK
makes it break one rule of the document on purpose (the broken consumers of
tests/test_port_check.py): see BREAKS; or take a liberty the document allows: see VARIANTS.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import time
import zlib

import zmq
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

BREAKS = {
    "before_welcome": "applies frames that arrive before the first WELCOME",
    "ignore_epoch": "keeps its numbering when WELCOME brings a new epoch",
    "no_duplicate_check": "applies a frame_id it already has",
    "any_welcome": "acts on every WELCOME, also one answering an older HELLO",
    "no_crc": "does not check the CRC",
    "apply_gaps": "applies a frame beyond the next expected one",
    "stop_at_end": "exits at END_OF_STREAM",
    "ack_before_store": "acknowledges at once and stores its position every 2 s",
    "no_hello_again": "says HELLO only at start (no timer, no answer to RESTARTED)",
}

VARIANTS = {  # allowed by the document, not a break
    "no_routing_id": "leaves its DEALER's routing id to ZeroMQ (told no RESTARTED: its idle HELLO finds the port)",
    "no_credit": "reports no TAKEN (a consumer written before flow control: the window of unacknowledged frames)",
}

V2 = struct.Struct("<4sBB16sqq")
HEADER = struct.Struct("<IHHQQQIHHI")
HELLO, ACK, WELCOME, RESTARTED = 1, 2, 3, 5
RESEND, TAKEN = 1, 2
ZERO = bytes(16)
LENGTHS = {"body_pos_w": 3, "body_lin_vel_w": 3, "body_quat_w": 4, "body_ang_vel_w": 3, "joint_pos": 29,
           "joint_vel": 29, "left_hand": 7, "right_hand": 7}


def message_class():
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="doc_consumer.proto", package="doc", syntax="proto3")
    m = fdp.message_type.add(name="MocapFrame")
    for name, number in (("body_pos_w", 2), ("body_lin_vel_w", 3), ("body_quat_w", 4), ("body_ang_vel_w", 5),
                         ("joint_pos", 6), ("joint_vel", 7), ("left_hand", 8), ("right_hand", 9)):
        m.field.add(name=name, number=number, type=f.TYPE_FLOAT, label=f.LABEL_REPEATED)
    m.field.add(name="posture_index", number=10, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("doc.MocapFrame"))


MocapFrame = message_class()


def valid(parts):
    """(frame_id, type, payload) after the header checks of the document, or None (a reject)."""
    topic, body = parts
    if len(body) < 44:
        return None
    magic, version, mtype, frame_id, _c, _s, size, joints, _epoch, crc = HEADER.unpack_from(body)
    if magic != 0x4D4C4346 or version != 1 or mtype not in (1, 5):
        return None
    if topic != (b"MOCAP_FRAME" if mtype == 1 else b"END_OF_STREAM") or size != len(body) - 44:
        return None
    if joints != (29 if mtype == 1 else 0):
        return None
    if BREAK != "no_crc" and crc != zlib.crc32(body[44:], zlib.crc32(body[:40])):
        return None
    return frame_id, mtype, body[44:]


class Consumer:
    """The minimal consumer loop of docs/protocol.md."""

    def __init__(self, endpoint: str, name: str, state: str) -> None:
        self.name = name
        self.path = os.path.join(state, "position")
        try:
            with open(self.path) as fh:
                d = json.load(fh)
            self.epoch, self.last = bytes.fromhex(d["epoch"]), d["last"]
        except FileNotFoundError:
            self.epoch, self.last = ZERO, -1
        self.stored = (self.epoch, self.last)
        self.acked = self.hello_seq = self.last
        self.taken, self.reported = 0, -1  # data messages taken off the socket; as last reported
        self.welcomed = False
        self.gap_hello_at = self.acked_at = self.stored_at = 0.0
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if BREAK != "no_routing_id":
            self.sock.setsockopt(zmq.ROUTING_ID, name.encode())  # optional: to be told RESTARTED
        self.sock.connect(endpoint)

    def store(self) -> None:
        if (self.epoch, self.last) != self.stored:
            with open(self.path + ".tmp", "w") as fh:
                json.dump({"epoch": self.epoch.hex(), "last": self.last}, fh)
            os.replace(self.path + ".tmp", self.path)
            self.stored = (self.epoch, self.last)

    def control(self, kind: int, flags: int = 0, name: str = "") -> None:
        """HELLO or ACK, with the messages taken so far (TAKEN) unless ``no_credit``."""
        credit = BREAK != "no_credit"
        self.sock.send(V2.pack(b"MLA2", kind, flags | (TAKEN if credit else 0), self.epoch, self.last,
                               self.taken if credit else 0) + name.encode())
        self.reported = self.taken

    def hello(self, flags: int) -> None:
        if BREAK != "ack_before_store":
            self.store()  # a HELLO acknowledges through last: stored first
        self.control(HELLO, flags, self.name)
        self.hello_seq = self.last
        print(json.dumps({"hello": self.last, "resend": bool(flags & RESEND)}), flush=True)

    def maybe_ack(self) -> None:
        now = time.monotonic()
        credit_only = self.last <= self.acked and self.taken != self.reported and BREAK != "no_credit"
        if not self.welcomed or (self.last <= self.acked and not credit_only) or now - self.acked_at < 0.05:
            return
        if BREAK != "ack_before_store" or now - self.stored_at >= 2.0:
            self.store()
            self.stored_at = now
        self.control(ACK)
        self.acked, self.acked_at = self.last, now

    def on_control(self, body: bytes) -> None:
        if len(body) < V2.size or body[:4] != b"MLA2":
            return
        _, kind, _flags, their_epoch, seq, ref = V2.unpack_from(body)
        if kind == RESTARTED and BREAK != "no_hello_again":
            self.hello(RESEND)
        if kind != WELCOME or (ref != self.hello_seq and BREAK != "any_welcome"):
            return
        if their_epoch != self.epoch and BREAK != "ignore_epoch":
            self.epoch, self.last = their_epoch, seq - 1
            self.store()
        elif their_epoch != self.epoch:
            self.epoch = their_epoch
        elif seq > self.last + 1:
            self.last = seq - 1
            self.store()
        self.welcomed = True

    def on_data(self, parts: list[bytes]) -> bool:
        """False at the end (``stop_at_end``)."""
        if not self.welcomed and BREAK != "before_welcome":
            return True
        got = valid(parts)
        if got is None:
            return True
        frame_id, mtype, payload = got
        if frame_id <= self.last and BREAK != "no_duplicate_check":
            return True
        if frame_id > self.last + 1 and BREAK != "apply_gaps":
            if time.monotonic() - self.gap_hello_at >= 0.1:
                self.hello(RESEND)
                self.gap_hello_at = time.monotonic()
            return True
        if mtype == 5:
            print(json.dumps({"frame_id": frame_id, "end": True}), flush=True)
        else:
            frame = MocapFrame.FromString(payload)
            if any(len(getattr(frame, k)) != n for k, n in LENGTHS.items()):
                return True
            print(json.dumps({"frame_id": frame_id, "posture_index": frame.posture_index}), flush=True)
        self.last = frame_id
        if BREAK != "ack_before_store":
            self.store()  # the result (here: the printed line) and the position, before the ACK
        return not (mtype == 5 and BREAK == "stop_at_end")

    def run(self) -> None:
        backoff, quiet, heard = 0.25, 0, time.monotonic()
        self.hello(RESEND)
        while True:
            self.maybe_ack()
            if BUSY:
                time.sleep(BUSY.pop())
            wait = heard + backoff - time.monotonic()  # the idle timer: nothing arrived for `backoff`
            if wait <= 0 or not self.sock.poll(int(wait * 1000) + 1):
                if BREAK != "no_hello_again":
                    self.hello(RESEND if quiet else 0)  # the first after anything arrived: a keep-alive
                quiet += 1
                backoff = min(backoff * 2, 2.0)
                heard = time.monotonic()
                continue
            backoff, quiet, heard = 0.25, 0, time.monotonic()
            parts = self.sock.recv_multipart()
            if len(parts) == 1:
                self.on_control(parts[0])
                continue
            self.taken += 1
            if len(parts) == 2 and not self.on_data(parts):
                return


BREAK = sys.argv[4] if len(sys.argv) > 4 else ""
BUSY: list[float] = []
if __name__ == "__main__":
    assert BREAK in ("", *BREAKS, *VARIANTS), BREAK
    signal.signal(signal.SIGUSR1, lambda *_: BUSY.append(5.0))
    Consumer(*sys.argv[1:4]).run()
