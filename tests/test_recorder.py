"""Record / replay / export: the offline pipeline's determinism, the .mlmf format, the export
contract (shapes, units, quaternion order, names) and the resampling's exactness."""

import csv
import json

import numpy as np
import pytest
from g1_facts import G1_JOINT_NAMES, joint_ranges, load_ik_model

from mocapline.core import pb
from mocapline.formats.mlmf import FrameFileWriter, read_frame_file
from mocapline.formats.mlrec import RecordingWriter, read_recording
from mocapline.tools.emitter.emitter import TakePlan, write_take
from mocapline.tools.recorder import export as E
from mocapline.tools.recorder.replay import compare
from mocapline.tools.recorder.replay import main as replay_main
from mocapline.tools.recorder.take import (
    TakeConfig,
    digest,
    motion_bytes,
    run_recording,
)


@pytest.fixture(scope="module")
def take(tmp_path_factory):
    path = tmp_path_factory.mktemp("take") / "raw.mlrec"
    write_take(TakePlan(frames=90, first_index=500), path, rate_hz=60.0)
    return path


@pytest.fixture(scope="module")
def gappy_take(tmp_path_factory):
    full = tmp_path_factory.mktemp("gappy") / "full.mlrec"
    write_take(TakePlan(frames=90, first_index=500), full, rate_hz=60.0)  # (write_take has no skips)
    rec = read_recording(full)
    path = full.with_name("raw.mlrec")
    with RecordingWriter(path, rec.meta) as w:
        for k, dgram in enumerate(rec.datagrams):
            if 500 + k not in (530, 531, 532):
                w.write(dgram)
    return path


# -- resampling exactness ----------------------------------------------------------------------


def _ramp(first: int = 100, n: int = 61, fps: float = 60.0):
    idx = np.arange(first, first + n)
    t = (idx - first) / fps
    a, b = np.linspace(-0.5, 0.5, 29), np.linspace(-1.0, 1.2, 29)
    q = a + t[:, None] * b
    omega = 1.3  # rad/s about z
    quat = np.stack([np.cos(omega * t / 2), 0 * t, 0 * t, np.sin(omega * t / 2)], axis=1)
    pos = np.stack([0.1 + 0.4 * t, -0.2 * t, 0.79 + 0 * t], axis=1)
    return idx, pos, quat, q, a, b, omega


def test_resample_linear_ramps_and_constant_yaw_are_exact() -> None:
    idx, pos, quat, q, a, b, omega = _ramp()
    r = E.resample(idx, pos, quat, q, 60.0, 50.0)
    assert len(r.time) == 51  # 1 s at 50 Hz, both ends included
    assert np.array_equal(r.time, np.arange(51) / 50.0)
    t = r.time
    np.testing.assert_allclose(r.joint_pos, a + t[:, None] * b, atol=1e-12)
    np.testing.assert_allclose(r.root_pos[:, 0], 0.1 + 0.4 * t, atol=1e-12)
    expect = np.stack([np.cos(omega * t / 2), 0 * t, 0 * t, np.sin(omega * t / 2)], axis=1)
    np.testing.assert_allclose(r.root_quat, expect, atol=1e-12)  # slerp of a constant-rate yaw
    assert r.valid.all() and not r.gaps
    clip = E.build_clip(r, 50.0, 60.0, {})
    np.testing.assert_allclose(clip["qd"], np.broadcast_to(b, clip["qd"].shape), atol=1e-9)


def test_samples_on_source_frames_are_copies() -> None:
    idx, pos, quat, q, *_ = _ramp()
    r = E.resample(idx, pos, quat, q, 60.0, 30.0)  # every other source frame
    assert np.array_equal(r.joint_pos, q[::2]) and np.array_equal(r.root_quat, quat[::2])
    assert np.array_equal(r.posture_index, idx[::2])


def test_gap_refused_or_flagged() -> None:
    idx, pos, quat, q, *_ = _ramp()
    keep = ~np.isin(idx, [120, 121, 122])
    args = (idx[keep], pos[keep], quat[keep], q[keep], 60.0, 50.0)
    with pytest.raises(E.GapError) as exc:
        E.resample(*args)
    assert exc.value.gaps == [(120, 122)]
    r = E.resample(*args, on_gap="flag")
    src = 100 + r.time * 60.0
    crossing = (src > 119 + 1e-9) & (src < 123 - 1e-9)
    assert np.array_equal(~r.valid, crossing) and crossing.any()
    assert r.gaps == [(120, 122)]
    # allowed when the interval (4 source frames) is within --max-gap
    assert E.resample(*args, max_gap=4).valid.all()
    bridged = E.resample(*args, max_gap=4).joint_pos
    np.testing.assert_allclose(bridged, E.resample(idx, pos, quat, q, 60.0, 50.0).joint_pos,
                               atol=1e-12)  # linear data: bridging the gap is still exact


# -- the clip: shapes, units, quaternion order, names ------------------------------------------


def test_clip_contract_fk_and_quaternion_order() -> None:
    idx, pos, quat, q, *_ = _ramp(n=11)
    q = np.zeros_like(q)
    quat[:] = [np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)]  # yaw +90 deg, w x y z
    clip = E.build_clip(E.resample(idx, pos, quat, q, 60.0, 50.0), 50.0, 60.0, {})
    T = len(clip["time"])
    model = load_ik_model()
    B = model.nbody - 1
    assert clip["q"].shape == clip["qd"].shape == (T, 29)
    assert clip["root_pose"].shape == (T, 7) and clip["policy_clock"].shape == (T, 2)
    assert clip["body_pos_w"].shape == (T, B, 3) and clip["body_quat_w"].shape == (T, B, 4)
    assert list(clip["joint_names"]) == list(G1_JOINT_NAMES)
    assert clip["body_names"][0] == "pelvis" and len(clip["body_names"]) == B
    np.testing.assert_allclose(clip["body_pos_w"][:, 0], clip["root_pose"][:, :3], atol=1e-12)
    np.testing.assert_allclose(clip["body_quat_w"][:, 0], clip["root_pose"][:, 3:], atol=1e-12)
    np.testing.assert_allclose(clip["root_pose"][:, 3:], quat[: T], atol=1e-12)
    # w first: with the root yawed +90 deg the left hip (+y of the pelvis) lies at -x of the root
    left = list(clip["body_names"]).index("left_hip_pitch_link")
    rel = clip["body_pos_w"][0, left] - clip["root_pose"][0, :3]
    assert rel[0] < -0.05 and abs(rel[1]) < 0.05
    np.testing.assert_allclose(np.linalg.norm(clip["body_quat_w"], axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(clip["policy_clock"][0], [0.0, clip["time"][-1]])
    np.testing.assert_allclose(clip["policy_clock"][-1], [1.0, 0.0])


def test_export_cli_writes_npz_and_csv(take, tmp_path) -> None:
    out = tmp_path / "clip.npz"
    assert E.main([str(take), "-o", str(out)]) == 0
    z = np.load(out, allow_pickle=False)
    T = len(z["time"])
    assert T == 75  # 89 frames at 60 Hz = 1.4833 s -> 50 Hz samples 0 .. 1.48
    assert float(z["fps"]) == 50.0 and float(z["source_fps"]) == 60.0
    assert z["q"].shape == (T, 29) and z["root_pose"].shape == (T, 7)
    ranges = joint_ranges(load_ik_model())
    assert np.all(z["q"] >= ranges[:, 0] - 1e-9) and np.all(z["q"] <= ranges[:, 1] + 1e-9)  # radians
    assert 0.5 < z["root_pose"][0, 2] < 1.1  # pelvis height in metres
    np.testing.assert_allclose(np.linalg.norm(z["root_pose"][:, 3:], axis=1), 1.0, atol=1e-12)
    meta = json.loads(str(z["meta"]))
    assert meta["config"]["ik_config_content"]["robot_root_name"] == "pelvis"
    assert meta["units"]["q"] == "rad" and meta["units"]["quaternions"] == "unit, w x y z"
    with open(out.with_suffix(".csv")) as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:3] == ["time", "progress", "root_x"] and rows[0][9:] == list(G1_JOINT_NAMES)
    assert len(rows) == T + 1
    np.testing.assert_allclose(np.array(rows[1:], float)[:, 9:], z["q"], rtol=1e-8, atol=1e-9)


def test_export_cli_gap_policy(gappy_take, tmp_path) -> None:
    out = tmp_path / "g.npz"
    assert E.main([str(gappy_take), "-o", str(out)]) == 3
    assert not out.exists()
    assert E.main([str(gappy_take), "-o", str(out), "--on-gap", "flag"]) == 0
    z = np.load(out)
    assert z["gaps"].tolist() == [[530, 532]]
    assert (~z["valid"]).sum() > 0 and z["valid"][0] and z["valid"][-1]


# -- replay determinism and the frame file -----------------------------------------------------


def test_offline_replay_is_byte_identical(take) -> None:
    cfg = TakeConfig(output_fps=50.0)
    _, first = run_recording(take, cfg, stream=True)
    _, second = run_recording(take, cfg, stream=True)
    assert len(first) == 75 and first == second
    assert digest(first) == digest(second)
    msg = pb.MocapFrame()
    msg.ParseFromString(first[10])
    assert len(msg.joint_pos) == 29 and len(msg.body_quat_w) == 4


def test_motion_content_ignores_run_fields_only(take) -> None:
    _, frames = run_recording(take, TakeConfig(), stream=True)
    msg = pb.MocapFrame()
    msg.ParseFromString(frames[5])
    live = pb.MocapFrame()
    live.CopyFrom(msg)
    live.capture_timestamp_us += 12345
    live.session_id = "live-session"
    live.traceparent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert live.SerializeToString() != frames[5]
    assert motion_bytes(live.SerializeToString()) == motion_bytes(frames[5])
    moved = pb.MocapFrame()
    moved.CopyFrom(msg)
    moved.joint_pos[3] += 1e-3  # (MocapFrame carries float32)
    assert motion_bytes(moved.SerializeToString()) != motion_bytes(frames[5])
    changed = list(frames)
    changed[7] = moved.SerializeToString()
    assert compare(frames, changed) == {"identical_motion": False, "replayed": len(frames),
                                        "recorded": len(frames), "first_difference": 7}


def test_frame_file_round_trip_and_torn_tail(tmp_path) -> None:
    path = tmp_path / "f.mlmf"
    with FrameFileWriter(path, {"output_fps": 60.0}) as w:
        for k in range(5):
            w.write(bytes([k]) * (k + 3), t_ns=k)
    ff = read_frame_file(path)
    assert ff.meta == {"output_fps": 60.0} and ff.payloads == [bytes([k]) * (k + 3) for k in range(5)]
    assert ff.times_ns == list(range(5)) and not ff.torn_tail
    data = path.read_bytes()
    path.write_bytes(data[:-2])
    ff = read_frame_file(path)
    assert len(ff.payloads) == 4 and ff.torn_tail


def test_replay_cli_writes_and_compares(take, tmp_path, capsys) -> None:
    out = tmp_path / "r.mlmf"
    assert replay_main([str(take), "-o", str(out)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["mocap_frames"] == 90
    assert replay_main([str(take), "--compare", str(out)]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["sha256"] == first["sha256"] and second["compare"]["identical_motion"]
    assert replay_main([str(take), "--compare", str(out), "--human-height", "1.5"]) == 1


# -- the round trip: record a live take, replay it offline, identical frames --------------------


@pytest.mark.integration
def test_record_then_replay_gives_identical_frames(take, tmp_path, capsys, monkeypatch) -> None:
    from mocapline.tools.pipeline.procs import free_tcp_port, free_udp_port
    from mocapline.tools.recorder.record import main as record_main

    folder = tmp_path / "take"
    rc = record_main([
        "--dir", str(folder), "--replay", str(take), "--replay-speed", "4", "--display", "none",
        "--main-port", str(free_udp_port()), "--side-port", str(free_udp_port()),
        "--output-port", str(free_tcp_port()), "--web-port", str(free_tcp_port()),
        "--nats", f"nats://127.0.0.1:{free_tcp_port()}", "--output-fps", "50",
    ])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["datagrams"] == 90 and summary["mocap_frames"] == 75
    config = json.loads((folder / "config.json").read_text())
    assert config["output_fps"] == 50.0 and config["ik_config_content"]["robot_root_name"] == "pelvis"
    ledger = json.loads((folder / "ledger.json").read_text())
    v = ledger["verdict"]
    assert v["source_unique_frames"] == v["gmr_processed"] == 90 and v["zmq_sent"] == 75  # 60 -> 50 Hz
    recorded = read_frame_file(folder / "frames.mlmf")
    assert recorded.meta["output_fps"] == 50.0 and not recorded.torn_tail
    # replay the take folder: its config is used and frames.mlmf compared on the motion content
    assert replay_main([str(folder)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compare"]["identical_motion"] and out["mocap_frames"] == 75
    assert E.main([str(folder), "-o", str(tmp_path / "clip.npz")]) == 0
    capsys.readouterr()
    from mocapline.tools.recorder.plot import main as plot_main

    monkeypatch.chdir(tmp_path)
    assert plot_main([str(folder), "--dpi", "50"]) == 0  # into ./take_plots
    assert json.loads(capsys.readouterr().out)["latency_frames"] == 75
    assert (tmp_path / "take_plots" / "latency.png").stat().st_size > 5000


# -- plots ---------------------------------------------------------------------------------------


def test_plots_render(gappy_take, tmp_path, capsys) -> None:
    from mocapline.tools.recorder.plot import main as plot_main

    out = tmp_path / "plots"
    assert plot_main([str(gappy_take), "--out", str(out), "--dpi", "60"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # A bare .mlrec (the demo take is one): no MocapFrame was sent, so no latency to draw; the
    # summary says which files have it instead of an empty latency.png.
    assert summary["latency_frames"] == 0 and not (out / "latency.png").exists()
    assert "a take folder of `mocapline record` or a .mltap has them" in summary["latency"]
    for name, least in (("joints.png", 20000), ("root.png", 5000), ("timeline.png", 5000)):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > least
    from matplotlib import image

    img = image.imread(out / "joints.png")
    assert img.shape[0] > 500 and img[..., :3].std() > 0.05  # not a blank canvas


def test_web_view_links_the_plots(tmp_path) -> None:
    import urllib.error
    import urllib.request

    from mocapline.services.viewer.web import WebView

    plots = tmp_path / "take" / "plots"
    plots.mkdir(parents=True)
    (plots / "joints.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    (tmp_path / "secret.png").write_bytes(b"no")
    view = WebView("127.0.0.1", 0, dict, plots_dir=tmp_path / "take")
    view.start()
    try:
        def get(path: str):
            return urllib.request.urlopen(view.address + path, timeout=5)

        assert json.loads(get("plots.json").read()) == ["plots/joints.png"]
        assert get("plots/plots/joints.png").read().endswith(b"fake")
        assert b"plots.json" in get("static/app.js").read()  # the page asks for the list
        with pytest.raises(urllib.error.HTTPError):
            get("plots/../secret.png")
        with pytest.raises(urllib.error.HTTPError):
            get("plots/%2E%2E/secret.png")
    finally:
        view.stop()


def test_replay_push_serves_the_frames_like_the_streamer(take) -> None:
    import threading

    import zmq
    from g1_facts import G1_JOINT_COUNT

    from mocapline.core.header import MessageType
    from mocapline.core.transport import FrameReceiver, lossless_socket
    from mocapline.tools.pipeline.procs import free_tcp_port
    from mocapline.tools.recorder.replay import push

    _, frames = run_recording(take, TakeConfig(), stream=True)
    port = free_tcp_port()
    sent: list[int] = []
    t = threading.Thread(target=lambda: sent.append(push(frames, f"tcp://127.0.0.1:{port}", 60.0, 0.0)))
    t.start()
    ctx = zmq.Context()
    rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, f"tcp://127.0.0.1:{port}", bind=False),
                       MessageType.MOTION_FRAME, G1_JOINT_COUNT)
    got: list[bytes] = []
    try:
        for _ in range(2000):
            msg = rx.recv(timeout_ms=100)
            if msg is None:
                continue
            if msg.header.message_type is MessageType.END_OF_STREAM:
                break
            got.append(bytes(msg.payload))
    finally:
        t.join(timeout=30)
        rx.socket.close(linger=0)
        ctx.term()
    assert sent == [len(frames)] and got == frames


def test_a_one_port_recording_replays_to_every_destination(tmp_path) -> None:
    """The bundled demo take holds capture's main path only: replayed to a main and a side path
    (`mocapline emit --demo --dest CAPTURE:7014 AUDITOR:7015`, `up --demo`) both get every frame,
    as from Axis Studio, so the auditor's side path is not left empty."""
    import socket

    from mocapline.formats.axis_bvh import parse_header
    from mocapline.tools.emitter.emitter import replay

    path = tmp_path / "one_port.mlrec"
    write_take(TakePlan(frames=30, first_index=200), path, rate_hz=60.0)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
            s.settimeout(5.0)
        stats = replay(path, [s.getsockname() for s in socks], speed=0)
        assert stats.frames == 30
        for s in socks:
            assert [parse_header(s.recv(65536)).posture_index for _ in range(30)] == list(range(200, 230))
    finally:
        for s in socks:
            s.close()


def test_a_recorded_take_keeps_its_skeleton_for_replay(tmp_path) -> None:
    """`record --skeleton pn` writes the skeleton in the take's config.json, and `replay` of the
    folder parses with it (an Axis Neuron take replayed as Axis Studio's skeleton would move wrong)."""
    from argparse import Namespace

    from mocapline.tools.pipeline.plan import StackConfig
    from mocapline.tools.recorder.record import take_description
    from mocapline.tools.recorder.take import take_config

    described = take_description(Namespace(), StackConfig(skeleton="pn_pro"))
    assert described["skeleton"] == "pn_pro"
    (tmp_path / "config.json").write_text(json.dumps(described))
    _, cfg = take_config(Namespace(take=str(tmp_path)))
    assert cfg.skeleton == "pn_pro"


def test_replay_and_export_take_the_skeleton_the_take_did_not_keep(tmp_path) -> None:
    """A bare .mlrec (`capture --record`) keeps no skeleton: `replay`/`export --skeleton pn` say it,
    and the flag wins over a take's own config.json as the other flags do."""
    from mocapline.tools.recorder import export, replay
    from mocapline.tools.recorder.take import take_config

    (tmp_path / "config.json").write_text(json.dumps({"skeleton": "axis_studio"}))
    for parser in (replay.build_parser(), export.build_parser()):
        args = parser.parse_args([str(tmp_path), "--skeleton", "pn"])
        assert take_config(args)[1].skeleton == "pn_pro"
        assert take_config(parser.parse_args([str(tmp_path)]))[1].skeleton == "axis_studio"


@pytest.mark.integration
def test_export_with_human_joint_ranges_keeps_the_shoulders_on_one_branch(tmp_path) -> None:
    """``export --joint-ranges human`` (a learned policy's clip of a take): the demo's raises past the
    G1's shoulder-roll limit keep the yaw within its ik_range and the pitch under a quarter turn;
    with the model's ranges the same take's pitch goes past 2 rad (its second branch)."""
    from mocapline.core.paths import DEMO_TAKE

    pitch = [G1_JOINT_NAMES.index(f"{s}_shoulder_pitch_joint") for s in ("left", "right")]
    yaw = [G1_JOINT_NAMES.index(f"{s}_shoulder_yaw_joint") for s in ("left", "right")]
    clips = {}
    for ranges in ("full", "human"):
        out = tmp_path / f"{ranges}.npz"
        assert E.main([str(DEMO_TAKE), "-o", str(out), "--no-csv", "--joint-ranges", ranges]) == 0
        clips[ranges] = np.load(out)["q"]
    assert np.abs(clips["full"][:, pitch]).max() > 2.0
    assert np.abs(clips["human"][:, pitch]).max() < np.pi / 2
    assert np.abs(clips["human"][:, yaw]).max() <= 1.4 + 1e-9
