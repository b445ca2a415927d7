"""Axis frames split over two datagrams (Axis Neuron: 1480 bytes as 1024 + 456), Axis Neuron's
data version and its Perception Neuron skeleton."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram, parse_datagram, parse_header
from mocapline.formats.axis_split import (
    SPLIT_INCOMPLETE,
    SPLIT_NO_HEAD,
    SPLIT_WINDOW_NS,
    AxisSplitAssembler,
    split_datagram,
)
from mocapline.formats.skeleton import SkeletonKind, get_skeleton, skeleton_kind
from mocapline.services.capture import state as capture_state
from mocapline.services.capture.core import AxisDecoder, CaptureCore
from mocapline.tools.emitter.emitter import TakePlan, parse_version
from mocapline.tools.emitter.motion import pose_channels

PN = AxisBvhConfig(skeleton=SkeletonKind.PN_PRO)
AXIS = AxisBvhConfig()


def frame(index: int, config: AxisBvhConfig = AXIS, **kw: object) -> bytes:
    skeleton = get_skeleton(config.skeleton)
    return encode_datagram(index, pose_channels(skeleton, config.rotation_order, index / 60), config=config, **kw)


def test_a_59_bone_frame_is_1480_bytes_sent_as_1024_and_456() -> None:
    data = frame(7)
    assert len(data) == 1480
    assert [len(p) for p in split_datagram(data, 1024)] == [1024, 456]


def test_parts_are_joined_into_the_frame_they_came_from() -> None:
    data = frame(7)
    head, tail = split_datagram(data, 1024)
    asm = AxisSplitAssembler()
    assert asm.push(head, 0, "a") is None and asm.pending == 1
    assert asm.push(tail, 1000, "a") == data
    assert (asm.joined, asm.pending, dict(asm.rejected)) == (1, 0, {})


def test_three_parts_and_whole_frames_pass() -> None:
    data = frame(3)
    asm = AxisSplitAssembler()
    parts = split_datagram(data, 512)
    assert len(parts) == 3
    assert [asm.push(p) for p in parts] == [None, None, data]
    assert asm.push(frame(4)) == frame(4)


def test_lost_halves_are_counted_by_reason() -> None:
    asm = AxisSplitAssembler()
    h1, _ = split_datagram(frame(1), 1024)
    h2, t2 = split_datagram(frame(2), 1024)
    _, t3 = split_datagram(frame(3), 1024)
    assert asm.push(h1) is None  # its tail is lost: the next head shows it
    assert asm.push(h2) is None
    assert asm.push(t2) == frame(2)
    assert asm.push(t3) is None  # its head was lost
    asm.push(split_datagram(frame(4), 1024)[0])
    asm.flush()  # the take ends before the tail
    assert dict(asm.rejected) == {SPLIT_INCOMPLETE: 2, SPLIT_NO_HEAD: 1}
    assert asm.joined == 1 and asm.pending == 0


def test_a_tail_after_the_window_does_not_complete_its_head() -> None:
    asm = AxisSplitAssembler()
    head, tail = split_datagram(frame(1), 1024)
    asm.push(head, 0)
    assert asm.push(tail, SPLIT_WINDOW_NS + 1) is None
    assert dict(asm.rejected) == {SPLIT_INCOMPLETE: 1, SPLIT_NO_HEAD: 1}


def test_parts_of_two_sources_do_not_mix() -> None:
    asm = AxisSplitAssembler()
    a, b = frame(1), frame(2)
    (ha, ta), (hb, tb) = split_datagram(a, 1024), split_datagram(b, 1024)
    assert asm.push(ha, 0, "x") is None and asm.push(hb, 0, "y") is None
    assert asm.push(tb, 0, "y") == b and asm.push(ta, 0, "x") == a


def test_non_bvh_datagrams_are_left_to_the_parser() -> None:
    asm = AxisSplitAssembler()
    for junk in (b"", b"\x01\x02\x03", bytes(193), b"\xff\x88" + bytes(100)):
        assert asm.push(junk) == junk
    assert not asm.rejected


def parts_stream(indices: list[int], lose_head: set[int], lose_tail: set[int], every: int) -> list[bytes]:
    plan = TakePlan(frames=len(indices), split_bytes=1024, split_every=every, lose_head=lose_head, lose_tail=lose_tail)
    return [p for i in indices for p in plan.parts(i, frame(i))]


def test_capture_core_conserves_a_split_stream_and_counts_each_lost_half() -> None:
    # 40 frames, the even ones split; 10 and 24 lose their head, 12 and 20 their tail
    data = parts_stream(list(range(40)), {10, 24}, {12, 20}, every=2)
    core = CaptureCore(AxisDecoder(AxisBvhConfig()), [7014])
    frames = []
    for k, d in enumerate(data):
        frames += core.feed(Datagram(k * 1000, 7014, "127.0.0.1", d), k * 1e-6)
    frames += core.flush()
    led = core.ledger()
    assert [f.posture_index for f in frames] == [i for i in range(40) if i not in {10, 12, 20, 24}]
    assert led["split_frames"] == 20 - 4
    assert led["rejected_by_reason"] == {SPLIT_INCOMPLETE: 2, SPLIT_NO_HEAD: 2}
    assert led["source_missing_indices"] == 4 and led["input_pending"] == 0


def test_replay_and_a_checkpoint_between_the_halves_give_the_same_ledger() -> None:
    """The journal holds the raw parts: a restart replays them through a fresh core (or a
    checkpointed one, even one taken between a head and its tail) to the same ledger."""
    data = parts_stream(list(range(12)), {3}, {7}, every=1)
    dgrams = [Datagram(k * 1000, 7014, "127.0.0.1", d) for k, d in enumerate(data)]

    def run(core: CaptureCore, items: list[Datagram]) -> list[int]:
        out = [f.posture_index for d in items for f in core.feed(d, d.recv_ns / 1e9)]
        return out

    whole = CaptureCore(AxisDecoder(AxisBvhConfig()), [7014], session_id="s")
    first = run(whole, dgrams) + [f.posture_index for f in whole.flush()]
    cut = CaptureCore(AxisDecoder(AxisBvhConfig()), [7014], session_id="s")
    before = run(cut, dgrams[:5])  # dgrams[4] is the head of frame 2: held
    assert cut.ledger()["input_pending"] >= 1
    record = capture_state.decode(capture_state.encode(cut.state()))
    restored = CaptureCore.from_state(record, AxisDecoder(AxisBvhConfig()))
    second = before + run(restored, dgrams[5:]) + [f.posture_index for f in restored.flush()]
    assert first == second
    assert whole.ledger() == restored.ledger()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=1600), st.sampled_from(split_datagram(frame(1), 1024)),
                          st.just(frame(2))), max_size=12),
       st.lists(st.integers(0, 10**9), min_size=12, max_size=12))
def test_the_assembler_never_raises_and_accounts_for_every_datagram(data: list[bytes], times: list[int]) -> None:
    asm = AxisSplitAssembler()
    out = [asm.push(d, t, "s") for d, t in zip(data, sorted(times), strict=False)]
    asm.flush()
    whole = sum(o is not None and any(o is d for d in data) for o in out)
    # every datagram pushed is passed on as it came, part of a joined frame, or counted as rejected
    assert whole + asm.parts_joined + sum(asm.rejected.values()) == len(data)
    assert sum(o is not None for o in out) == whole + asm.joined
    assert asm.pending == 0


def test_axis_neuron_version_1_1_0_0_is_accepted() -> None:
    data = frame(5, version=parse_version("1.1.0.0"))
    assert parse_header(data).version == (1, 1, 0, 0)
    assert parse_datagram(data).posture_index == 5


def test_the_perception_neuron_skeleton_as_axis_neuron_sends_it() -> None:
    assert skeleton_kind("pn") is SkeletonKind.PN_PRO
    names = get_skeleton("pn").names
    assert "Spine3" in names and "Neck1" not in names and len(names) == 59
    data = frame(9, PN, version=(1, 1, 0, 0))
    core = CaptureCore(AxisDecoder(PN), [7014])
    (out,) = core.feed(Datagram(0, 7014, "", data), 0.0) or core.flush()
    assert out.posture_index == 9 and np.isfinite(out.positions).all()


def test_the_auditors_side_path_joins_split_frames_too() -> None:
    from mocapline.services.auditor.service import SidePath

    side = SidePath("127.0.0.1", 0)
    try:
        for k, data in enumerate(parts_stream(list(range(10)), {4}, set(), every=1)):
            side.fifo.put(Datagram(k, 7015, "127.0.0.1", data))
        side.drain()
        led = side.as_dict()
    finally:
        side.receiver.sock.close()
    assert led["source_unique_frames"] == 9 and led["source_missing_indices"] == 1
    assert led["rejected_datagrams"] == 1  # the tail of 4, its head lost


def test_inspect_joins_split_frames_from_a_pcap(tmp_path) -> None:
    import io
    import json
    from contextlib import redirect_stdout

    import dpkt

    from mocapline.tools.inspect import main as inspect_main

    path = tmp_path / "neuron.pcap"
    with open(path, "wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        for k, data in enumerate(parts_stream(list(range(6)), {2}, {4}, every=1)):
            udp = dpkt.udp.UDP(sport=50000, dport=7014, data=data)
            udp.ulen = len(udp)
            ip = dpkt.ip.IP(src=b"\xc0\xa8\x01\x02", dst=b"\xc0\xa8\x01\x03", p=dpkt.ip.IP_PROTO_UDP, data=udp)
            ip.len = 20 + len(bytes(udp))
            writer.writepkt(bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)), 1.0 + k / 1000)
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert inspect_main([str(path), "--port", "7014", "--skeleton", "axis_studio"]) == 0
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [f["posture_index"] for f in lines[:-1]] == [0, 1, 3, 5]
    ledger = lines[-1]["ledger"]
    assert ledger["split_frames"] == 4 and ledger["rejected_by_reason"] == {SPLIT_INCOMPLETE: 1, SPLIT_NO_HEAD: 1}


def test_noise_of_just_the_missing_length_does_not_complete_a_cut_off_frame() -> None:
    asm = AxisSplitAssembler()
    head, tail = split_datagram(frame(1), 1024)
    noise = np.full(len(tail) // 4, 3e38, dtype="<f4").tobytes()  # finite, but no BVH channel's value
    assert asm.push(head, 0) is None
    assert asm.push(noise, 1) == noise  # not joined: left to the parser, which rejects it
    assert dict(asm.rejected) == {SPLIT_INCOMPLETE: 1} and asm.joined == 0
    assert asm.push(head, 2) is None and asm.push(tail, 3) == frame(1)  # a real tail still joins
