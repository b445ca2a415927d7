"""Debian's headless Chromium driven over the Chrome DevTools Protocol (CDP), for the web viewer's
tests: open a page, evaluate JavaScript, take screenshots, collect console errors. The CDP client
is the `websockets` package's synchronous client; no browser is downloaded (apt: chromium).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--no-default-browser-check",
    # WebGL on the CPU (SwiftShader) where there is no GPU, as on CI machines.
    "--enable-unsafe-swiftshader", "--use-angle=swiftshader",
)


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with a fresh profile and one page."""

    def __init__(self, width: int = 1280, height: int = 800, port: int = 0) -> None:
        from websockets.sync.client import connect

        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        # Chromium's helper processes may still be writing into it for a moment after it exits.
        self.profile = tempfile.TemporaryDirectory(prefix="mocapline-chromium-", ignore_cleanup_errors=True)
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile.name}", f"--window-size={width},{height}",
             f"--remote-debugging-port={port}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start")
            time.sleep(0.1)
        devtools_port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json", timeout=5).read())
        page = next(t for t in targets if t["type"] == "page")
        self._exits = contextlib.ExitStack()
        self.ws = self._exits.enter_context(connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024,
                                                    open_timeout=10))
        self._id = 0
        self.errors: list[str] = []
        self.send("Runtime.enable")
        self.send("Log.enable")
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"not true within {timeout:.0f} s: {expression}")

    def screenshot(self, path: Path) -> bytes:
        png = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        Path(path).write_bytes(png)
        return png

    def close(self) -> None:
        if hasattr(self, "_exits"):
            with contextlib.suppress(Exception):
                self._exits.close()
        with contextlib.suppress(ProcessLookupError):  # the browser and its helpers (its own session)
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
