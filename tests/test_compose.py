"""docker-compose.yml, the Dockerfiles and deploy/ checked against the code, since no docker engine
runs here: every service runs a real `mocapline` command, every MOCAPLINE_* variable is a real flag
of it (and parses), the links, ports and healthchecks agree with the flags, every depends_on target
has a healthcheck, every COPY source and mounted file exists. Then the same services run as plain
processes with the compose environment and must come up, link up and conserve a take."""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

yaml = pytest.importorskip("yaml")

from mocapline.cli import COMMANDS  # noqa: E402
from mocapline.core.metrics import AUTO_PORT  # noqa: E402
from mocapline.core.options import ENV_PREFIX  # noqa: E402
from mocapline.tools.pipeline.procs import free_tcp_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
ENV_FILE = ROOT / ".env"
PIPELINE = ("capture", "retarget", "streamer", "viewer", "auditor", "robot")
# flags whose value is a ZeroMQ endpoint the service binds / connects (the retarget workers bind a
# free port each and announce it in NATS, where the streamer's fan-in finds them)
BIND_FLAGS = {"capture": "output", "streamer": "output"}
CONNECT_FLAGS = {"retarget": "input", "viewer": "input"}
# relative mount sources that are made at deploy time, not shipped: reason
GENERATED_MOUNTS = {"./keys": "CURVE keys: `mocapline keys keys` (deploy/compose.curve.yml)"}


# --- compose-file reading, as docker compose does it ------------------------------------------------

def read_env_file(path: Path) -> dict[str, str]:
    """docker compose's .env: KEY=VALUE lines, # comments, optional quotes."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not KEY=VALUE: {raw!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0]
        out[key.strip()] = value
    return out


_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class MissingVariable(KeyError):
    pass


def interpolate(text: str, env: dict[str, str], unset: set[str]) -> str:
    """Compose's variable substitution: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR?e},
    ${VAR:+r}, ${VAR+r}. Plain references to unset variables are collected in ``unset``."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        value = env.get(name)
        if op is None:
            if value is None:
                unset.add(name)
                return ""
            return value
        if op == ":-":
            return value if value else interpolate(arg, env, unset)
        if op == "-":
            return value if value is not None else interpolate(arg, env, unset)
        if op in (":?", "?"):
            if value is None or (op == ":?" and not value):
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op == ":+":
            return interpolate(arg, env, unset) if value else ""
        return interpolate(arg, env, unset) if value is not None else ""

    return _VAR.sub(repl, text)


def _walk(node: Any, env: dict[str, str], unset: set[str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env, unset)
    if isinstance(node, list):
        return [_walk(n, env, unset) for n in node]
    if isinstance(node, dict):
        return {k: _walk(v, env, unset) for k, v in node.items()}
    return node


def load_compose(path: Path = COMPOSE, env: dict[str, str] | None = None,
                 overrides: list[Path] = ()) -> tuple[dict[str, Any], set[str]]:
    """The compose model with variables substituted (YAML merge keys resolved by PyYAML), merged
    with override files the way compose merges maps; and the set of unset variables used."""
    env = read_env_file(ENV_FILE) if env is None else env
    unset: set[str] = set()
    model = _walk(yaml.safe_load(path.read_text()), env, unset)
    for extra in overrides:
        model = _merge(model, _walk(yaml.safe_load(extra.read_text()), env, unset))
    return model, unset


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(over, list):
        return base + [v for v in over if v not in base]
    return over


def service_env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def depends_on(svc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return deps


# --- Dockerfiles ------------------------------------------------------------------------------------

def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerfile_stages(path: Path) -> dict[str, dict[str, Any]]:
    """Per stage name: its base, ENTRYPOINT (inherited from a parent stage) and COPY sources."""
    stages: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for word, rest in dockerfile_instructions(path):
        if word == "FROM":
            parts = rest.split()
            base = parts[0]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else f"#{len(stages)}"
            parent = stages.get(base)
            current = {"base": base, "entrypoint": parent["entrypoint"] if parent else None, "copies": []}
            stages[name] = current
        elif word == "ENTRYPOINT":
            assert current is not None
            current["entrypoint"] = json.loads(rest)
        elif word in ("COPY", "ADD"):
            assert current is not None
            args = shlex.split(rest)
            flags = [a for a in args if a.startswith("--")]
            paths = [a for a in args if not a.startswith("--")]
            if any(f.startswith("--from=") for f in flags):
                continue  # from another stage or image, not from the build context
            current["copies"].extend(paths[:-1])
    return stages


def dockerignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes; a match on a parent dir counts."""
    result = False
    parts = rel.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat[1:] if neg else pat
        pat = pat.strip("/")
        if any(fnmatch.fnmatch(c, pat) or (pat.startswith("**/") and fnmatch.fnmatch(c.split("/")[-1], pat[3:]))
               for c in candidates):
            result = not neg
    return result


# --- the code's CLI ---------------------------------------------------------------------------------

def command_of(svc: dict[str, Any], base: Path = ROOT) -> list[str]:
    """The argv the container runs: its entrypoint (compose's, else the build target's) + command."""
    entry = svc.get("entrypoint")
    if entry is None:
        build = svc["build"]
        dockerfile = (base / build["context"] / build.get("dockerfile", "Dockerfile")).resolve()
        stages = dockerfile_stages(dockerfile)
        target = build.get("target") or list(stages)[-1]
        entry = stages[target]["entrypoint"]
    entry = shlex.split(entry) if isinstance(entry, str) else list(entry)
    cmd = svc.get("command") or []
    return entry + (shlex.split(cmd) if isinstance(cmd, str) else list(cmd))


# Commands that run another with the same arguments: the capture container's supervisor holds the
# UDP sockets and runs `mocapline capture` (mocapline/tools/pipeline/supervise.py).
SUPERVISED = {"supervise-capture": "capture"}


def mocapline_command(svc: dict[str, Any], base: Path = ROOT) -> list[str]:
    """``command_of``, with a supervisor replaced by the command it runs: what parses the options."""
    argv = command_of(svc, base)
    return [argv[0], SUPERVISED.get(argv[1], argv[1]), *argv[2:]]


def build_parser(subcommand: str) -> argparse.ArgumentParser:
    return importlib.import_module(COMMANDS[subcommand][0]).build_parser()


def env_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """MOCAPLINE_* variable -> its long flag, for every long option of the parser."""
    out = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and action.dest != "help":
            out[ENV_PREFIX + longs[0][2:].upper().replace("-", "_")] = longs[0]
    return out


def parse_with_env(subcommand: str, env: dict[str, str], argv: list[str]) -> argparse.Namespace:
    """Parse as the container would: its MOCAPLINE_* environment, nothing else of ours."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    try:
        for k in saved:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIX)})
        return build_parser(subcommand).parse_args(argv)
    finally:
        for k in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            del os.environ[k]
        os.environ.update(saved)


def tcp_port(endpoint: str) -> int:
    m = re.fullmatch(r"tcp://([^:]+):(\d+)", endpoint)
    assert m, f"not a tcp endpoint: {endpoint}"
    return int(m.group(2))


def health_url(svc: dict[str, Any]) -> str:
    test = svc["healthcheck"]["test"]
    text = " ".join(test) if isinstance(test, list) else test
    urls = re.findall(r"https?://[^\s'\"]+", text)
    assert len(urls) == 1, f"healthcheck should probe one URL: {test}"
    return urls[0]


# --- the model under test ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return read_env_file(ENV_FILE)


@pytest.fixture(scope="module")
def compose(env) -> dict[str, Any]:
    model, unset = load_compose(COMPOSE, env)
    assert not unset, f"variables used in docker-compose.yml but not set in .env: {sorted(unset)}"
    return model


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def parsed(services) -> dict[str, argparse.Namespace]:
    """Each pipeline service's options as its process would see them."""
    out = {}
    for name in PIPELINE:
        argv = mocapline_command(services[name])
        out[name] = parse_with_env(argv[1], service_env(services[name]), argv[2:])
    return out


def test_the_stack_has_every_service(services) -> None:
    expected = {*PIPELINE, "emitter", "nats", "prometheus", "grafana", "otel-collector", "jaeger"}
    assert expected <= set(services), expected - set(services)
    assert services["emitter"].get("profiles") == ["demo"]
    assert "nats" in services["nats"]["image"]
    assert "jaeger" in services["jaeger"]["image"]


def test_every_service_runs_a_real_mocapline_command(services) -> None:
    for name, svc in services.items():
        if "build" not in svc or svc["build"]["context"] != ".":
            continue
        argv = mocapline_command(svc)
        assert argv[0] == "mocapline", (name, argv)
        assert argv[1] in COMMANDS, (name, argv)
        if name in PIPELINE:
            assert argv[1] == name
    assert command_of(services["emitter"])[1] == "emit"


def test_every_mocapline_variable_is_a_flag_and_parses(services) -> None:
    for name, svc in services.items():
        if "build" not in svc or svc["build"]["context"] != ".":
            continue
        argv = mocapline_command(svc)
        known = env_flags(build_parser(argv[1]))
        env = service_env(svc)
        ours = {k for k in env if k.startswith(ENV_PREFIX)}
        assert ours, name
        assert ours <= set(known), f"{name}: no such flag of `mocapline {argv[1]}`: {sorted(ours - set(known))}"
        parse_with_env(argv[1], env, argv[2:])  # types and choices accepted (exits otherwise)


def test_the_emitter_replays_the_bundled_take_in_a_loop(services) -> None:
    svc = services["emitter"]
    args = parse_with_env("emit", service_env(svc), command_of(svc)[2:])
    assert args.demo and args.loop
    from mocapline.tools.emitter.emitter import DEMO_TAKE

    assert DEMO_TAKE.exists() and DEMO_TAKE.is_relative_to(ROOT / "assets")


def test_links_connect_to_what_is_bound(parsed) -> None:
    bound = {tcp_port(getattr(parsed[s], f)): s for s, f in BIND_FLAGS.items()}
    assert len(bound) == len(BIND_FLAGS)
    for svc, flag in CONNECT_FLAGS.items():
        endpoint = getattr(parsed[svc], flag)
        assert urlsplit(endpoint).hostname in ("127.0.0.1", "localhost"), (svc, endpoint)
        assert tcp_port(endpoint) in bound, f"{svc} --{flag} {endpoint}: nothing binds it"
    # the chain, in order
    assert bound[tcp_port(parsed["retarget"].input)] == "capture"
    assert bound[tcp_port(parsed["viewer"].input)] == "streamer"


def test_retarget_scales_without_per_replica_config(services, parsed) -> None:
    """`docker compose up --scale retarget=N`: nothing on retarget is fixed per replica (no
    container name, no fixed port or metrics port); each is a worker named at start-up that binds a
    free port and announces it, and serves /metrics on a port the system picks (the auditor tells
    Prometheus); capture fans out, the streamer fans in, NATS keeps the assignment (JetStream)."""
    svc, ret = services["retarget"], parsed["retarget"]
    assert "container_name" not in svc and "ports" not in svc
    assert ret.worker == "auto" and ret.metrics_port == AUTO_PORT and ret.state_dir is not None
    assert parsed["auditor"].sd_port > 0
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\*", ret.output), ret.output
    assert parsed["capture"].output_fanout and parsed["streamer"].fan_in
    assert "-js" in services["nats"]["command"]
    assert "retarget.' + name, 'status'" in " ".join(svc["healthcheck"]["test"])


def test_host_network_everywhere(services) -> None:
    """One network mode for all (capture needs the host's); so no `ports:` anywhere."""
    for name, svc in services.items():
        assert svc.get("network_mode") == "host", name
        assert "ports" not in svc, f"{name}: published ports are ignored with host networking"


def test_udp_ports(services, parsed, env) -> None:
    capture_ports = set(parsed["capture"].ports)
    side = parsed["auditor"].side_port
    assert int(env["AXIS_MAIN_PORT"]) in capture_ports
    if side:
        assert side not in capture_ports, "capture and the auditor cannot both own a UDP port on one host"
    emitter = parse_with_env("emit", service_env(services["emitter"]), [])
    dests = [int(d.rpartition(":")[2]) for d in emitter.dest]
    assert dests[0] == int(env["AXIS_MAIN_PORT"]) and dests[1] == int(env["AXIS_SIDE_PORT"])
    assert set(dests) <= capture_ports | {side}, "the emitter sends where nobody listens"
    assert {int(env["AXIS_MAIN_PORT"]), int(env["AXIS_SIDE_PORT"])} <= capture_ports | {side}


def _collector_config(services) -> dict[str, Any]:
    svc = services["otel-collector"]
    text = (ROOT / "deploy" / "otel-collector.yml").read_text()
    env = service_env(svc)
    missing = [v for v in re.findall(r"\$\{env:([A-Za-z_0-9]+)\}", text) if v not in env]
    assert not missing, f"deploy/otel-collector.yml uses variables compose does not pass: {missing}"
    return yaml.safe_load(re.sub(r"\$\{env:([A-Za-z_0-9]+)\}", lambda m: env[m.group(1)], text))


def _port_of(hostport: str) -> int:
    return int(str(hostport).rpartition(":")[2])


def tcp_ports_bound(services, parsed) -> dict[str, set[int]]:
    """Every TCP port each service listens on (all on the host, with host networking)."""
    out: dict[str, set[int]] = {}
    for name in PIPELINE:
        a = parsed[name]
        ports = {a.metrics_port} - {0}
        if name in BIND_FLAGS:
            ports.add(tcp_port(getattr(a, BIND_FLAGS[name])))
        if name == "viewer" and a.display == "web":
            ports.add(a.web_port)
        out[name] = ports
    cmd = services["nats"]["command"]
    out["nats"] = {int(cmd[cmd.index("--port") + 1]), int(cmd[cmd.index("--http_port") + 1])}
    prom = services["prometheus"]["command"]
    out["prometheus"] = {_port_of(next(c for c in prom if c.startswith("--web.listen-address=")))}
    out["grafana"] = {int(service_env(services["grafana"])["GF_SERVER_HTTP_PORT"])}
    col = _collector_config(services)
    out["otel-collector"] = {
        _port_of(col["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]),
        _port_of(col["receivers"]["otlp"]["protocols"]["http"]["endpoint"]),
        _port_of(col["extensions"]["health_check"]["endpoint"]),
        *(int(r["pull"]["exporter"]["prometheus"]["port"]) for r in col["service"]["telemetry"]["metrics"]["readers"]),
    }
    jaeger = service_env(services["jaeger"])
    out["jaeger"] = {_port_of(v) for k, v in jaeger.items() if k.endswith("_HOST_PORT")}
    return out


def test_no_two_services_bind_the_same_port(services, parsed) -> None:
    seen: dict[int, str] = {}
    for name, ports in tcp_ports_bound(services, parsed).items():
        for port in ports:
            assert port not in seen, f"TCP {port}: {seen.get(port)} and {name}"
            seen[port] = name


def test_healthchecks_probe_a_port_the_service_binds(services, parsed) -> None:
    bound = tcp_ports_bound(services, parsed)
    for name, svc in services.items():
        hc = svc.get("healthcheck")
        assert hc is not None, f"{name} has no healthcheck"
        if hc.get("disable"):
            assert name == "emitter", f"{name}: only the emitter (no port of its own) may go unchecked"
            continue
        if name in ("retarget", "sim"):  # no port of its own to probe: asked over NATS
            continue
        url = health_url(svc)
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1", url
        assert parts.port in bound[name], f"{name}: healthcheck {url} probes a port it does not bind"
        if name in PIPELINE:
            assert url == f"http://127.0.0.1:{parsed[name].metrics_port}/metrics"
            test = svc["healthcheck"]["test"]
            assert test[:3] == ["CMD", "python", "-c"], "the slim image has no curl: python's urllib"


def test_metrics_bind_where_the_env_file_says(services, parsed, env) -> None:
    """A service's /metrics binds loopback unless told (mocapline/core/metrics.py); compose tells
    every one METRICS_BIND, the address Prometheus scrapes (loopback: it runs on this host)."""
    from mocapline.core.metrics import DEFAULT_HOST

    assert DEFAULT_HOST == "127.0.0.1"
    for name in PIPELINE:
        if name in parsed:
            assert service_env(services[name]).get("MOCAPLINE_METRICS_HOST") == env["METRICS_BIND"], name
            assert parsed[name].metrics_host == env["METRICS_BIND"], name


def test_depends_on_targets_exist_and_are_healthchecked(services) -> None:
    for name, svc in services.items():
        for target, spec in depends_on(svc).items():
            assert target in services, f"{name} depends on unknown {target}"
            assert spec.get("condition") == "service_healthy", (name, target)
            hc = services[target].get("healthcheck") or {}
            assert hc and not hc.get("disable"), f"{name} waits for {target}, which has no healthcheck"
            assert "demo" not in (services[target].get("profiles") or []), f"{name} needs {target} (demo only)"
    # the pipeline waits for NATS; each stage for the one it reads from
    for name in PIPELINE:
        assert "nats" in depends_on(services[name])
    assert "capture" in depends_on(services["retarget"])
    assert "retarget" in depends_on(services["streamer"])
    assert "streamer" in depends_on(services["viewer"])


def test_capture_can_raise_its_priority(services) -> None:
    svc = services["capture"]
    assert "SYS_NICE" in svc.get("cap_add", [])
    stages = dockerfile_stages(ROOT / "Dockerfile")
    users = [rest for word, rest in _stage_instructions(ROOT / "Dockerfile", "capture") if word == "USER"]
    assert users and users[-1] == "root", "an added capability is only effective for root in the container"
    assert stages["capture"]["entrypoint"] == ["mocapline", "supervise-capture"]


def test_capture_runs_under_the_supervisor_that_holds_its_sockets(services) -> None:
    """A capture that dies in its container is restarted by the supervisor on the same sockets
    (tests/test_compose_engine.py kills it under a real engine); the supervisor takes every
    option of capture and passes it on."""
    from mocapline.tools.pipeline import supervise

    assert command_of(services["capture"])[1] == "supervise-capture"
    assert COMMANDS["supervise-capture"][0] == supervise.__name__
    assert env_flags(supervise.build_parser()) == env_flags(build_parser("capture"))


def _stage_instructions(path: Path, stage: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    inside = False
    for word, rest in dockerfile_instructions(path):
        if word == "FROM":
            inside = rest.split()[-1] == stage
        elif inside:
            out.append((word, rest))
    return out


def test_every_install_runs_as_the_user_that_owns_the_venv() -> None:
    """The venv is created as root; a `pip install` after `USER mocapline` (inherited through the
    parent stages too) fails with EACCES on the engine only, which the CI's engine stage met."""
    user_of: dict[str, str] = {}
    current = ""
    bad = []
    for word, rest in dockerfile_instructions(ROOT / "Dockerfile"):
        if word == "FROM":
            parts = rest.split()
            current = parts[2] if len(parts) >= 3 else parts[0]
            user_of[current] = user_of.get(parts[0], "root")
        elif word == "USER":
            user_of[current] = rest.split(":")[0]
        elif word == "RUN" and "pip install" in rest and user_of[current] != "root":
            bad.append((current, user_of[current], rest[:60]))
    assert user_of["robot"] == "mocapline" and user_of["light"] == "mocapline"
    assert not bad, bad


def _build_dockerfiles(services) -> list[tuple[Path, Path]]:
    out = set()
    for svc in services.values():
        if "build" in svc:
            ctx = (ROOT / svc["build"]["context"]).resolve()
            out.add((ctx, (ctx / svc["build"].get("dockerfile", "Dockerfile")).resolve()))
    return sorted(out)


def test_every_dockerfile_copy_source_exists_and_is_not_ignored(services) -> None:
    built = _build_dockerfiles(services)
    assert (ROOT, ROOT / "Dockerfile") in built
    copied = []
    for ctx, dockerfile in built:
        assert dockerfile.exists(), dockerfile
        patterns = dockerignore_patterns(ctx)
        for stage in dockerfile_stages(dockerfile).values():
            for src in stage["copies"]:
                assert list(ctx.glob(src)), f"{dockerfile.name}: COPY {src}: no such path in {ctx}"
                assert not ignored(src, patterns), f"{dockerfile.name}: COPY {src} is excluded by .dockerignore"
                copied.append(src)
    # what the wheel is built from: the package, IK configs and the demo take (mocapline.assets)
    for needed in ("pyproject.toml", "setup.py", "mocapline", "assets"):
        assert needed in copied, needed
    assert not ignored("assets/demo/walk_60hz.mlrec", dockerignore_patterns(ROOT))
    assert ignored("keys/server.key_secret", dockerignore_patterns(ROOT)), "secrets must stay out of images"


def test_every_build_target_exists(services) -> None:
    for name, svc in services.items():
        if "build" in svc and svc["build"].get("target"):
            ctx = ROOT / svc["build"]["context"]
            stages = dockerfile_stages(ctx / svc["build"].get("dockerfile", "Dockerfile"))
            assert svc["build"]["target"] in stages, name


def _mounts(svc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for vol in svc.get("volumes", []):
        if isinstance(vol, dict):
            out.append((vol["source"], vol["target"]))
        else:
            parts = vol.split(":")
            out.append((parts[0], parts[1]))
    return out


def test_durable_services_each_keep_their_state_on_their_own_volume(services, compose) -> None:
    """Durable mode: the four pipeline stages keep logs in MOCAPLINE_STATE_DIR, which must be a
    named volume of their own (a shared one would mix their logs; none would lose them with the
    container)."""
    volumes = {}
    for name in ("capture", "retarget", "streamer", "viewer"):
        state = service_env(services[name]).get("MOCAPLINE_STATE_DIR")
        assert state, f"{name} does not run in durable mode"
        mounted = dict((target, source) for source, target in _mounts(services[name]))
        assert state in mounted and not mounted[state].startswith("."), name
        volumes[name] = mounted[state]
    assert len(set(volumes.values())) == 4
    assert set(volumes.values()) <= set(compose["volumes"])


def test_every_mounted_path_exists(services) -> None:
    """deploy/ files are part of the repository: they must all be there (Prometheus' scrape config
    and Grafana's provisioning included)."""
    referenced = set()
    for name, svc in services.items():
        for source, _target in _mounts(svc):
            if not source.startswith("."):
                continue  # a named volume
            assert source not in GENERATED_MOUNTS, name
            assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            referenced.add(source.rstrip("/"))
    for needed in ("./deploy/prometheus/prometheus.yml", "./deploy/grafana/provisioning",
                   "./deploy/grafana/dashboards", "./deploy/otel-collector.yml", "./deploy/nats/nats.conf"):
        assert needed in referenced, needed


def test_prometheus_scrapes_every_service_where_compose_puts_it(parsed) -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = set()
    for job in config.get("scrape_configs", []):
        for static in job.get("static_configs", []):
            targets.update(static.get("targets", []))
    discovered = {sd["url"] for job in config["scrape_configs"] for sd in job.get("http_sd_configs", [])}
    for name in PIPELINE:
        port = parsed[name].metrics_port
        if port == AUTO_PORT:  # the retarget workers: found through the auditor's service discovery
            assert f"http://127.0.0.1:{parsed['auditor'].sd_port}/targets" in discovered, discovered
            continue
        assert {f"127.0.0.1:{port}", f"localhost:{port}"} & targets, f"prometheus.yml does not scrape {name} :{port}"


def test_grafana_provisioning_matches_the_mounts(services, env) -> None:
    mounts = dict(_mounts(services["grafana"]))
    dashboards_in_container = mounts["./deploy/grafana/dashboards"]
    prov = ROOT / "deploy/grafana/provisioning"
    datasources = [yaml.safe_load(p.read_text()) for p in sorted((prov / "datasources").glob("*.y*ml"))]
    urls = [ds["url"] for doc in datasources for ds in doc.get("datasources", []) if ds.get("type") == "prometheus"]
    assert urls, "no Prometheus datasource provisioned"
    for url in urls:  # host networking: no service names to resolve, Prometheus is on loopback
        parts = urlsplit(url)
        assert parts.hostname in ("127.0.0.1", "localhost") and parts.port == int(env["PROMETHEUS_PORT"]), url
    providers = [yaml.safe_load(p.read_text()) for p in sorted((prov / "dashboards").glob("*.y*ml"))]
    paths = [pr["options"]["path"] for doc in providers for pr in doc.get("providers", [])]
    assert paths, "no dashboard provider provisioned"
    for path in paths:
        assert Path(path).is_relative_to(dashboards_in_container), (
            f"provider reads {path}, mounted at {dashboards_in_container}")
    env_g = service_env(services["grafana"])
    assert env_g["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and env_g["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert list((ROOT / "deploy/grafana/dashboards").glob("*.json")), "no dashboard"


def test_traces_go_collector_to_jaeger(services) -> None:
    col = _collector_config(services)
    http_port = _port_of(col["receivers"]["otlp"]["protocols"]["http"]["endpoint"])
    grpc_port = _port_of(col["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])
    for name in PIPELINE:
        env = service_env(services[name])
        endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        assert endpoint.hostname == "127.0.0.1"
        assert endpoint.port == (grpc_port if protocol == "grpc" else http_port), name
        assert env["OTEL_SERVICE_NAME"] == f"mocapline-{name}"
        from mocapline.core import tracing

        assert tracing.enabled(env), name
    pipeline = col["service"]["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for component in pipeline[kind]:
            assert component in col[kind], f"traces pipeline uses undefined {kind[:-1]} {component}"
    assert "health_check" in col["service"]["extensions"]
    jaeger_env = service_env(services["jaeger"])
    exporter = col["exporters"][pipeline["exporters"][0]]
    assert _port_of(exporter["endpoint"]) == _port_of(jaeger_env["COLLECTOR_OTLP_GRPC_HOST_PORT"])


def test_nats_config_and_url_agree(services, env) -> None:
    from mocapline.core.bus import nats_server_binary, url_host_port

    cmd = services["nats"]["command"]
    port = int(cmd[cmd.index("--port") + 1])
    for name in PIPELINE:
        assert url_host_port(service_env(services[name])["MOCAPLINE_NATS"]) == ("127.0.0.1", port)
    assert service_env(services["nats"]) == {"NATS_TOKEN": env["NATS_TOKEN"]}
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("nats-server not installed")
    for token in ("", "s3cret"):  # the config file is valid with and without a token
        check = subprocess.run([str(binary), "-t", "-c", str(ROOT / "deploy/nats/nats.conf")],
                               env={**os.environ, "NATS_TOKEN": token}, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr


def test_env_file_holds_versions_and_ports(env, compose) -> None:
    for name, svc in compose["services"].items():
        image = svc.get("image", "")
        if "build" not in svc:
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin the version in .env"
    text = "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in COMPOSE.read_text().splitlines())
    # no literal port numbers in the compose file (comments aside): they live in .env
    assert not re.search(r"(?<![\w.$-])(?:5555|5556|5557|7014|7015|8080|9090|3000|4222|16686|910[1-5])(?![\w.])", text)


def test_compose_files_follow_the_compose_specification() -> None:
    """The Compose Specification's JSON schema (tests/data/compose-spec.json, from
    github.com/compose-spec/compose-spec schema/compose-spec.json at 170098b, Apache-2.0): catches
    misspelt or misplaced keys, which docker compose would reject at `up`."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "tests/data/compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    remote = {"MOCAPLINE_NATS": "nats://h:4222"}
    for path, env, overrides in ((COMPOSE, None, []), (COMPOSE, None, [ROOT / "deploy/compose.curve.yml"]),
                                 (COMPOSE, None, [ACROSS]), (ROOT / "deploy/auditor-remote.yml", remote, [])):
        model, _ = load_compose(path, env, overrides)
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(model)]
        assert not errors, f"{path.name}: " + "; ".join(errors[:5])
    # and the validator does reject a misspelt key
    model, _ = load_compose(COMPOSE)
    model["services"]["capture"]["healthcheck"]["intervall"] = "5s"
    assert list(validator.iter_errors(model))


# --- deploy/auditor-remote.yml, deploy/compose.curve.yml, deploy/compose.across.yml ---------------

ACROSS = ROOT / "deploy/compose.across.yml"


def test_across_override_has_machine_b_reach_capture_on_machine_a() -> None:
    env = {**read_env_file(ENV_FILE), "CAPTURE_HOST": "10.0.0.5", "NATS_URL": "nats://10.0.0.5:4222"}
    model, unset = load_compose(COMPOSE, env, [ACROSS])
    assert not unset
    services = model["services"]
    capture = parse_with_env("capture", service_env(services["capture"]), [])
    retarget = parse_with_env("retarget", service_env(services["retarget"]), [])
    assert urlsplit(capture.output).hostname == "0.0.0.0" and capture.output_fanout
    assert retarget.input == f"tcp://10.0.0.5:{tcp_port(capture.output)}"
    assert retarget.nats == "nats://10.0.0.5:4222"
    # the workers stay beside the streamer on B: they announce the loopback they bind
    assert urlsplit(retarget.output.replace("*", "0")).hostname == "127.0.0.1"
    # the commands in the file's header name services that exist
    header = ACROSS.read_text().split("services:")[0]
    for names in re.findall(r"up -d(?: --no-deps)? ([a-z ]+)", header):
        assert set(names.split()) <= set(services), names


def test_remote_auditor_needs_only_the_nats_url_and_the_side_port() -> None:
    path = ROOT / "deploy/auditor-remote.yml"
    with pytest.raises(MissingVariable):
        load_compose(path, {})
    model, unset = load_compose(path, {"MOCAPLINE_NATS": "nats://tok@10.0.0.5:4222"})
    assert not unset
    assert list(model["services"]) == ["auditor"]
    svc = model["services"]["auditor"]
    assert command_of(svc, base=path.parent)[:2] == ["mocapline", "auditor"]
    env = service_env(svc)
    args = parse_with_env("auditor", env, [])
    assert args.nats == "nats://tok@10.0.0.5:4222" and args.side_port == 7015
    assert svc["network_mode"] == "host"
    assert health_url(svc) == f"http://127.0.0.1:{args.metrics_port}/metrics"
    assert not svc.get("depends_on") and not svc.get("volumes")
    # nothing else is required: the only variable without a default is the NATS URL
    required = set(re.findall(r"\$\{([A-Z_]+)(?::?\?)", path.read_text()))
    assert required == {"MOCAPLINE_NATS"}
    model2, _ = load_compose(path, {"MOCAPLINE_NATS": "nats://h:4222", "MOCAPLINE_SIDE_PORT": "7099"})
    assert parse_with_env("auditor", service_env(model2["services"]["auditor"]), []).side_port == 7099


def test_curve_override_points_at_the_files_mocapline_keys_writes(tmp_path, env) -> None:
    from mocapline.core.keys import generate

    model, unset = load_compose(COMPOSE, env, overrides=[ROOT / "deploy/compose.curve.yml"])
    assert not unset
    svcs = model["services"]
    generate(tmp_path, ["viewer"])
    for name, subcommand in (("streamer", "streamer"), ("viewer", "viewer")):
        svc = svcs[name]
        mounts = dict(_mounts(svc))
        assert mounts.get("./keys") == "/keys" and svc["network_mode"] == "host"
        e = service_env(svc)
        args = parse_with_env(subcommand, e, [])
        paths = [v for k, v in e.items() if k.startswith("MOCAPLINE_CURVE_")]
        assert len(paths) == 2
        assert sorted(paths) == sorted(v for k, v in vars(args).items() if k.startswith("curve_"))
        for p in paths:
            assert (tmp_path / Path(p).relative_to("/keys")).exists(), p
    assert parse_with_env("streamer", service_env(svcs["streamer"]), []).curve_server_key == "/keys/server.key_secret"


# --- the same services as plain processes, with the compose environment -----------------------------

PORT_VARS = re.compile(r".*_PORTS?$")


def _free_port_both() -> int:
    """A port free for TCP and UDP on every local address."""
    return free_tcp_port()


def local_env(nats_url: str) -> dict[str, str]:
    """.env with every port moved to a free one (the same port number maps to the same new port)
    and every address on loopback, for running the stack's services side by side with others."""
    env = read_env_file(ENV_FILE)
    remap: dict[str, str] = {}
    for key, value in env.items():
        if PORT_VARS.match(key) and value and all(v.isdigit() for v in value.split()):
            env[key] = " ".join(remap.setdefault(v, str(_free_port_both())) if v != "0" else v for v in value.split())
    env.update(UI_BIND="127.0.0.1", NATS_URL=nats_url, LOG_LEVEL="WARNING")
    return env


@pytest.mark.integration
def test_the_pipeline_services_start_with_the_compose_environment(jetstream_nats, tmp_path) -> None:
    from mocapline.core.bus import request
    from mocapline.services.auditor.audit import audit
    from mocapline.tools.emitter.emitter import TakePlan, emit_take
    from mocapline.tools.pipeline.procs import Service

    nats_server = jetstream_nats  # the compose NATS runs with JetStream (the workers' assignment)
    env = local_env(nats_server.url)
    model, unset = load_compose(COMPOSE, env)
    assert not unset
    svcs = model["services"]
    procs: dict[str, Service] = {}
    logs = {}

    def ask(name: str, cmd: str, timeout: float = 5.0) -> dict[str, Any]:
        if name == "retarget":  # a worker, on NATS under the name it chose (the healthcheck reads it too)
            name = "retarget." + (tmp_path / "mocapline-retarget-worker").read_text()
        return asyncio.run(request(nats_server.url, name, cmd, timeout=timeout))

    envs: dict[str, dict[str, str]] = {}

    try:
        for name in ("auditor", "capture", "retarget", "streamer", "viewer"):
            svc = svcs[name]
            argv = command_of(svc)
            assert argv[0] == "mocapline"
            # The container's environment, minus tracing: no collector runs in the tests.
            penv = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
            penv.update(service_env(svc), OTEL_SDK_DISABLED="true")
            if "MOCAPLINE_STATE_DIR" in penv:  # each container has its own volume there
                assert penv["MOCAPLINE_STATE_DIR"] == "/var/lib/mocapline", name
                penv["MOCAPLINE_STATE_DIR"] = str(tmp_path / "state" / name)
            penv["TMPDIR"] = str(tmp_path)  # the container's own /tmp (the worker writes its name there)
            envs[name] = penv
            logs[name] = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed after the run
            proc = Service(argv[1], argv[2:], {})
            proc.proc = subprocess.Popen([sys.executable, "-m", "mocapline.cli", *argv[1:]], env=penv,
                                         stdout=logs[name], stderr=subprocess.STDOUT, start_new_session=True)
            procs[name] = proc

        def log_of(name: str) -> str:
            return (tmp_path / f"{name}.log").read_text()[-3000:]

        # Up: every service answers a status request over NATS ...
        deadline = time.monotonic() + 120
        pending = set(procs)
        while pending:
            for name in list(pending):
                assert procs[name].proc.poll() is None, f"{name} exited:\n{log_of(name)}"
                try:
                    ask(name, "status", timeout=1.0)
                    pending.discard(name)
                except Exception:  # noqa: BLE001 - not up yet
                    pass
            assert time.monotonic() < deadline, f"not up: {sorted(pending)}"
            time.sleep(0.2)
        # ... and its compose healthcheck command passes, run as docker would run it.
        for name in procs:
            test = svcs[name]["healthcheck"]["test"]
            assert test[0] == "CMD"
            argv = [sys.executable if test[1] == "python" else test[1], *test[2:]]
            check = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=envs[name])
            assert check.returncode == 0, f"{name} healthcheck failed: {check.stderr}"

        # Linked: a take sent to the compose ports goes through every stage and is conserved.
        main, side = int(env["AXIS_MAIN_PORT"]), int(env["AXIS_SIDE_PORT"])
        emit_take(TakePlan(frames=150, first_index=4000), [("127.0.0.1", main), ("127.0.0.1", side)], rate_hz=600)
        finals = {name: ask(name, "drain", timeout=60) for name in ("capture", "retarget", "streamer", "viewer")}
        verdict = audit({"services": finals, "side": ask("auditor", "status").get("side")})
        assert finals["capture"]["source_unique_frames"] == 150
        assert finals["viewer"]["viewer_applied"] == 150
        assert verdict["unique_frames_conserved"] == 1, verdict
        assert verdict["source_missing_indices"] == 0
    finally:
        for proc in procs.values():
            proc.stop()
        for fh in logs.values():
            fh.close()
