"""The headless view: offscreen MuJoCo frames and the live ledger served as a web page.

GET /            the page (robot image refreshed at display rate, ledger table)
GET /frame.png   the latest rendered frame
GET /ledger.json the viewer's counters (and the pipeline ledger when the viewer has one)
GET /healthz     "ok" (for compose healthchecks)
GET /plots.json  the PNGs under --plots-dir (`mocapline plot` output), linked from the page
GET /plots/NAME  one of them
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np


def encode_png(rgb: np.ndarray, level: int = 1) -> bytes:
    """A minimal PNG encoder (8-bit RGB, no filtering): enough for a live view, no extra dependency."""
    h, w, _ = rgb.shape
    raw = np.zeros((h, w * 3 + 1), dtype=np.uint8)
    raw[:, 1:] = rgb.reshape(h, w * 3)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + chunk(b"IEND", b"")


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>mocapline viewer</title>
<style>
body{font-family:system-ui,sans-serif;background:#14161a;color:#e6e6e6;margin:0;display:flex;gap:24px;padding:16px}
img{background:#000;border-radius:6px;max-width:70vw}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
td{padding:2px 10px;border-bottom:1px solid #2a2d33}td:first-child{color:#9aa3ad}
h1{font-size:18px;margin:0 0 8px}
.bad{color:#ff6b6b}.ok{color:#69db7c}
</style></head>
<body><div><img id="view" src="frame.png" alt="G1"></div>
<div><h1>mocapline &mdash; live ledger</h1><table id="ledger"></table>
<p id="links"></p></div>
<script>
const img=document.getElementById('view');
function refresh(){const n=new Image();n.onload=()=>{img.src=n.src;setTimeout(refresh,%(period_ms)d)};
n.onerror=()=>setTimeout(refresh,1000);n.src='frame.png?'+Date.now();}
refresh();
async function ledger(){try{const r=await fetch('ledger.json');const d=await r.json();
let h='';for(const [k,v] of Object.entries(d)){let c='';if(k==='unique_frames_conserved')c=v?'ok':'bad';
if(k==='crc_invalid'&&v>0)c='bad';h+=`<tr><td>${k}</td><td class="${c}">${typeof v==='object'?JSON.stringify(v):v}</td></tr>`;}
document.getElementById('ledger').innerHTML=h;}catch(e){} setTimeout(ledger,500);}
ledger();
fetch('plots.json').then(r=>r.json()).then(l=>{if(l.length)document.getElementById('links').innerHTML=
'Take plots: '+l.map(n=>`<a style="color:#8ab4f8" href="plots/${encodeURI(n)}">${n}</a>`).join(' &middot; ');}).catch(()=>{});
</script></body></html>
"""


class WebView:
    """Serves the latest PNG and ledger; the render loop calls ``publish`` at display rate."""

    def __init__(self, host: str, port: int, ledger: Callable[[], dict[str, Any]], fps: float = 30.0,
                 plots_dir: Path | None = None) -> None:
        self.ledger = ledger
        self.plots_dir = Path(plots_dir).resolve() if plots_dir is not None else None
        self._png = encode_png(np.zeros((8, 8, 3), dtype=np.uint8))
        self._lock = threading.Lock()
        page = (PAGE % {"period_ms": int(1000 / max(fps, 1))}).encode()
        view = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", page)
                elif path == "/frame.png":
                    with view._lock:
                        png = view._png
                    self._send(200, "image/png", png)
                elif path == "/ledger.json":
                    self._send(200, "application/json", json.dumps(view.ledger()).encode())
                elif path == "/healthz":
                    self._send(200, "text/plain", b"ok")
                elif path == "/plots.json":
                    self._send(200, "application/json", json.dumps(view.plot_names()).encode())
                elif path.startswith("/plots/") and (png := view.plot(unquote(path[len("/plots/"):]))) is not None:
                    self._send(200, "image/png", png)
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.address = f"http://{host}:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, name="web-view", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def plot_names(self) -> list[str]:
        """PNGs under the plots folder (recursively: a folder of takes works), relative paths."""
        if self.plots_dir is None or not self.plots_dir.is_dir():
            return []
        return sorted(str(p.relative_to(self.plots_dir)) for p in self.plots_dir.rglob("*.png"))

    def plot(self, name: str) -> bytes | None:
        """One PNG of the plots folder; None outside it (no path traversal) or when absent."""
        if self.plots_dir is None:
            return None
        target = (self.plots_dir / name).resolve()
        if target.suffix != ".png" or not target.is_file() or self.plots_dir not in target.parents:
            return None
        return target.read_bytes()

    def publish(self, rgb: np.ndarray) -> None:
        png = encode_png(rgb)
        with self._lock:
            self._png = png

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
