"""The server side of RFC 6455 WebSockets, as much as the web viewer needs: the handshake on an
http.server request, binary frames out, and noticing that the page went away. The page never
sends data (only close and pong frames, which are read and discarded), so no message reassembly
or unmasking of payloads is needed.
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


def peer_closed(sock: socket.socket) -> bool:
    """True when the page closed the socket (EOF or a close frame); anything else it sent is dropped."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        data = sock.recv(4096)
    except OSError:
        return True
    return not data or (data[0] & 0x0F) == OP_CLOSE
