"""The server side of RFC 6455 WebSockets, as much as the web viewer needs: the handshake on an
http.server request, binary frames out, and noticing that the page went away. The page never
sends data, only control frames: a close ends the connection, a ping is answered with its pong
(clients that keep their connections alive with pings, as Python's `websockets` does by default,
drop a server that never answers), anything else is discarded. No message reassembly is needed.
"""

from __future__ import annotations

import base64
import hashlib
import select
import socket
import struct
from typing import Any

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def handshake(handler: Any) -> bool:
    """Answer a BaseHTTPRequestHandler's upgrade request (101); False (after a 400) if it is not one."""
    key = handler.headers.get("Sec-WebSocket-Key")
    if handler.headers.get("Upgrade", "").lower() != "websocket" or not key:
        handler.send_error(400, "expected a WebSocket upgrade")
        return False
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept_key(key))
    handler.end_headers()
    handler.wfile.flush()
    return True


def frame(payload: bytes, opcode: int = OP_BINARY) -> bytes:
    """One final, unmasked frame (a server never masks)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The whole frames in ``data`` as (opcode, unmasked payload); a cut-off frame at the end is
    dropped (control frames are at most 125 bytes: they come in one piece)."""
    frames, at = [], 0
    while at + 2 <= len(data):
        opcode, masked, n = data[at] & 0x0F, data[at + 1] & 0x80, data[at + 1] & 0x7F
        at += 2
        if n >= 126:
            width = 2 if n == 126 else 8
            if at + width > len(data):
                break
            n = int.from_bytes(data[at:at + width], "big")
            at += width
        key = data[at:at + 4] if masked else b"\0\0\0\0"
        at += 4 if masked else 0
        if at + n > len(data):
            break
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(data[at:at + n]))
        frames.append((opcode, payload))
        at += n
    return frames


def serve_control(sock: socket.socket) -> bool:
    """Read what the page sent, answer its pings; True when it closed the socket (EOF or a close frame)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        data = sock.recv(4096)
    except OSError:
        return True
    if not data:
        return True
    for opcode, payload in client_frames(data):
        if opcode == OP_CLOSE:
            return True
        if opcode == OP_PING:
            sock.sendall(frame(payload, OP_PONG))
    return False
