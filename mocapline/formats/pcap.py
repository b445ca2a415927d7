"""UDP payloads from packet captures (classic pcap and pcapng, as tcpdump / Wireshark write them).

Axis BVH datagrams (1480+ bytes) exceed a 1500-byte Ethernet MTU once IP and UDP headers are added,
so on a real network they arrive as IPv4 fragments: this reader reassembles them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dpkt

from mocapline.core.udp import Datagram

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


class PcapError(ValueError):
    pass


def is_pcap(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4)
    return head in PCAP_MAGICS or head == PCAPNG_MAGIC


def _ip_layer(linktype: int, buf: bytes) -> Any:
    if linktype == dpkt.pcap.DLT_EN10MB:
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data
    if linktype == dpkt.pcap.DLT_LINUX_SLL:
        return dpkt.sll.SLL(buf).data
    if linktype == 276:  # LINUX_SLL2
        return dpkt.sll2.SLL2(buf).data
    if linktype in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
        return dpkt.loopback.Loopback(buf).data
    if linktype in (dpkt.pcap.DLT_RAW, 101, 228):  # raw IP, raw IPv4
        return dpkt.ip.IP(buf) if buf[:1] and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
    if linktype == 229:  # raw IPv6
        return dpkt.ip6.IP6(buf)
    raise PcapError(f"unsupported link type {linktype}")


class _Reassembler:
    """IPv4 fragment reassembly keyed by (src, dst, id, proto)."""

    def __init__(self) -> None:
        self._parts: dict[tuple[bytes, bytes, int, int], dict[int, bytes]] = {}
        self._total: dict[tuple[bytes, bytes, int, int], int] = {}

    def add(self, ip: dpkt.ip.IP) -> bytes | None:
        """The whole IP payload once complete, else None."""
        more = bool(ip.mf)
        offset = ip.offset * 8
        raw = bytes(ip.data) if not isinstance(ip.data, bytes) else ip.data
        if not more and offset == 0:
            return raw
        key = (ip.src, ip.dst, ip.id, ip.p)
        parts = self._parts.setdefault(key, {})
        parts[offset] = raw
        if not more:
            self._total[key] = offset + len(raw)
        total = self._total.get(key)
        if total is None:
            return None
        buf = bytearray(total)
        filled = 0
        for off, chunk in parts.items():
            buf[off : off + len(chunk)] = chunk
            filled += len(chunk)
        if filled < total:
            return None
        del self._parts[key], self._total[key]
        return bytes(buf)


def _reader(fh: Any) -> Any:
    head = fh.read(4)
    fh.seek(0)
    if head == PCAPNG_MAGIC:
        return dpkt.pcapng.Reader(fh)
    if head in PCAP_MAGICS:
        return dpkt.pcap.Reader(fh)
    raise PcapError("not a pcap or pcapng file")


def _ip_payloads(path: Path, proto: int) -> Iterator[tuple[int, str, bytes | None]]:
    """Every packet of the capture as ``(ts_ns, source address, transport payload)``, the payload
    (IPv4 fragments reassembled) None when the packet carries no complete ``proto`` datagram:
    callers see the clock of every packet, theirs or not."""
    with open(path, "rb") as fh:
        try:
            reader = _reader(fh)
            linktype = reader.datalink()
        except (ValueError, dpkt.dpkt.Error) as exc:
            raise PcapError(f"{path}: {exc}") from None
        frag = _Reassembler()
        for ts, buf in reader:
            ts_ns = int(round(ts * 1e9))
            try:
                ip = _ip_layer(linktype, buf)
            except (dpkt.dpkt.Error, ValueError, IndexError):
                yield ts_ns, "", None
                continue
            if isinstance(ip, dpkt.ip.IP) and ip.p == proto:
                yield ts_ns, ".".join(str(b) for b in ip.src), frag.add(ip)
            elif isinstance(ip, dpkt.ip6.IP6) and ip.nxt == proto:
                yield ts_ns, ip.src.hex(), bytes(ip.data)
            else:
                yield ts_ns, "", None


def iter_udp(path: Path, port: int | None = None) -> Iterator[Datagram]:
    """UDP payloads (to ``port`` if given) in capture order, as Datagrams stamped with capture time."""
    for ts_ns, src, payload in _ip_payloads(path, dpkt.ip.IP_PROTO_UDP):
        if payload is None or len(payload) < 8:
            continue
        dport, ulen = int.from_bytes(payload[2:4], "big"), int.from_bytes(payload[4:6], "big")
        if port is not None and dport != port:
            continue
        data = payload[8:ulen] if 8 <= ulen <= len(payload) else payload[8:]
        yield Datagram(ts_ns, dport, src, data)


class _TcpFlow:
    """One direction of one TCP connection: payload delivered in sequence order, retransmissions
    and overlaps trimmed, out-of-order segments held until the gap before them is filled."""

    def __init__(self, isn: int, syn: bool) -> None:
        self.base = (isn + 1) % 2**32 if syn else isn
        self.next = 0  # offset (from base) of the next byte to deliver
        self.held: dict[int, bytes] = {}

    def add(self, seq: int, data: bytes) -> bytes:
        off = (seq - self.base) % 2**32
        if off >= 2**31:  # before the stream start (a retransmitted SYN, a keep-alive probe)
            return b""
        if data:
            self.held[off] = max(data, self.held.get(off, b""), key=len)
        out = bytearray()
        while True:
            ready = [o for o in self.held if o <= self.next]
            if not ready:
                return bytes(out)
            for o in ready:
                piece = self.held.pop(o)
                if o + len(piece) > self.next:
                    out += piece[self.next - o :]
                    self.next = o + len(piece)


def iter_tcp(path: Path, port: int) -> Iterator[tuple[tuple[str, int, int], int, bytes | None]]:
    """The byte streams a TCP server on ``port`` sent, reassembled: ``(connection, ts_ns, bytes)``
    in capture order, ``bytes`` None when a connection ends (FIN, RST, or the end of the file).
    ``connection`` is (server address, server port, client port)."""
    flows: dict[tuple[str, int, int], _TcpFlow] = {}
    ts_ns = 0
    for ts_ns, src, payload in _ip_payloads(path, dpkt.ip.IP_PROTO_TCP):
        if payload is None:
            continue
        try:
            tcp = dpkt.tcp.TCP(payload)
        except (dpkt.dpkt.Error, ValueError):
            continue
        if tcp.sport != port:
            continue
        key = (src, tcp.sport, tcp.dport)
        syn = bool(tcp.flags & dpkt.tcp.TH_SYN)
        flow = flows.get(key)
        if flow is None or syn:
            if flow is not None:
                yield key, ts_ns, None
            flow = flows[key] = _TcpFlow(tcp.seq, syn)
        data = flow.add(tcp.seq, bytes(tcp.data))
        if data:
            yield key, ts_ns, data
        if tcp.flags & (dpkt.tcp.TH_FIN | dpkt.tcp.TH_RST):
            del flows[key]
            yield key, ts_ns, None
    for key in flows:
        yield key, ts_ns, None
