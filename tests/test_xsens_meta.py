"""Xsens MVN as it really arrives: props (beside a body, or a character of their own), finger
tracking (23 body + 40 finger segments, 2040 bytes), MXTP12 (names) and MXTP13 (scaling), from
the MVN network streamer protocol's published layout; the fixtures are made here."""

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import dpkt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.frames import HumanFrame
from mocapline.core.udp import Datagram
from mocapline.formats.mxtp02 import (
    FINGER_SEGMENTS,
    REJECT_REASONS,
    XsensReject,
    encode_mxtp02,
    parse_mxtp02,
)
from mocapline.formats.mxtp_meta import (
    HEAD_ORIGIN_TO_HEIGHT,
    ScalePoint,
    encode_meta,
    encode_scaling,
    parse_meta,
    parse_scaling,
    scaling_height,
)
from mocapline.services.capture.core import CaptureCore, XsensDecoder
from mocapline.tools.inspect import main as inspect_main

PORT = 9763


def pose(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    positions = rng.normal(0.0, 0.3, (23, 3))
    positions[:, 2] += 0.95
    positions[GMR_BODY_INDEX["Hips"], 2] = 0.95
    q = Rotation.random(23, random_state=seed).as_quat(scalar_first=True)
    q *= np.where(q[:, :1] < 0.0, -1.0, 1.0)
    return positions.astype(np.float32).astype(float), q.astype(np.float32).astype(float)


def unit_quats(n: int, seed: int) -> np.ndarray:
    q = Rotation.random(n, random_state=seed).as_quat(scalar_first=True)
    return (q * np.where(q[:, :1] < 0.0, -1.0, 1.0)).astype(np.float32).astype(float)


def gloves(seed: int) -> tuple[np.ndarray, np.ndarray]:
    pos = np.random.default_rng(seed).normal(0.0, 0.5, (40, 3)).astype(np.float32).astype(float)
    return pos, unit_quats(40, seed)


def a_prop(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.array([24]), np.array([[1.0, 2.0, 0.5]]), unit_quats(1, seed)


# A 1.80 m performer's null pose (segment origins, Z-up, m) with the crown and the heels as points.
SEGMENTS = {"Pelvis": (0.0, 0.0, 0.98), "Head": (0.0, 0.0, 1.62), "RightFoot": (0.0, -0.1, 0.08),
            "LeftFoot": (0.0, 0.1, 0.08)}
POINTS = (ScalePoint(2, 0, "pTopOfHead", 0, (0.0, 0.0, 0.18)),
          ScalePoint(3, 0, "pRightHeelFloor", 0, (0.0, 0.0, -0.08)))


def test_gloves_are_23_body_and_40_finger_segments_in_2040_bytes() -> None:
    positions, quaternions = pose(1)
    fpos, fquat = gloves(1)
    data = encode_mxtp02(5, positions, quaternions, character_id=1, fingers=(fpos, fquat))
    assert len(data) == 2040 and data[17:20] == bytes((23, 0, 40))
    frame = parse_mxtp02(data)
    np.testing.assert_allclose(frame.positions, positions)
    np.testing.assert_allclose(frame.finger_positions, fpos)
    np.testing.assert_allclose(frame.finger_quaternions, fquat)
    assert len(FINGER_SEGMENTS) == 40 and FINGER_SEGMENTS[0] == "LeftCarpus" and FINGER_SEGMENTS[-1] == "RightFifthDP"


def test_props_beside_a_body_and_a_character_of_props_only() -> None:
    positions, quaternions = pose(2)
    ids, ppos, pquat = a_prop(2)
    with_prop = parse_mxtp02(encode_mxtp02(7, positions, quaternions, props=(ids, ppos, pquat)))
    assert with_prop.has_body and with_prop.prop_ids.tolist() == [24]
    np.testing.assert_allclose(with_prop.prop_positions, ppos)
    only = parse_mxtp02(encode_mxtp02(7, None, None, character_id=2, props=(ids, ppos, pquat)))
    assert not only.has_body and only.character_id == 2
    np.testing.assert_allclose(only.prop_quaternions, pquat)


def test_fingers_without_a_body_are_a_bad_count() -> None:
    fpos, fquat = gloves(3)
    with pytest.raises(XsensReject) as info:
        parse_mxtp02(encode_mxtp02(1, None, None, fingers=(fpos, fquat)))
    assert info.value.reason == "bad_count"


def test_meta_names_the_character() -> None:
    meta = parse_meta(encode_meta(3, {"name": "Alice", "color": "FF8000", "xmid": "00B4A1C2"}))
    assert (meta.character_id, meta.name, meta.tags["xmid"]) == (3, "Alice", "00B4A1C2")


def test_scaling_gives_the_height() -> None:
    first, points = encode_scaling(0, SEGMENTS, POINTS)
    seg = parse_scaling(first)
    assert seg.segments["Head"] == pytest.approx((0.0, 0.0, 1.62)) and not seg.points
    pts = parse_scaling(points)
    assert [p.name for p in pts.points] == ["pTopOfHead", "pRightHeelFloor"]
    assert scaling_height(seg.segments, pts.points) == pytest.approx(1.80, abs=1e-6)
    assert scaling_height(seg.segments) == pytest.approx((1.62 - 0.08) * HEAD_ORIGIN_TO_HEIGHT, abs=1e-6)
    assert parse_scaling(encode_scaling(0, SEGMENTS, POINTS)[0], "cm").segments["Head"][2] == pytest.approx(0.0162)


def test_bad_meta_is_counted_by_reason() -> None:
    data = bytearray(encode_meta(0, {"name": "x"}))
    data[24:28] = (10**6).to_bytes(4, "big")
    with pytest.raises(XsensReject) as info:
        parse_meta(bytes(data))
    assert info.value.reason == "bad_meta" and "bad_meta" in REJECT_REASONS


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([encode_meta(1, {"name": "Bob"}), *encode_scaling(1, SEGMENTS, POINTS)]),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=8), st.integers(0, 400))
def test_mutated_meta_and_scaling_only_raise_xsens_reject(data: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    mutated = bytearray(data)
    for offset, value in flips:
        if offset < len(mutated):
            mutated[offset] = value
    for candidate in (bytes(mutated), bytes(mutated[:cut])):
        for parse in (parse_meta, parse_scaling):
            try:
                parse(candidate)
            except XsensReject as exc:
                assert exc.reason in REJECT_REASONS


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["gloves", "prop", "props_only"]), st.lists(st.tuples(st.integers(0, 2100), st.integers(0, 255)),
                                                                    max_size=8))
def test_mutated_props_and_gloves_only_raise_xsens_reject(kind: str, flips: list[tuple[int, int]]) -> None:
    positions, quaternions = pose(4)
    data = {"gloves": encode_mxtp02(1, positions, quaternions, fingers=gloves(4)),
            "prop": encode_mxtp02(1, positions, quaternions, props=a_prop(4)),
            "props_only": encode_mxtp02(1, None, None, props=a_prop(4))}[kind]
    mutated = bytearray(data)
    for offset, value in flips:
        if offset < len(mutated):
            mutated[offset] = value
    try:
        parse_mxtp02(bytes(mutated))
    except XsensReject as exc:
        assert exc.reason in REJECT_REASONS


def mvn_stream(samples: int = 6) -> list[bytes]:
    """Two suits (character 1 with gloves), a prop on character 2, MXTP12 and MXTP13 beside them."""
    out = [encode_meta(0, {"name": "Alice"}), encode_meta(1, {"name": "Bob"}), encode_meta(2, {"name": "Sword"}),
           *encode_scaling(0, SEGMENTS, POINTS), *encode_scaling(1, SEGMENTS)]
    for k in range(samples):
        positions, quaternions = pose(10 + k)
        out.append(encode_mxtp02(100 + k, positions, quaternions, character_id=0))
        out.append(encode_mxtp02(100 + k, positions, quaternions, character_id=1, fingers=gloves(k)))
        out.append(encode_mxtp02(100 + k, None, None, character_id=2, props=a_prop(k)))
        if k == 2:
            out.append(encode_meta(0, {"name": "Alice"}))  # MVN repeats its meta data
    return out


def check_mvn_take(frames: list[dict], ledger: dict) -> None:
    check_mvn_ledger(ledger)
    bob = [f for f in frames if f["avatar_index"] == 1]
    assert all(len(f["fingers"]["pos"]) == 40 for f in bob) and all(f["avatar_name"] == "Bob" for f in bob)
    # the prop's pose rides on the suits' frames from the first sample after it came
    assert [p["character"] for p in frames[-1]["props"]] == [2]
    assert frames[-1]["human_height"] > 1.5


def check_mvn_ledger(ledger: dict) -> None:
    assert ledger["rejected_datagrams"] == 0
    assert {k: (p["avatar_name"], p["source_unique_frames"]) for k, p in ledger["performers"].items()} == {
        "0": ("Alice", 6), "1": ("Bob", 6)}
    assert ledger["props"] == {"2": {"samples": 6, "segments": 1, "name": "Sword"}}  # every character named
    assert ledger["meta_datagrams"] == {"MXTP12": 4, "MXTP13": 3}
    assert ledger["performers"]["0"]["human_height_m"] == pytest.approx(1.80)
    assert ledger["performers"]["1"]["human_height_m"] == pytest.approx((1.62 - 0.08) * HEAD_ORIGIN_TO_HEIGHT, abs=1e-3)


def test_capture_core_accounts_for_every_character() -> None:
    from mocapline.tools.inspect import frame_json

    core = CaptureCore(XsensDecoder("m"), [PORT])
    frames: list[HumanFrame] = []
    for k, data in enumerate(mvn_stream()):
        frames += core.feed(Datagram(k * 1000, PORT, "127.0.0.1", data), k * 1e-6)
    frames += core.flush()
    check_mvn_take([frame_json(f) for f in frames], core.ledger())
    back = HumanFrame.from_bytes(frames[-1].to_bytes())
    np.testing.assert_allclose(back.finger_positions, frames[-1].finger_positions)
    assert back.prop_character == (2,) and back.human_height == frames[-1].human_height


def udp_packets(payload: bytes, ident: int, dport: int) -> list[dpkt.ip.IP]:
    """One UDP datagram as IPv4 packets (fragments past a 1500-byte MTU, as the 2040-byte one is)."""
    udp = dpkt.udp.UDP(sport=50000, dport=dport, data=payload)
    udp.ulen = len(udp)
    raw = bytes(udp)
    chunk = 1480
    out = []
    for off in range(0, len(raw), chunk):
        part = raw[off : off + chunk]
        ip = dpkt.ip.IP(src=b"\xc0\xa8\x01\x02", dst=b"\xc0\xa8\x01\x03", p=dpkt.ip.IP_PROTO_UDP, id=ident,
                        mf=int(off + chunk < len(raw)), offset=off // 8, data=part)
        ip.len = 20 + len(part)
        out.append(ip)
    return out


def test_inspect_shows_the_same_from_a_pcap(tmp_path: Path) -> None:
    path = tmp_path / "mvn.pcap"
    with open(path, "wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        for k, data in enumerate(mvn_stream()):
            for ip in udp_packets(data, k + 1, PORT):
                writer.writepkt(bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)), 1.0 + k / 1000)
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert inspect_main([str(path), "--source", "xsens", "--port", str(PORT)]) == 0
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    check_mvn_take(lines[:-1], lines[-1]["ledger"])


@pytest.mark.parametrize("field, values", [("finger_positions", [0.0] * 4), ("finger_quaternions", [1.0] * 8),
                                           ("prop_positions", [0.0] * 6), ("prop_segment", [1, 2])])
def test_a_human_frame_with_inconsistent_hand_or_prop_fields_is_rejected(field: str, values: list) -> None:
    from mocapline.core import pb
    from mocapline.core.frames import FrameFieldError

    positions, quaternions = pose(5)
    msg = HumanFrame(posture_index=1, capture_timestamp_us=1, positions=positions, quaternions=quaternions,
                     finger_positions=np.zeros((1, 3)), finger_quaternions=np.zeros((1, 4)), prop_character=(2,),
                     prop_segment=(24,), prop_positions=np.zeros((1, 3)), prop_quaternions=np.zeros((1, 4))).to_proto()
    HumanFrame.from_proto(msg)
    getattr(msg, field)[:] = values
    with pytest.raises(FrameFieldError):
        HumanFrame.from_proto(pb.HumanFrame.FromString(msg.SerializeToString()))


def test_position_unit_auto_scales_fingers_and_props_with_the_body() -> None:
    positions, quaternions = pose(6)
    fpos, fquat = gloves(6)
    ids, ppos, pquat = a_prop(6)
    data = encode_mxtp02(1, positions, quaternions, position_unit="cm", fingers=(fpos, fquat), props=(ids, ppos, pquat))
    _, frame = XsensDecoder("auto").decode(data)
    np.testing.assert_allclose(frame.positions, positions, rtol=1e-6)
    np.testing.assert_allclose(frame.finger_positions, fpos, rtol=1e-6)
    np.testing.assert_allclose(frame.prop_positions, ppos, rtol=1e-6)
