"""What a new user meets: the README's quick start run as written (the README parsed, not retyped)
in a fresh copy of the checkout and a fresh venv, `mocapline up --demo` ended with a Ctrl-C, and
the tools on what they wrote (a tap's recording, a retarget-file clip, the demo take), so that a
README or help text that stops being true fails here.

The venv is made with --system-site-packages (the only change to the README's lines: offline and
fast, the dependencies are the machine's), and `pip install -e .` of the copy runs in it; the
apt-get line is not run (no package is installed by a test), only checked to work without sudo.
The pipeline's ports are private ones, given as the MOCAPLINE_* variables every flag reads, so
the commands stay as written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_lifecycle import Terminal

from mocapline.tools.pipeline.procs import free_tcp_port, free_udp_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CMU_TAKE = "assets/motion/cmu_131_02_walk.bvh"


def section(heading: str) -> str:
    """The README's text from the heading to the next heading of its level or above."""
    start = README.index(heading)
    level = heading.split(" ", 1)[0]
    rest = README[start + len(heading):]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


def blocks(text: str, lang: str = "") -> list[str]:
    """The fenced blocks of ``text`` in the language ``lang`` ("": unmarked), in order."""
    out: list[str] = []
    current: list[str] = []
    inside: str | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if inside is None:
                inside, current = line[3:].strip(), []
                continue
            if inside == lang:
                out.append("\n".join(current))
            inside = None
        elif inside is not None:
            current.append(line)
    return out


def commands(block: str) -> list[str]:
    """A shell block's command lines, comments cut."""
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_help_texts_say_what_the_readme_says() -> None:
    """`mocapline --help` listed `bench` as "capture, retarget, e2e" (there were 11) and the
    streamer as "lossless PUSH on tcp 5555" (an acknowledged fan-out); `up --help` called the
    retarget -> streamer link `--robot-port`, while the README calls 5555 the robot port."""
    from mocapline.bench.cli import BENCHMARKS
    from mocapline.cli import COMMANDS
    from mocapline.tools.pipeline.up import build_parser

    assert COMMANDS["bench"][1] == "benchmarks: " + ", ".join(BENCHMARKS) and len(BENCHMARKS) == 13
    assert "acknowledged fan-out" in COMMANDS["streamer"][1] and "PUSH" not in COMMANDS["streamer"][1]
    options = {o: a for a in build_parser()._actions for o in a.option_strings}
    assert "--robot-port" not in options
    assert options["--output-port"].default == 5555 and options["--output-port"].help.startswith("the robot port")
    assert "not the robot port" in options["--retarget-port"].help
    assert "tcp 5555 binds on 127.0.0.1" in section("### Robots and other consumers: the robot port")


def fresh_copy(dst: Path) -> None:
    """The checkout as a clone would have it: what git tracks, and what it would add."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def run(venv: Path, work: Path, env: dict[str, str], line: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """One README-style command line in bash, the venv active."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", f". {venv}/bin/activate && {line}"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=timeout)


def sample_pattern(line: str) -> re.Pattern[str]:
    """A README sample line as a pattern: its numbers any numbers, its ``...`` anything."""
    parts = re.split(r"(\d+|\.\.\.)", line.strip())
    return re.compile("".join(r"\d+" if p.isdigit() else ".*" if p == "..." else re.escape(p) for p in parts) + "$")


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_quick_start_as_written_then_the_tools_on_what_they_wrote(tmp_path: Path) -> None:
    quick = section("## Quick start")
    setup, tests_line = (commands(b) for b in blocks(quick, "sh")[:2])
    apt, make_venv, start = setup
    assert apt.startswith("$(command -v sudo) apt-get install "), apt  # as root without sudo too
    assert make_venv == "python3 -m venv .venv && . .venv/bin/activate"
    assert start == "pip install -e . && mocapline up --demo"
    work, scratch = tmp_path / "clone", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    fresh_copy(work)
    udp, tcp = [free_udp_port() for _ in range(2)], [free_tcp_port() for _ in range(6)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCAPLINE_") and k != "PYTHONPATH"}
    env.update(PATH=f"{Path(sys.executable).parent}:{env['PATH']}", TMPDIR=str(scratch),
               MOCAPLINE_MAIN_PORT=str(udp[0]), MOCAPLINE_SIDE_PORT=str(udp[1]),
               MOCAPLINE_OUTPUT_PORT=str(tcp[0]), MOCAPLINE_HUMAN_PORT=str(tcp[1]),
               MOCAPLINE_RETARGET_PORT=str(tcp[2]), MOCAPLINE_WEB_PORT=str(tcp[3]),
               MOCAPLINE_NATS=f"nats://127.0.0.1:{tcp[4]}", MOCAPLINE_METRICS_PORT="0")
    venv = work / ".venv"

    # The quick start: the venv, then `pip install -e . && mocapline up --demo` until a Ctrl-C.
    script = make_venv.replace("-m venv .venv", "-m venv --system-site-packages .venv") + "\n" + start
    term = Terminal.start_command(["bash", "--noprofile", "--norc", "-c", script], cwd=work, env=env)
    term.wait_for("verdict: running", timeout=240)
    assert str(work) in run(venv, work, env, "python3 -c 'import mocapline; print(mocapline.__file__)'").stdout
    # a robot port consumer beside the viewer, recording, that leaves mid-take (docs: tap --record)
    tap = subprocess.Popen([str(venv / "bin" / "mocapline"), "tap", "--endpoint", f"tcp://127.0.0.1:{tcp[0]}",
                            "--name", "newcomer", "--record", "take.mltap", "--quiet"], cwd=work, env=env,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ((work / "take.mltap").is_file() and (work / "take.mltap").stat().st_size > 200_000):
        assert time.monotonic() < deadline and tap.poll() is None, tap.stderr.read() if tap.stderr else ""
        term.read(0.5)
    tap.send_signal(signal.SIGINT)
    assert tap.wait(30) == 0
    term.read(2.0)
    term.ctrl_c()
    assert term.finish(120) == 0, term.text
    shown = term.text.replace("\r", "")
    assert "Traceback" not in shown, shown
    assert "state                     conserved" in shown and "consumers_behind" in shown, shown
    assert "newcomer" in shown.split("consumers_behind", 1)[1].splitlines()[0]
    assert not list(scratch.glob("mocapline-*")), "the run folder of a clean exit is left behind"

    # What the README shows of it is what it printed: the start-up lines, and the ledger's fields
    # in the order it prints them.
    out = shown.replace(str(scratch), "/tmp").splitlines()  # the README's run folder is under /tmp
    startup, ledger = blocks(quick)[:2]  # the README's samples of the start-up lines and the final ledger
    for line in (ln for ln in startup.splitlines() if ln.startswith("mocapline: ")):
        pattern = sample_pattern(line)
        assert any(pattern.match(real) for real in out), f"README: {line!r}\nprinted:\n{shown}"
    sample_keys = [ln.split()[0] for ln in ledger.splitlines() if re.match(r"^[a-z_]+( |$)", ln)]
    printed = [ln.split()[0] for ln in out if re.match(r"^[a-z_]+( |$)", ln)]
    it = iter(printed)
    assert all(key in it for key in sample_keys), f"README's ledger {sample_keys} against {printed}"

    # The tools on what was written: the tap's recording, a retarget-file clip, the demo take.
    def ok(line: str) -> str:
        done = run(venv, work, env, line)
        assert done.returncode == 0, f"{line}: {done.returncode}\n{done.stderr}"
        return done.stdout

    summary = json.loads(ok("mocapline inspect take.mltap").splitlines()[-1])["frames"]
    assert summary["frames"] > 0 and summary["latency_ms"]["of"] == "capture -> tap received"
    plots = json.loads(ok("mocapline plot take.mltap"))
    assert {Path(p).name for p in plots["plots"]} == {"joints.png", "root.png", "latency.png", "timeline.png"}
    assert all(Path(p).parent == work / "take_plots" for p in plots["plots"])
    assert json.loads(ok("mocapline export take.mltap --on-gap flag"))["npz"] == str(work / "take.npz")
    refused = run(venv, work, env, "mocapline replay take.mltap")
    assert refused.returncode == 2 and "`mocapline export` read it" in refused.stderr, refused.stderr
    before = sorted((work / "assets" / "motion").iterdir())
    clip = json.loads(ok(f"mocapline retarget-file {CMU_TAKE} --csv --frames 60 --no-progress").splitlines()[-1])
    assert clip["npz"] == str(work / "cmu_131_02_walk.npz") and (work / "cmu_131_02_walk.csv").is_file()
    assert sorted((work / "assets" / "motion").iterdir()) == before  # nothing beside the take
    assert "clip" in json.loads(ok("mocapline inspect cmu_131_02_walk.npz").splitlines()[-1])
    assert "latency" in json.loads(ok("mocapline plot cmu_131_02_walk.npz"))
    demo = json.loads(ok("mocapline plot assets/demo/walk_60hz.mlrec"))
    assert not (work / "walk_60hz_plots" / "latency.png").exists() and "latency" in demo
    assert "bench" in ok("mocapline --help") and "lowcmd" in ok("mocapline --help")

    # The tests' line: its install as written, its test command on one file (the suite is CI's).
    [install_and_test] = tests_line
    assert install_and_test == "pip install -e '.[dev]' && python3 -m pytest -q"
    ok(f"{install_and_test} tests/test_options.py")
