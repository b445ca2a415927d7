"""`mocapline inspect` of a captured Axis TCP stream: a raw byte dump, and a pcap whose TCP
segments arrive split, out of order, retransmitted, over two connections."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import dpkt

from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.skeleton import get_skeleton
from mocapline.tools.emitter.motion import pose_channels
from mocapline.tools.inspect import main as inspect_main

CONFIG = AxisBvhConfig()
SERVER, CLIENT = b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02"


def datagrams(indices: list[int]) -> list[bytes]:
    skel = get_skeleton(CONFIG.skeleton)
    return [encode_datagram(i, pose_channels(skel, "YXZ", i / 60), config=CONFIG) for i in indices]


def run_inspect(*argv: str) -> tuple[list[int], dict]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert inspect_main(list(argv)) == 0
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    return [f["posture_index"] for f in lines[:-1]], lines[-1]["ledger"]


def test_raw_dump_of_a_tcp_stream(tmp_path: Path) -> None:
    path = tmp_path / "axis.bin"
    frames = datagrams([10, 11, 12, 14])
    path.write_bytes(frames[0] + frames[1] + b"garbage!" + frames[2] + frames[3] + frames[0][:100])
    indices, ledger = run_inspect(str(path))
    assert indices == [10, 11, 12, 14]
    assert ledger["source_missing_indices"] == 1
    assert ledger["rejected_datagrams"] == 2  # the garbage run and the cut last datagram
    assert list(ledger["paths"]) == ["7001"]


def segment(seq: int, data: bytes, flags: int, sport: int = 7001, dport: int = 40000) -> bytes:
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq % 2**32, flags=flags, data=data)
    ip = dpkt.ip.IP(src=SERVER, dst=CLIENT, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(ip)
    return bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def connection(stream: bytes, isn: int, dport: int, mss: int = 1000) -> list[bytes]:
    """SYN-ACK, the stream in MSS-sized segments (two swapped, one sent twice), FIN."""
    packets = [segment(isn, b"", dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK, dport=dport)]
    segs = [segment(isn + 1 + off, stream[off : off + mss], dpkt.tcp.TH_ACK, dport=dport)
            for off in range(0, len(stream), mss)]
    segs[1], segs[2] = segs[2], segs[1]
    segs.insert(4, segs[3])  # a retransmission
    packets += segs
    packets.append(segment(isn + 1 + len(stream), b"", dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK, dport=dport))
    return packets


def test_pcap_tcp_reassembly_over_a_reconnect(tmp_path: Path) -> None:
    path = tmp_path / "axis.pcap"
    first, second = datagrams(list(range(100, 110))), datagrams(list(range(110, 120)))
    # the first connection ends half-way through 110's datagram; the second sends it whole
    packets = connection(b"".join(first) + second[0][:700], isn=2**32 - 5000, dport=40000)
    packets += connection(b"".join(second), isn=12345, dport=40001)
    with open(path, "wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        for k, pkt in enumerate(packets):
            writer.writepkt(pkt, 1.0 + k * 0.001)
        noise = dpkt.udp.UDP(sport=1, dport=7014, data=b"x")
        noise.ulen = len(noise)
        writer.writepkt(bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=dpkt.ip.IP(
            src=CLIENT, dst=SERVER, p=17, data=noise))), 9.0)
    indices, ledger = run_inspect(str(path), "--tcp", "7001")
    assert indices == list(range(100, 120))
    assert ledger["source_missing_indices"] == 0 and ledger["source_received"] == 20
    assert ledger["rejected_by_reason"] == {"truncated": 1}
