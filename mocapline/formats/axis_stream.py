"""Axis Studio binary BVH over TCP: one byte stream, cut back into the datagrams UDP would carry.

Over TCP Axis Studio writes the same datagrams (64-byte header, ``data_count`` float32 values)
back to back. ``AxisStreamSplitter`` finds each one by its start token and the length its header
declares (``axis_bvh.declared_length``), whatever the reads look like: a datagram split across
reads, several in one read, one byte at a time.

Bytes that are not a datagram are never dropped silently: every run of them (garbage, a header
whose length is corrupt, a datagram cut short) is handed on as one chunk of its own, which the
capture core then rejects and counts exactly as it would a bad UDP datagram (``not_bvh``,
``truncated``, ...). So the ledger's ``rejected_datagrams`` covers the TCP stream too.

Resync: a header is trusted only when every field checkable without the values passes; otherwise
the splitter skips to the next start token. A datagram cut short mid-stream (a server that wrote
half a datagram, then the next one) is recognised by a valid header starting inside the bytes it
claims: the cut part becomes a rejected chunk and the next datagram is kept. When such a candidate
is itself still incomplete the splitter waits for more bytes, at most until ``idle()`` (nothing
arrived for a poll interval) or ``close()`` (the connection ended), so it never stalls; then the
candidate's first bytes decide (``_next_header``), and only a start token in a datagram's last
few bytes cannot be told from its values.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass

from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import (
    DEFAULT_CONFIG,
    HEADER_SIZE,
    AxisBvhConfig,
    declared_length,
    may_start_header,
)

MAX_CHUNK = 65535  # a run of junk longer than a UDP datagram could be is handed on in pieces
_TOKEN = re.compile(rb"\xff[\xdd\x88]")  # BVH data 0xDDFF, calculation data 0x88FF (little-endian)


@dataclass
class SplitterStats:
    datagrams: int = 0  # framed datagrams handed on (BVH and calculation data)
    rejected_chunks: int = 0  # chunks of non-datagram bytes handed on (each one rejected downstream)
    junk_bytes: int = 0  # bytes in those chunks
    resyncs: int = 0  # times the splitter searched for the next start token


class AxisStreamSplitter:
    """Feed bytes as they arrive; get back the datagrams and rejected chunks, in stream order."""

    def __init__(self, config: AxisBvhConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        self.stats = SplitterStats()
        self._buf = bytearray()
        self._junk = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held: an incomplete datagram (or junk) waiting for the next read."""
        return len(self._buf) + len(self._junk)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        self._buf += data
        return self._split(decide=False)

    def idle(self) -> list[bytes]:
        """Nothing arrived for a while: release a complete datagram held back only because a start
        token near its end could not yet be told apart from a datagram cut short."""
        return self._split(decide=True)

    def close(self) -> list[bytes]:
        """The connection ended: everything held goes out (an incomplete datagram as a rejected
        chunk) and the splitter starts afresh for the next connection."""
        out = self._split(decide=True)
        self._flush_junk(out)
        if self._buf:
            self._reject_run(out, bytes(self._buf))
            self._buf.clear()
        return out

    def _split(self, decide: bool) -> list[bytes]:
        out: list[bytes] = []
        buf, pos = self._buf, 0
        while pos < len(buf):
            available = len(buf) - pos
            token = _TOKEN.match(buf, pos)
            length = declared_length(buf[pos : pos + HEADER_SIZE], self.config) if token else None
            if token and available < HEADER_SIZE:
                break  # the header is still coming
            if length is None:  # not a datagram start: resync on the next token
                nxt = self._skip_to_token(buf, pos, out)
                if nxt < 0:  # no token yet: all junk but a last 0xFF, where a token may start
                    keep = len(buf) - (1 if buf[-1] == 0xFF else 0)
                    self._add_junk(buf[pos:keep], out)
                    pos = keep
                    break
                pos = nxt
                continue
            end = pos + min(length, available)
            cut, unsure = self._next_header(buf, pos, end, decide)
            if cut is not None:  # a datagram cut short: the next one starts inside it
                self._flush_junk(out)
                self._reject_run(out, bytes(buf[pos:cut]))
                pos = cut
                continue
            if available < length or (unsure and not decide):
                break
            self._flush_junk(out)
            out.append(bytes(buf[pos : pos + length]))
            self.stats.datagrams += 1
            pos += length
        del buf[:pos]
        return out

    def _next_header(self, buf: bytearray, start: int, end: int, decide: bool) -> tuple[int | None, bool]:
        """Where a valid header starts inside ``buf[start:end]`` (a datagram at ``start`` was cut
        short), and whether a start token there cannot be judged yet (its header is incomplete).

        An incomplete header at the end of the bytes so far is waited for; once nothing more is
        coming for now (``decide``) it is taken for a header when its checked fields pass
        (``may_start_header``: a datagram cut short, then the start of another), and ruled out when
        they fail (a start token's bytes inside a datagram's values). Only a token in the last
        ``checked_header_bytes`` bytes cannot be told from a datagram's values: the datagram
        before it is then taken as whole."""
        for match in _TOKEN.finditer(buf, start + 2, end + 1):  # a token may straddle ``end``
            p = match.start()
            if p + HEADER_SIZE <= len(buf):
                if declared_length(buf[p : p + HEADER_SIZE], self.config) is not None:
                    return p, False
                continue
            plausible = may_start_header(buf[p:], self.config)
            if plausible is False:
                continue
            if not decide:
                return None, True
            if plausible:
                return p, False
            return None, True
        return None, len(buf) == end and buf[end - 1] == 0xFF

    def _skip_to_token(self, buf: bytearray, pos: int, out: list[bytes]) -> int:
        """Move the bytes before the next start token into the junk run; -1 when there is none."""
        self.stats.resyncs += 1
        match = _TOKEN.search(buf, pos + 1)
        if match is None:
            return -1
        self._add_junk(buf[pos : match.start()], out)
        return match.start()

    def _add_junk(self, piece: bytes | bytearray, out: list[bytes]) -> None:
        self._junk += piece
        if len(self._junk) >= MAX_CHUNK:
            self._flush_junk(out)

    def _flush_junk(self, out: list[bytes]) -> None:
        while self._junk:
            piece = bytes(self._junk[:MAX_CHUNK])
            del self._junk[:MAX_CHUNK]
            self._reject_run(out, piece)

    def _reject_run(self, out: list[bytes], piece: bytes) -> None:
        out.append(piece)
        self.stats.rejected_chunks += 1
        self.stats.junk_bytes += len(piece)


def stream_datagrams(
    pieces: Iterable[tuple[Hashable, int, bytes | None]],
    port: int,
    config: AxisBvhConfig = DEFAULT_CONFIG,
) -> Iterator[Datagram]:
    """Recorded TCP streams as capture would have received them: ``(connection, recv_ns, bytes)``
    pieces in stream order per connection, ``bytes`` None where a connection ended. Each datagram
    (or rejected chunk) carries the time of the piece that completed it; ``connection`` is any key
    (a pcap's flow; its first element, when a tuple, is the peer address used as the source)."""
    splitters: dict[Hashable, AxisStreamSplitter] = {}
    last_ns: dict[Hashable, int] = {}

    def source(key: Hashable) -> str:
        return str(key[0]) if isinstance(key, tuple) and key else ""

    for key, recv_ns, data in pieces:
        splitter = splitters.setdefault(key, AxisStreamSplitter(config))
        last_ns[key] = recv_ns
        for chunk in splitter.feed(data) if data is not None else splitter.close():
            yield Datagram(recv_ns, port, source(key), chunk)
    for key, splitter in splitters.items():
        for chunk in splitter.close():
            yield Datagram(last_ns[key], port, source(key), chunk)


def is_stream_dump(head: bytes) -> bool:
    """Whether a file starting with ``head`` looks like a raw Axis TCP byte dump (``nc HOST 7001 >
    dump``): it starts with a BVH or calculation-data token."""
    return _TOKEN.match(head) is not None
