"""`mocapline inspect` on recordings and on pcap / pcapng captures (with IPv4 fragments)."""

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import dpkt
import numpy as np
import pytest

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.mlrec import RecordingWriter, read_recording
from mocapline.formats.skeleton import get_skeleton
from mocapline.tools.emitter.motion import pose_channels
from mocapline.tools.inspect import main as inspect_main

CONFIG = AxisBvhConfig()


def datagrams(indices: list[int]) -> list[bytes]:
    skel = get_skeleton(CONFIG.skeleton)
    return [encode_datagram(i, pose_channels(skel, "YXZ", i / 60), config=CONFIG) for i in indices]


def run_inspect(*argv: str) -> list[dict]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert inspect_main(list(argv)) == 0
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_recording_to_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.mlrec"
    with RecordingWriter(path, {"source": "axis"}) as w:
        for k, data in enumerate(datagrams([9368, 9369, 9370, 9370, 9372])):
            w.write(Datagram(1_000_000 * k, 7014, "127.0.0.1", data))
        w.write(Datagram(9_000_000, 7014, "127.0.0.1", b"\x00" * 193))
    lines = run_inspect(str(path), "--port", "7014")
    frames, ledger = lines[:-1], lines[-1]["ledger"]
    assert [f["posture_index"] for f in frames] == [9368, 9369, 9370, 9372]
    assert list(frames[0]) == ["posture_index", "avatar_index", "avatar_name", "bodies", "fingers"]
    assert list(frames[0]["bodies"]) == list(GMR_BODIES)
    hips = frames[0]["bodies"]["Hips"]
    assert len(hips["pos"]) == 3 and len(hips["quat"]) == 4
    assert ledger["source_received"] == 5 and ledger["source_duplicate_indices"] == 1
    assert ledger["source_missing_indices"] == 1 and ledger["rejected_datagrams"] == 1


def test_torn_recording_keeps_what_precedes(tmp_path: Path) -> None:
    path = tmp_path / "t.mlrec"
    with RecordingWriter(path, {}) as w:
        for k, data in enumerate(datagrams([1, 2, 3])):
            w.write(Datagram(k, 7014, "", data))
    raw = path.read_bytes()
    path.write_bytes(raw[:-100])
    rec = read_recording(path)
    assert rec.torn_tail and len(rec.datagrams) == 2


def udp_ip_packets(payload: bytes, ident: int, mtu: int = 1500) -> list[dpkt.ip.IP]:
    udp = dpkt.udp.UDP(sport=50000, dport=7014, data=payload)
    udp.ulen = len(udp)
    raw = bytes(udp)
    chunk = (mtu - 20) // 8 * 8
    out = []
    for off in range(0, len(raw), chunk):
        part = raw[off : off + chunk]
        more = off + chunk < len(raw)
        ip = dpkt.ip.IP(src=b"\xc0\xa8\x01\x02", dst=b"\xc0\xa8\x01\x03", p=dpkt.ip.IP_PROTO_UDP,
                        id=ident, mf=int(more), offset=off // 8, data=part)
        ip.len = 20 + len(part)
        out.append(ip)
    return out


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_pcap_with_fragments(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"t.{fmt}"
    payloads = datagrams([100, 101, 103])
    with open(path, "wb") as fh:
        writer = dpkt.pcap.Writer(fh) if fmt == "pcap" else dpkt.pcapng.Writer(fh)
        ts = 1.0
        for k, data in enumerate(payloads):
            frags = udp_ip_packets(data, ident=k + 1)
            assert len(frags) == 2  # 1480 + 8 bytes of UDP do not fit a 1500-byte MTU
            for ip in reversed(frags):  # out of order on purpose
                eth = dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x01" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
                writer.writepkt(bytes(eth), ts)
                ts += 0.001
        other = dpkt.udp.UDP(sport=1, dport=9999, data=b"not for us")
        other.ulen = len(other)
        ip = dpkt.ip.IP(src=b"\x01\x02\x03\x04", dst=b"\x01\x02\x03\x05", p=17, data=other)
        writer.writepkt(bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)), ts)
    lines = run_inspect(str(path), "--port", "7014")
    assert [f["posture_index"] for f in lines[:-1]] == [100, 101, 103]
    assert lines[-1]["ledger"]["source_missing_indices"] == 1
    hips_z = lines[0]["bodies"]["Hips"]["pos"][2]
    assert 0.5 < hips_z < 1.2


def test_inspect_matches_recording_positions(tmp_path: Path) -> None:
    path = tmp_path / "t.mlrec"
    with RecordingWriter(path, {}) as w:
        for k, data in enumerate(datagrams([5, 6])):
            w.write(Datagram(k, 7014, "", data))
    a = run_inspect(str(path))
    b = run_inspect(str(path))
    assert a == b
    assert np.isfinite(np.array(a[0]["bodies"]["Head"]["pos"])).all()


def test_bad_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world")
    assert inspect_main([str(junk)]) == 2
    assert "not a file mocapline reads; expected a take folder" in capsys.readouterr().err
    assert inspect_main([str(tmp_path / "missing.pcap")]) == 2
