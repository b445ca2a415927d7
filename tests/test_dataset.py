"""`mocapline retarget-dataset`: the manifest's commit and adoption, the plan of a rerun, bad
takes recorded by reason, the trainer formats read back by loaders written from their layouts,
and (integration) a folder of 200+ takes killed -9 half-way and finished, the same on Ray."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import wait_until

from mocapline.core import quat as Q
from mocapline.core.paths import ASSETS_DIR, DEMO_TAKE
from mocapline.formats.bvh import format_bvh, load_bvh
from mocapline.formats.trainer import parse_formats, write_beyondmimic_csv, write_gmr_pickle
from mocapline.tools.dataset.cli import build_parser, discover, plan
from mocapline.tools.dataset.manifest import DONE, FAILED, Manifest, settings_hash, sha256_bytes
from mocapline.tools.dataset.task import TakeTask, run_task
from mocapline.tools.retarget_file import FileSettings, convert

MOTION = ASSETS_DIR / "motion"
TAKES = sorted(MOTION.glob("*.bvh"))
REPO = Path(__file__).resolve().parents[1]


def cropped(path: Path, frames: int = 12) -> str:
    return format_bvh(load_bvh(path).slice(0, frames))


# Broken files of each kind, and the reason each must be recorded with.
BROKEN = {
    "empty.bvh": (lambda good: "", "not a BVH file"),
    "garbage.bvh": (lambda good: "this is not motion\n", "not a BVH file"),
    "truncated.bvh": (lambda good: good[: len(good) // 2], "truncated"),
    "no_motion.bvh": (lambda good: good[: good.index("MOTION")], "MOTION"),
    "unknown_skeleton.bvh": (lambda good: good.replace("Left", "Port").replace("Right", "Star"), "skeleton fits"),
    "fake.mlrec": (lambda good: "MLREC\0\0\0 nothing recorded", "recording"),
}


def make_folder(root: Path, copies: int, frames: int = 12) -> tuple[int, dict[str, str]]:
    """``copies`` of each bundled take (cropped) under other names, and the broken files; the
    number of good takes and the broken takes' ids -> expected reason."""
    texts = {p.stem: cropped(p, frames) for p in TAKES}
    for i in range(copies):
        sub = root / f"batch_{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        for stem, text in texts.items():
            (sub / f"{stem}_copy{i:03d}.bvh").write_text(text)
    good = next(iter(texts.values()))
    broken = {}
    for name, (make, reason) in BROKEN.items():
        (root / name).write_text(make(good))
        broken[Path(name).stem] = reason
    return copies * len(texts), broken


def _task(path: Path, take: str = "t", **kw) -> TakeTask:
    return TakeTask(take, str(path), "mlrec" if path.suffix == ".mlrec" else "bvh", "sha", "settings",
                    FileSettings(**kw), ("npz",))


# -- the manifest -------------------------------------------------------------------------------


def test_a_commit_places_outputs_then_the_record(tmp_path) -> None:
    m = Manifest(tmp_path)
    m.commit({"take": "a/b", "status": DONE}, {"a/b.npz": b"one", "a/b.csv": b"two"})
    assert (tmp_path / "a/b.npz").read_bytes() == b"one" and (tmp_path / "a/b.csv").read_bytes() == b"two"
    record = m.get("a/b")
    assert record is not None and record["outputs"]["a/b.npz"] == sha256_bytes(b"one")
    assert not list(tmp_path.rglob("*.pending")) and not list(tmp_path.rglob("*.tmp-*"))
    assert m.get("other") is None


def test_a_pending_record_is_adopted_only_when_every_output_landed(tmp_path) -> None:
    """The driver killed between placing the outputs and the record: the take is done (not redone)
    when all its outputs are there with the recorded hashes; otherwise it is redone."""
    m = Manifest(tmp_path)
    m.folder.mkdir()
    for take, landed in (("whole", {"whole.npz": b"x", "whole.csv": b"y"}), ("half", {"half.npz": b"x"})):
        outputs = {f"{take}.npz": sha256_bytes(b"x"), f"{take}.csv": sha256_bytes(b"y")}
        m.path(take, ".pending").write_text(json.dumps({"take": take, "status": DONE, "outputs": outputs}))
        for rel, data in landed.items():
            (tmp_path / rel).write_bytes(data)
    assert m.get("whole") is not None and m.path("whole").is_file()
    assert m.get("half") is None
    (tmp_path / "half.csv").write_bytes(b"not what was recorded")
    assert m.get("half") is None


def test_temporaries_of_a_killed_run_are_removed(tmp_path) -> None:
    """A half-written output, and the folder where the pool's results waited (two in it)."""
    from mocapline.tools.dataset.engine import STAGING_PREFIX

    (tmp_path / "x.npz.tmp-12-1").write_bytes(b"half")
    (tmp_path / "x.npz").write_bytes(b"whole")
    staging = tmp_path / "manifest" / f"{STAGING_PREFIX}abc"
    staging.mkdir(parents=True)
    (staging / "7-0.result").write_bytes(b"a result")
    (staging / "7-1.result").write_bytes(b"half a result")
    (tmp_path / "manifest" / "take.json").write_text("{}")
    assert Manifest(tmp_path).clean_temporaries() == 3
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "manifest", "manifest/take.json", "x.npz"]


def test_a_rerun_skips_what_is_done_and_redoes_what_changed(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a", "b", "c", "d"):
        (src / f"{name}.bvh").write_text(name)
    m = Manifest(tmp_path / "out")
    m.folder.mkdir(parents=True)
    from mocapline.tools.dataset.manifest import sha256_file

    digest = {n: sha256_file(src / f"{n}.bvh") for n in "abcd"}
    m.commit({"take": "a", "status": DONE, "source_sha256": digest["a"], "settings_hash": "S"}, {})
    m.commit({"take": "b", "status": DONE, "source_sha256": "an older b", "settings_hash": "S"}, {})
    m.commit({"take": "c", "status": DONE, "source_sha256": digest["c"], "settings_hash": "older settings"}, {})
    m.commit({"take": "d", "status": FAILED, "source_sha256": digest["d"], "settings_hash": "S"}, {})
    takes, notes = discover([src])
    assert [t[0] for t in takes] == ["a", "b", "c", "d"] and not notes
    args = build_parser().parse_args([str(src), "--out", str(tmp_path / "out")])
    todo, kept = plan(m, takes, FileSettings(), "S", ("npz",), args)
    assert [t.take for t in todo] == ["b", "c"] and [r["take"] for r in kept] == ["a", "d"]
    args.retry_failed = True
    todo, _ = plan(m, takes, FileSettings(), "S", ("npz",), args)
    assert [t.take for t in todo] == ["b", "c", "d"]


def test_takes_are_found_below_their_sources_but_not_in_the_output(tmp_path) -> None:
    (tmp_path / "src/manifest/deep").mkdir(parents=True)
    (tmp_path / "src/out").mkdir()
    for rel in ("a.bvh", "manifest/deep/b.BVH", "c.mlrec", "notes.txt", "out/d.bvh"):
        (tmp_path / "src" / rel).write_text("x")
    (tmp_path / "e.bvh").write_text("x")
    takes, notes = discover([tmp_path / "src", tmp_path / "e.bvh", tmp_path / "missing"], tmp_path / "src/out")
    assert [(t, k) for t, _, k in takes] == [("a", "bvh"), ("c", "mlrec"), ("manifest/deep/b", "bvh"), ("e", "bvh")]
    assert notes == [f"{tmp_path / 'missing'}: no such file or folder"]
    _, notes = discover([tmp_path / "src", tmp_path / "src"])
    assert len(notes) == 4 and "same output name" in notes[0]


def test_a_take_whose_ik_misses_its_targets_is_recorded_as_diverged(tmp_path) -> None:
    path = tmp_path / "t.bvh"
    path.write_text(cropped(TAKES[0]))
    task = TakeTask("t", str(path), "bvh", "sha", "settings", FileSettings(), ("npz", "gmr-pkl"), max_err_mm=1.0)
    result = run_task(task)
    assert result.record["status"] == FAILED and result.record["reason"].startswith("IK diverged: mean position error")
    assert set(result.outputs) == {"t.npz", "t.pkl"}  # written all the same, for a look


def test_a_recorded_take_follows_the_footing_settings_as_a_bvh_does() -> None:
    """A .mlrec is retargeted by export's path: --no-footing reaches it (the settings hash changes
    with it, so the output must too)."""
    clips = {}
    for footing in (True, False):
        result = run_task(_task(DEMO_TAKE, footing=footing))
        assert result.record["status"] == DONE, result.record
        assert result.record["frames"] == 1200 and result.record["samples"] == 1000  # 20 s at 60 Hz, at 50 Hz
        with np.load(io.BytesIO(result.outputs["t.npz"])) as z:
            clips[footing] = z["q"].copy()
    assert clips[True].shape == clips[False].shape
    assert np.abs(clips[True] - clips[False]).max() > 1e-3


def test_the_quality_report_gives_each_body_groups_mean_and_p99(tmp_path) -> None:
    """A take's record and DIR/quality.json carry the mean and the p99 position error of every body
    group (hands, feet, pelvis, the rest), per take and over the dataset."""
    from mocapline.services.retarget.quality import GROUPS
    from mocapline.tools.dataset.report import FIGURES, quality_report

    path = tmp_path / "t.bvh"
    path.write_text(cropped(TAKES[0], 30))
    record = run_task(_task(path)).record
    assert record["status"] == DONE, record
    quality = record["quality"]
    for g in GROUPS:
        assert {f"{g}_mm", f"{g}_p99_mm"} <= set(FIGURES), g
        assert 0 < quality[f"{g}_mm"] <= quality[f"{g}_p99_mm"], (g, quality)
    assert len({quality[f"{g}_p99_mm"] for g in GROUPS} | {quality["err_p99_mm"]}) > 1  # each group's own
    report = quality_report([record, {**record, "take": "u"}])
    assert report["takes"]["t"]["pelvis_p99_mm"] == quality["pelvis_p99_mm"]
    assert report["dataset"]["hands_p99_mm"]["max"] == quality["hands_p99_mm"]


def test_ray_asked_for_without_ray_is_refused_with_what_to_install(tmp_path, monkeypatch, capsys) -> None:
    from mocapline.tools.dataset import cli

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    (tmp_path / "a.bvh").write_text(cropped(TAKES[0]))
    assert cli.main([str(tmp_path / "a.bvh"), "--out", str(tmp_path / "out"), "--ray", "auto"]) == 2
    assert "pip install 'mocapline[cluster]'" in capsys.readouterr().err


def test_formats_are_checked() -> None:
    assert parse_formats("npz, gmr-pkl,npz") == ("npz", "gmr-pkl")
    with pytest.raises(ValueError, match="unknown format.*choose from npz, gmr-pkl, beyondmimic-csv"):
        parse_formats("npz,mimickit")


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_bad_take_is_a_failed_record_with_its_reason(tmp_path, name) -> None:
    make, reason = BROKEN[name]
    path = tmp_path / name
    path.write_text(make(cropped(TAKES[0])))
    result = run_task(_task(path))
    assert result.record["status"] == FAILED and reason in result.record["reason"] and not result.outputs


def test_an_unknown_skeleton_is_refused_with_its_unmapped_bones_and_the_command(tmp_path) -> None:
    path = tmp_path / "odd.bvh"
    path.write_text(cropped(TAKES[0]).replace("Left", "Port").replace("Right", "Star"))
    reason = run_task(_task(path)).record["reason"]
    assert "PortUpLeg" in reason or "PortHip" in reason, reason
    assert f"mocapline skeleton-config {path}" in reason


def test_progress_is_a_bar_on_a_terminal_and_a_line_per_take_otherwise() -> None:
    from mocapline.tools.dataset.cli import Progress
    from mocapline.tools.dataset.task import TakeResult

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    results = [TakeResult({"take": "a", "status": DONE, "frames": 100}),
               TakeResult({"take": "b", "status": FAILED, "reason": "not a BVH file"})]
    lines, bar = io.StringIO(), Terminal()
    for stream in (lines, bar):
        progress = Progress(2, "auto", stream)
        for r in results:
            progress.update(r)
    assert lines.getvalue().count("\n") == 2 and "b: FAILED: not a BVH file" in lines.getvalue()
    assert "2/2 takes, 100 frames" in lines.getvalue() and "1 failed" in lines.getvalue()
    assert bar.getvalue().startswith("\r[") and bar.getvalue().endswith("1 failed\n") and "ETA" in bar.getvalue()


# -- the trainer formats, read back by loaders written from their layouts ----------------------


def load_gmr_pickle(data: bytes) -> dict:
    """As GMR's consumers read a motion pickle: a dict, root_rot x y z w."""
    motion = pickle.loads(data)
    assert set(motion) == {"fps", "root_pos", "root_rot", "dof_pos", "local_body_pos", "link_body_list"}
    return motion


def load_beyondmimic_csv(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """As csv_to_npz reads it: loadtxt, columns 0:3 position, 3:7 x y z w, 7: joints."""
    motion = np.loadtxt(io.BytesIO(data), delimiter=",")
    return motion[:, :3], motion[:, 3:7][:, [3, 0, 1, 2]], motion[:, 7:]


@pytest.fixture(scope="module")
def clip() -> dict[str, np.ndarray]:
    return convert(TAKES[-1], FileSettings(frames=30)).clip


def test_the_gmr_pickle_holds_the_clip_in_gmr_layout(clip) -> None:
    buf = io.BytesIO()
    write_gmr_pickle(buf, clip)
    motion = load_gmr_pickle(buf.getvalue())
    assert motion["fps"] == 50.0 and motion["dof_pos"].shape == clip["q"].shape
    np.testing.assert_array_equal(motion["root_pos"], clip["root_pose"][:, :3])
    np.testing.assert_array_equal(motion["root_rot"][:, [3, 0, 1, 2]], clip["root_pose"][:, 3:7])  # xyzw
    assert motion["link_body_list"] == [str(n) for n in clip["body_names"]] and motion["link_body_list"][0] == "pelvis"
    local = motion["local_body_pos"]
    assert local.shape == clip["body_pos_w"].shape
    np.testing.assert_allclose(local[:, 0], 0.0, atol=1e-9)  # the root in its own frame
    rot = np.repeat(clip["root_pose"][:, None, 3:7], local.shape[1], axis=1)
    world = Q.rotate(rot, local) + clip["root_pose"][:, None, :3]
    np.testing.assert_allclose(world, clip["body_pos_w"], atol=1e-9)


def test_the_beyondmimic_csv_has_its_columns_in_the_robots_joint_order(clip) -> None:
    buf = io.BytesIO()
    write_beyondmimic_csv(buf, clip)
    assert not buf.getvalue().startswith(b"time")  # no header: loadtxt reads every row
    pos, quat_wxyz, joints = load_beyondmimic_csv(buf.getvalue())
    assert joints.shape == clip["q"].shape == (len(clip["time"]), 29)
    np.testing.assert_allclose(pos, clip["root_pose"][:, :3], atol=1e-8)
    np.testing.assert_allclose(quat_wxyz, clip["root_pose"][:, 3:7], atol=1e-8)
    np.testing.assert_allclose(joints, clip["q"], atol=1e-8)
    assert str(clip["joint_names"][0]) == "left_hip_pitch_joint" and str(clip["joint_names"][12]) == "waist_yaw_joint"


# -- whole runs ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mocapline.cli", "retarget-dataset", *args]


def _records(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (out / "manifest").glob("*.json")}


@pytest.mark.integration
def test_a_dataset_killed_half_way_finishes_with_nothing_done_twice_and_nothing_lost(tmp_path) -> None:
    src, out = tmp_path / "takes", tmp_path / "dataset"
    good, broken = make_folder(src, copies=50)
    total = good + len(broken)
    assert total >= 200
    args = (str(src), "--out", str(out), "--workers", "2", "--format", "npz,gmr-pkl,beyondmimic-csv",
            "--progress", "lines")
    driver = subprocess.Popen(_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
    assert driver.stderr is not None
    lines = 0
    deadline = time.monotonic() + 240
    while lines < 60 and time.monotonic() < deadline:
        line = driver.stderr.readline()
        assert line, "the driver ended before it was killed"
        lines += " takes, " in line
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    manifest = Manifest(out)  # the workers write nothing (the driver places every file): nothing lands after this
    done_before = sum(manifest.get(t) is not None for t, _, _ in discover([src])[0])
    assert 60 <= done_before < total
    before = _records(out)

    rerun = subprocess.run(_cmd(*args), capture_output=True, text=True, env=_env(), timeout=600)
    assert rerun.returncode == 1, rerun.stderr[-2000:]  # the broken files failed
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["takes"] == total and summary["done"] == good and summary["failed"] == len(broken)
    assert summary["converted_now"] == total - done_before  # nothing done twice
    after = _records(out)
    assert {k: after[k] for k in before} == before  # the finished takes' records untouched
    assert len(after) == total and not list(out.rglob("*.pending")) and not list(out.rglob("*.tmp-*"))
    for take, reason in broken.items():
        record = manifest.get(take)
        assert record is not None and record["status"] == FAILED and reason in record["reason"], (take, record)
    for text in after.values():
        record = json.loads(text)
        if record["status"] == DONE:
            assert set(record["outputs"]) == {record["take"] + s for s in (".npz", ".pkl", ".csv")}
            assert all((out / rel).is_file() for rel in record["outputs"])
    assert np.load(out / "batch_0/cmu_14_19_arms_copy000.npz")["q"].shape[1] == 29
    quality = json.loads((out / "quality.json").read_text())
    assert len(quality["takes"]) == good and quality["dataset"]["err_mm"]["mean"] > 0
    manifest_json = json.loads((out / "manifest.json").read_text())
    assert len(manifest_json["takes"]) == total

    again = subprocess.run(_cmd(*args), capture_output=True, text=True, env=_env(), timeout=300)
    assert json.loads(again.stdout.strip().splitlines()[-1])["converted_now"] == 0 and _records(out) == after


def _ray_env() -> dict[str, str]:
    """The head and the driver share a token of their own (not ~/.ray's)."""
    import uuid

    return {**_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex + uuid.uuid4().hex}


def _ray_start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`ray start ARGS --block` in a session of its own, once it says it is up."""
    node = subprocess.Popen(["ray", "start", "--block", "--disable-usage-stats", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    assert node.stdout is not None
    deadline = time.monotonic() + 120
    seen = []
    while time.monotonic() < deadline:
        line = node.stdout.readline()
        seen.append(line)
        if not line or "will now block" in line:
            break
    assert node.poll() is None, "".join(seen)[-3000:]
    return node


def _ray_head(env: dict[str, str], cpus: int = 2) -> tuple[subprocess.Popen, str, Path]:
    """`ray start --head --block` on this machine (its own temporary folder), ready; SIGTERM to it
    stops every process it started."""
    from mocapline.tools.pipeline.procs import free_tcp_port

    port = free_tcp_port()
    temp = Path("/tmp") / f"ray-mocapline-{os.getpid()}"  # Ray's socket paths must stay short
    head = _ray_start(["--head", "--port", str(port), "--num-cpus", str(cpus), "--include-dashboard", "false",
                       "--temp-dir", str(temp)], env)
    # Ray connects to a loopback address through this machine's own: nothing leaves it
    return head, f"127.0.0.1:{port}", temp


def _ray_node(env: dict[str, str], address: str, cpus: int = 1) -> tuple[subprocess.Popen, Path]:
    """A second node of the head's cluster on this machine, in a temporary folder and a session of
    its own (its raylet and workers are that session's processes). Its agent's HTTP port is its own
    (the head's holds Ray's fixed default)."""
    from mocapline.tools.pipeline.procs import free_tcp_port

    temp = Path("/tmp") / f"ray-mocapline-{os.getpid()}-n2"
    node = _ray_start(["--address", address, "--num-cpus", str(cpus), "--temp-dir", str(temp),
                       "--dashboard-agent-listen-port", str(free_tcp_port())], env)
    return node, temp


def _stop(head: subprocess.Popen, temp: Path) -> None:
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
    shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_local_ray_cluster_writes_what_the_pool_writes(tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'mocapline[cluster]')")
    if shutil.which("ray") is None:
        pytest.skip("the `ray` command is not on PATH")
    src = tmp_path / "takes"
    good, broken = make_folder(src, copies=50)  # 200 takes and the broken files
    shutil.copyfile(DEMO_TAKE, src / "demo.mlrec")  # a raw-datagram recording, retargeted as export does
    good += 1
    args = ("--format", "npz,gmr-pkl,beyondmimic-csv", "--progress", "none")
    pool = subprocess.run(_cmd(str(src), "--out", str(tmp_path / "pool"), "--workers", "2", *args),
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert pool.returncode == 1, pool.stderr[-2000:]
    env = _ray_env()
    head, address, temp = _ray_head(env)
    try:
        on_ray = subprocess.run(_cmd(str(src), "--out", str(tmp_path / "ray"), "--ray", address, *args),
                                capture_output=True, text=True, env=env, timeout=300)
    finally:
        _stop(head, temp)
    assert on_ray.returncode == 1, on_ray.stderr[-3000:]
    summary = json.loads(on_ray.stdout.strip().splitlines()[-1])
    assert summary["done"] == good and summary["failed"] == len(broken) and summary["engine"].startswith("ray")
    made = sorted(p.relative_to(tmp_path / "pool") for p in (tmp_path / "pool").rglob("*")
                  if p.suffix in (".npz", ".pkl", ".csv"))
    assert len(made) == 3 * good
    for rel in made:
        assert (tmp_path / "ray" / rel).read_bytes() == (tmp_path / "pool" / rel).read_bytes(), rel


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _driver_after_progress(args: list[str], env: dict[str, str], lines: int, before: str) -> subprocess.Popen:
    """``retarget-dataset ARGS --progress lines`` started, returned once it has reported ``lines`` takes."""
    driver = subprocess.Popen(_cmd(*args, "--progress", "lines"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    assert driver.stderr is not None and driver.stdout is not None
    seen = 0
    while seen < lines:
        line = driver.stderr.readline()
        assert line, f"the driver ended before {before}"
        seen += " takes, " in line
    return driver


@pytest.mark.integration
def test_a_worker_killed_mid_run_loses_no_take(tmp_path) -> None:
    """A pool worker killed -9 (the OOM killer, a person) breaks the pool: a new one converts the
    takes still pending, the one in flight included."""
    src, out = tmp_path / "takes", tmp_path / "dataset"
    good, broken = make_folder(src, copies=10)
    driver = _driver_after_progress([str(src), "--out", str(out), "--workers", "2"], _env(), 5, "a worker was killed")
    workers = [c for c in _children(driver.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()]
    assert workers, _children(driver.pid)
    os.kill(workers[0], signal.SIGKILL)
    rest, err = driver.communicate(timeout=300)
    assert driver.returncode == 1, err[-2000:]
    assert "a worker died" in err
    summary = json.loads(rest.strip().splitlines()[-1])
    assert summary["done"] == good and summary["failed"] == len(broken) and summary["converted_now"] == good + len(
        broken)
    assert len(_records(out)) == good + len(broken)


def _session_processes(sid: int, marker: str) -> list[int]:
    """Processes of session ``sid`` whose command line holds ``marker``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) == sid and marker in (proc / "cmdline").read_text():
                out.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return out


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_ray_worker_killed_mid_run_loses_no_take(tmp_path) -> None:
    """Ray runs a task again whose worker died: every take is done, once."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'mocapline[cluster]')")
    if shutil.which("ray") is None:
        pytest.skip("the `ray` command is not on PATH")
    src = tmp_path / "takes"
    good, broken = make_folder(src, copies=15)
    env = _ray_env()
    head, address, temp = _ray_head(env)
    try:
        driver, busy, out = _run_while_busy(src, tmp_path, env, address, head.pid)
        os.kill(busy[0], signal.SIGKILL)  # a worker in the middle of a take
        rest, err = driver.communicate(timeout=300)
    finally:
        _stop(head, temp)
    assert driver.returncode == 1, err[-3000:]
    summary = json.loads(rest.strip().splitlines()[-1])
    assert summary["done"] == good and summary["failed"] == len(broken), summary
    assert summary["converted_now"] == good + len(broken) and len(_records(out)) == good + len(broken)


def _driver_while_busy(src: Path, out: Path, env: dict[str, str], address: str,
                       session: int) -> tuple[subprocess.Popen, list[int]] | None:
    """A run on the cluster and the workers of ``session`` (a node's) converting a take, once there
    are some; None if the run ended first (a whole run of these short takes lasts a few seconds,
    the start of a cold worker on a loaded machine as long)."""
    driver = subprocess.Popen(_cmd(str(src), "--out", str(out), "--ray", address, "--progress", "none"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while driver.poll() is None and time.monotonic() < deadline:
        busy = _session_processes(session, "ray::run_task")
        if busy:
            return driver, busy
        time.sleep(0.01)
    rest, err = driver.communicate(timeout=300)
    assert driver.returncode == 1, err[-3000:]  # it ended as a run with broken takes does
    return None


def _run_while_busy(src: Path, tmp_path: Path, env: dict[str, str], address: str,
                    session: int) -> tuple[subprocess.Popen, list[int], Path]:
    """:func:`_driver_while_busy`, tried again in a new output folder until it catches the run
    in the middle (three tries)."""
    for attempt in range(3):
        out = tmp_path / f"dataset{attempt}"
        caught = _driver_while_busy(src, out, env, address, session)
        if caught is not None:
            return *caught, out
    raise AssertionError(f"three runs ended before a worker of session {session} had converted a take")


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_ray_node_killed_mid_run_loses_no_take(tmp_path) -> None:
    """A second node of the cluster dies mid-run (SIGKILL of its raylet, workers and every other
    process of its session, as when a machine goes): the takes it held run again on the head, and
    every take ends done or failed exactly once, none lost, none twice. The node has two of the
    three CPUs, so it is handed takes from the start."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'mocapline[cluster]')")
    if shutil.which("ray") is None:
        pytest.skip("the `ray` command is not on PATH")
    src = tmp_path / "takes"
    good, broken = make_folder(src, copies=15)
    env = _ray_env()
    head, address, temp = _ray_head(env, cpus=1)
    node, node_temp = None, None
    try:
        node, node_temp = _ray_node(env, address, cpus=2)
        driver, _, out = _run_while_busy(src, tmp_path, env, address, node.pid)
        assert _session_processes(node.pid, "raylet"), "the second node has no raylet"
        for pid in _session_processes(node.pid, ""):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.wait(timeout=60)
        wait_until(lambda: not _session_processes(node.pid, ""), 30, what="every process of the node gone")
        rest, err = driver.communicate(timeout=400)
    finally:
        if node is not None:
            for pid in _session_processes(node.pid, ""):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if node_temp is not None:
                shutil.rmtree(node_temp, ignore_errors=True)
        _stop(head, temp)
    assert driver.returncode == 1, err[-3000:]
    summary = json.loads(rest.strip().splitlines()[-1])
    assert summary["done"] == good and summary["failed"] == len(broken), (summary, err[-3000:])
    assert summary["converted_now"] == good + len(broken) and len(_records(out)) == good + len(broken)
    assert summary["failed_by_reason"].get("ray task lost", 0) == 0, summary


def test_the_conversion_code_is_in_the_settings_hash(tmp_path) -> None:
    """A dataset converted by older code (``retarget_file.CONVERSION``) is redone by a rerun."""
    from mocapline.tools.dataset.cli import dataset_settings
    from mocapline.tools.retarget_file import CONVERSION

    _, described, files = dataset_settings(build_parser().parse_args([str(tmp_path), "--out", str(tmp_path / "o")]))
    assert described["conversion"] == CONVERSION
    assert settings_hash({**described, "conversion": "2026-12-03"}, files) != settings_hash(described, files)


@pytest.mark.parametrize(("flag", "field", "values"), [("--joint-ranges", "joint_ranges", ("full", "human")),
                                                      ("--keep-flight", "keep_flight", (False, True))])
def test_a_retarget_setting_reaches_each_take_and_the_settings_hash(tmp_path, flag, field, values) -> None:
    """``--joint-ranges human`` (clips for a learned policy) or ``--keep-flight`` (clips that jump)
    is a setting like any other: in every take's FileSettings and in the hash that decides what a
    rerun redoes."""
    from mocapline.tools.dataset.cli import dataset_settings

    hashes = {}
    for value in values:
        given = [flag, value] if isinstance(value, str) else [flag] if value else []
        args = build_parser().parse_args([str(tmp_path), "--out", str(tmp_path / "out"), *given])
        settings, described, files = dataset_settings(args)
        assert getattr(settings, field) == value and described[field] == value
        hashes[value] = settings_hash(described, files)
    assert len(set(hashes.values())) == 2
