"""One take format family: every file mocapline writes about a take opens in `inspect`, `plot` and
`export` (and `replay` where it holds the datagrams), or is refused with the commands that read it;
what a tool makes of a take goes to the working directory, never beside the take."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from g1_facts import G1_JOINT_COUNT

from mocapline.core.header import MessageType, encode_frame
from mocapline.core.pb import MocapFrame
from mocapline.formats import mltap
from mocapline.formats.mlmf import FrameFileWriter
from mocapline.formats.recordfile import RecordWriter
from mocapline.formats.takefile import TakeFileError, TakeKind, check, detect, read_mocap_series
from mocapline.tools.emitter.emitter import TakePlan, write_take
from mocapline.tools.inspect import main as inspect_main
from mocapline.tools.recorder.export import main as export_main
from mocapline.tools.recorder.plot import main as plot_main
from mocapline.tools.recorder.replay import main as replay_main
from mocapline.tools.recorder.take import run_recording

LATENCY_US = 7_000  # capture -> tap received, in the recordings made here
BRIDGED = (20, 21)  # frames the tap file marks bridged (the streamer stood in for missing indices)


def _payloads(rec: Path) -> list[bytes]:
    _, frames = run_recording(rec, stream=True)
    out = []
    for k, payload in enumerate(frames):
        m = MocapFrame()
        m.ParseFromString(payload)
        m.bridged = k in BRIDGED
        out.append(m.SerializeToString())
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """One file of each kind mocapline writes about a take (and two it does not)."""
    d = tmp_path_factory.mktemp("kinds")
    take = d / "take"
    take.mkdir()
    write_take(TakePlan(frames=60, first_index=500), take / "raw.mlrec", rate_hz=60.0)
    payloads = _payloads(take / "raw.mlrec")
    with FrameFileWriter(take / "frames.mlmf", {"generator": "test"}) as w:  # as the live streamer sent them
        for payload in payloads:
            m = MocapFrame()
            m.ParseFromString(payload)
            w.write(payload, (m.capture_timestamp_us + LATENCY_US) * 1000)
    with RecordWriter(d / "robot.mltap", mltap.MAGIC, {"generator": "test"}, mltap.FIELDS) as w:
        for k, payload in enumerate(payloads):
            m = MocapFrame()
            m.ParseFromString(payload)
            wire = encode_frame(MessageType.MOTION_FRAME, k, payload, capture_timestamp_us=m.capture_timestamp_us,
                                send_timestamp_us=0, joint_count=G1_JOINT_COUNT)
            w.write_record(((m.capture_timestamp_us + LATENCY_US) * 1000, k), bytes(16) + wire)
        end = encode_frame(MessageType.END_OF_STREAM, len(payloads), b"", capture_timestamp_us=0,
                           send_timestamp_us=0, joint_count=G1_JOINT_COUNT)
        w.write_record((0, len(payloads)), bytes(16) + end)
    shutil.copy(take / "raw.mlrec", d / "bare.mlrec")
    (d / "motion.bvh").write_text("HIERARCHY\nROOT Hips\n{\n}\n")
    (d / "junk.bin").write_bytes(b"hello world")
    return {"take folder": take, "mlrec": d / "bare.mlrec", "mlmf": take / "frames.mlmf", "mltap": d / "robot.mltap",
            "bvh": d / "motion.bvh", "junk": d / "junk.bin"}


@pytest.fixture(scope="module")
def clip(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clip") / "robot.npz"
    assert export_main([str(files["mltap"]), "-o", str(out), "--on-gap", "flag"]) == 0
    return out


def test_the_kind_comes_from_the_first_bytes(files, clip) -> None:
    kinds = {name: detect(path) for name, path in files.items()}
    assert kinds == {"take folder": TakeKind.TAKE_FOLDER, "mlrec": TakeKind.DATAGRAMS, "mlmf": TakeKind.FRAMES,
                     "mltap": TakeKind.TAP, "bvh": TakeKind.BVH, "junk": TakeKind.UNKNOWN}
    assert detect(clip) is TakeKind.CLIP and detect(clip.with_suffix(".csv")) is TakeKind.CLIP_CSV
    renamed = clip.with_name("named_like_a_recording.mlrec")
    shutil.copy(files["mltap"], renamed)
    assert detect(renamed) is TakeKind.TAP  # not by its name


@pytest.mark.parametrize(("name", "command", "readers"), [
    ("mltap", "replay", "`mocapline inspect`, `mocapline plot` and `mocapline export` read it"),
    ("mlmf", "replay", "replay TAKE --compare FILE.mlmf"),
    ("clip", "export", "`mocapline inspect` and `mocapline plot` read it"),
    ("csv", "plot", "inspect or plot the .npz beside it"),
    ("bvh", "plot", "`mocapline retarget-file` reads it"),
    ("junk", "export", "expected a take folder, a .mlrec, .mlmf or .mltap recording, a reference clip .npz"),
])
def test_a_file_a_command_cannot_read_is_refused_with_the_command_that_can(files, clip, name, command, readers,
                                                                            capsys) -> None:
    path = {"clip": clip, "csv": clip.with_suffix(".csv"), **files}[name]
    with pytest.raises(TakeFileError, match="not a file mocapline reads" if name == "junk" else
                       f"which {command} does not read"):
        check(path, command)
    main = {"replay": replay_main, "export": export_main, "plot": plot_main}[command]
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert readers in err and "magic" not in err, err


def test_inspect_reads_a_tap_recording_and_a_clip(files, clip, capsys) -> None:
    assert inspect_main([str(files["mltap"])]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    frames, summary = lines[:-1], lines[-1]["frames"]
    assert len(frames) == summary["frames"] == 60 and summary["end_of_stream"] == 1 and summary["bridged"] == 2
    assert [f["frame_id"] for f in frames] == list(range(60)) and len(frames[0]["joint_pos"]) == 29
    assert summary["latency_ms"] == {"of": "capture -> tap received", "p50": 7.0, "p99": 7.0}
    assert inspect_main([str(clip)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    summary = lines[-1]["clip"]
    assert len(lines) - 1 == summary["samples"] and summary["meta"]["generator"] == "mocapline export"
    assert inspect_main([str(files["take folder"])]) == 0  # its raw.mlrec, decoded as capture would
    assert "ledger" in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_export_of_a_tap_recording_is_a_clip_whose_bridged_frames_are_gaps(files, clip, capsys) -> None:
    z = np.load(clip)
    assert float(z["fps"]) == 50.0 and float(z["source_fps"]) == 60.0
    assert z["gaps"].tolist() == [[520, 521]]  # the posture indices the bridged frames stood in for
    assert (~z["valid"]).sum() > 0 and z["valid"][0] and z["valid"][-1]
    assert z["posture_index"][0] == 500 and z["q"].shape[1] == 29
    series = read_mocap_series(files["mltap"])
    k = np.flatnonzero(z["posture_index"] == 530)[0]  # a sample on a source frame is that frame
    np.testing.assert_allclose(z["q"][k], series.joint_pos[series.posture_index == 530][0], atol=1e-6)
    assert json.loads(str(z["meta"]))["input_kind"] == TakeKind.TAP.what
    assert export_main([str(files["mltap"]), "-o", str(clip.with_name("refused.npz"))]) == 3  # a gap: refused


def test_plot_draws_a_tap_recording_with_its_latency_and_a_clip_without(files, clip, tmp_path, capsys) -> None:
    assert plot_main([str(files["mltap"]), "--out", str(tmp_path / "tap"), "--dpi", "40"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {Path(p).name for p in summary["plots"]} == {"joints.png", "root.png", "latency.png", "timeline.png"}
    assert summary["latency_frames"] == 59  # the first frame was captured at t = 0 (a written take), so untimed
    assert plot_main([str(clip), "--out", str(tmp_path / "clip"), "--dpi", "40"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {Path(p).name for p in summary["plots"]} == {"joints.png", "root.png", "timeline.png"}
    assert "keeps no send or receive times" in summary["latency"]
    for png in tmp_path.rglob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_outputs_go_to_the_working_directory_never_beside_the_take(files, tmp_path, monkeypatch, capsys) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    beside = {p.name for p in files["mltap"].parent.iterdir()}
    assert export_main([str(files["mltap"]), "--on-gap", "flag"]) == 0
    assert plot_main([str(files["take folder"]), "--dpi", "40"]) == 0
    capsys.readouterr()
    assert (work / "robot.npz").is_file() and (work / "robot.csv").is_file()
    assert {p.name for p in (work / "take_plots").iterdir()} >= {"joints.png", "latency.png", "timeline.png"}
    assert {p.name for p in files["mltap"].parent.iterdir()} == beside
    assert not (files["take folder"] / "plots").exists()
