"""`mocapline up`'s supervision: a service that died is started again, one that stopped for good
(the robot bridge after an e-stop or a fall: EXIT_STOPPED) is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mocapline.core.lifecycle import EXIT_STOPPED
from mocapline.tools.pipeline.procs import Service
from mocapline.tools.pipeline.stack import Stack, local_config


def exited(code: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"], text=True)
    proc.wait(30)
    return proc


def test_an_e_stopped_bridge_stays_stopped_and_a_crashed_service_restarts(tmp_path: Path) -> None:
    stack = Stack(local_config(viewer=False, log_dir=tmp_path / "logs"))
    stack.services = {"robot": Service("robot", [], proc=exited(EXIT_STOPPED)),
                      "streamer": Service("streamer", [], proc=exited(1))}
    restarted: list[str] = []
    notices: list[str] = []
    stack.restart = restarted.append  # type: ignore[method-assign]
    stack.notify = notices.append
    assert stack.supervise() == ["streamer"] and restarted == ["streamer"]
    assert stack.stopped == {"robot"}
    assert any("robot stopped for good" in n and "not restarted" in n for n in notices), notices
    notices.clear()
    assert stack.supervise() == ["streamer"]  # (the fake streamer is still dead: it is tried again)
    assert not any("robot" in n for n in notices)  # said once
