"""`mocapline emit --format mvn`: the synthetic MVN streamer sends what capture's parsers read as
the characters, names, heights and finger counts asked for, and a human body: rigid segments whose
frames equal the world in the N-pose (MVN's convention), moving as the Axis demo does."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.modes import SOURCE_PORTS
from mocapline.core.udp import Datagram
from mocapline.formats.mxtp02 import HEADER, parse_mxtp02
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture.core import CaptureCore, XsensDecoder
from mocapline.tools.emitter import emitter, mvn
from mocapline.tools.emitter.take import TakePlan
from mocapline.tools.inspect import frame_json
from mocapline.tools.pipeline import demo

RATE = 120.0
FRAMES = 130  # meta data at samples 0 and 120
TAKE = mvn.MvnTake(performers=2, gloves=True, props=1, names=["Alice", "Bob", "Sword"], heights_m=[1.80, 1.62])
# (parent, child) segments of the rigid chains, GMR body names
BONES = [("Hips", "Spine"), ("Spine", "Spine1"), ("Spine3", "Neck"), ("Neck", "Head"),
         ("LeftUpLeg", "LeftLeg"), ("LeftLeg", "LeftFoot"), ("LeftFoot", "LeftToe"),
         ("RightUpLeg", "RightLeg"), ("RightLeg", "RightFoot"), ("RightFoot", "RightToe"),
         ("LeftArm", "LeftForeArm"), ("LeftForeArm", "LeftHand"), ("RightArm", "RightForeArm"),
         ("RightForeArm", "RightHand")]
HANGING = ["LeftUpLeg", "LeftLeg", "RightUpLeg", "RightLeg", "LeftArm", "LeftForeArm", "RightArm", "RightForeArm"]


def received_take() -> list[bytes]:
    """What emit_mvn sends over loopback UDP, as a receiver gets it."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2.0)
    got: list[bytes] = []

    def receive() -> None:
        try:
            while True:
                got.append(rx.recv(65536))
        except TimeoutError:
            pass

    thread = threading.Thread(target=receive)
    thread.start()
    try:
        stats = mvn.emit_mvn(TakePlan(frames=FRAMES, first_index=500), TAKE, [rx.getsockname()], rate_hz=RATE)
    finally:
        thread.join(timeout=10)
        rx.close()
    assert stats.frames == FRAMES and len(got) == sum(stats.datagrams.values())
    return got


@pytest.fixture(scope="module")
def take() -> list[bytes]:
    return received_take()


def test_capture_reads_the_characters_names_heights_and_fingers(take: list[bytes]) -> None:
    meta_per_second = 3 + 2 * 2  # MXTP12 per character, MXTP13 segments + points per suit
    assert len(take) == FRAMES * 3 + 2 * meta_per_second
    core = CaptureCore(XsensDecoder("m"), [SOURCE_PORTS["xsens"]])
    frames = []
    for k, data in enumerate(take):
        frames += core.feed(Datagram(k * 1000, SOURCE_PORTS["xsens"], "127.0.0.1", data), k * 1e-6)
    frames += core.flush()
    ledger = core.ledger()
    assert ledger["rejected_datagrams"] == 0
    assert {k: (p["avatar_name"], p["source_unique_frames"], p["source_missing_indices"])
            for k, p in ledger["performers"].items()} == {"0": ("Alice", FRAMES, 0), "1": ("Bob", FRAMES, 0)}
    assert ledger["props"] == {"2": {"samples": FRAMES, "segments": 1, "name": "Sword"}}
    assert ledger["meta_datagrams"] == {"MXTP12": 6, "MXTP13": 8}
    assert ledger["performers"]["0"]["human_height_m"] == pytest.approx(1.80, abs=1e-4)
    assert ledger["performers"]["1"]["human_height_m"] == pytest.approx(1.62, abs=1e-4)
    shown = [frame_json(f) for f in frames]
    assert all(len(f["fingers"]["pos"]) == 40 for f in shown)
    assert [p["character"] for p in shown[-1]["props"]] == [2]


def body_track(take: list[bytes], character: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(F, 23, 3) positions, (F, 23, 4) quaternions and (F, 40, 3) finger positions of one suit."""
    frames = [parse_mxtp02(d) for d in take if d[:6] == b"MXTP02" and HEADER.unpack_from(d)[5] == character]
    assert [f.sample_counter for f in frames] == list(range(500, 500 + FRAMES))
    return (np.array([f.positions for f in frames]), np.array([f.quaternions for f in frames]),
            np.array([f.finger_positions for f in frames]))


def rotate_back(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """R(q)^T v for (F, 4) quaternions w x y z and (F, 3) vectors."""
    w, u = q[:, :1], -q[:, 1:]
    return v + 2.0 * np.cross(u, np.cross(u, v) + w * v)


@pytest.mark.parametrize("character, height", [(0, 1.80), (1, 1.62)])
def test_the_body_is_a_moving_human_of_its_height(take: list[bytes], character: int, height: float) -> None:
    pos, quat, fingers = body_track(take, character)
    z = pos[:, :, 2]
    pelvis, head = z[:, GMR_BODY_INDEX["Hips"]], z[:, GMR_BODY_INDEX["Head"]]
    assert np.all((pelvis > 0.45 * height) & (pelvis < 0.6 * height))
    assert np.all(head > 0.85 * height) and np.all(head < height)
    for foot in ("LeftFoot", "RightFoot", "LeftToe", "RightToe"):
        assert np.all(z[:, GMR_BODY_INDEX[foot]] < 0.3 * pelvis) and np.all(z[:, GMR_BODY_INDEX[foot]] > -0.02)
    assert np.all(pos[:, GMR_BODY_INDEX["LeftUpLeg"], 1] > pos[:, GMR_BODY_INDEX["RightUpLeg"], 1])  # left = +Y
    toes_ahead = pos[:, GMR_BODY_INDEX["LeftToe"], 0] - pos[:, GMR_BODY_INDEX["LeftFoot"], 0]
    assert toes_ahead.mean() > 0.05  # facing +X
    for parent, child in BONES:  # rigid: the child where the parent's frame says, the whole take
        p, c = GMR_BODY_INDEX[parent], GMR_BODY_INDEX[child]
        local = rotate_back(quat[:, p], pos[:, c] - pos[:, p])
        np.testing.assert_allclose(local, np.broadcast_to(local[0], local.shape), atol=2e-4, err_msg=f"{parent}")
        if parent in HANGING:  # N-pose: segment frame = world, limbs hanging straight down
            assert local[0, 2] < 0 and np.hypot(local[0, 0], local[0, 1]) < 0.02 * abs(local[0, 2]), parent
    lengths = np.linalg.norm(pos[:, GMR_BODY_INDEX["LeftLeg"]] - pos[:, GMR_BODY_INDEX["LeftUpLeg"]], axis=1)
    thigh_cm = np.linalg.norm(get_skeleton("axis_studio").offsets_cm[get_skeleton("axis_studio").index("LeftLeg")])
    assert lengths[0] == pytest.approx(thigh_cm / 100 * height / mvn.REFERENCE_HEIGHT_M, rel=1e-4)
    step = np.linalg.norm(np.diff(pos, axis=0), axis=2).max()
    assert 0.0 < step < 0.05  # smooth at 120 Hz, not noise...
    hands = pos[:, GMR_BODY_INDEX["LeftHand"]]
    assert np.ptp(hands[:, 2]) > 0.1  # ...and moving: the arm raise lifts the hand
    for side, hand in (("Left", fingers[:, :20]), ("Right", fingers[:, 20:])):  # carpus = the hand, then 19 bones
        np.testing.assert_allclose(hand[:, 0], pos[:, GMR_BODY_INDEX[f"{side}Hand"]], atol=1e-5)
        reach = np.linalg.norm(hand - hand[:, :1], axis=2)
        assert 0.1 * height / 1.75 < reach.max() < 0.25 * height / 1.75


def test_it_retargets_as_the_axis_take_of_the_same_motion() -> None:
    """The MVN conventions are right when the xsens config gives the G1 the joint angles the
    axis_studio config gives it from the same motion sent as Axis BVH (FK bodies)."""
    import g1_facts as robot_model

    from mocapline.services.retarget.config import load_ik_config
    from mocapline.services.retarget.ik.options import RetargetOptions
    from mocapline.services.retarget.ik.retargeter import Retargeter
    from mocapline.tools.emitter.motion import pose_channels

    model = robot_model.load_ik_model()
    body = mvn.MvnBody(1.75)
    xsens = Retargeter(load_ik_config("xsens", model=model), RetargetOptions(fps=60.0, human_height=1.75),
                         model=model)
    axis = Retargeter(load_ik_config("axis_studio", model=model), RetargetOptions(fps=60.0, human_height=1.75),
                        model=model)
    diffs = []
    for f in range(0, 120, 2):
        t = f / 60.0
        sent = body.pose(t)
        a = xsens.retarget(sent.positions, sent.quaternions)
        b = axis.retarget(*body.fk.bodies(pose_channels(body.skeleton, mvn.ROTATION_ORDER, t)))
        assert not a.ik_failed and not b.ik_failed
        diffs.append(np.abs(a.qpos[7:] - b.qpos[7:]))
    assert np.degrees(np.max(diffs)) < 8.0 and np.degrees(np.mean(diffs)) < 1.5


@pytest.mark.parametrize("argv, refused", [
    (["--format", "mvn", "--split", "1024"], "--split"),
    (["--format", "mvn", "--tcp-listen", "7001"], "--tcp-listen"),
    (["--gloves", "--props", "1"], "--gloves, --props"),
])
def test_flags_of_the_other_format_are_refused(capsys: pytest.CaptureFixture[str], argv: list[str],
                                               refused: str) -> None:
    assert emitter.main([*argv, "--dest", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mocapline emit: {refused}: for --format")


def test_an_axis_setting_from_the_environment_is_refused_too(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MOCAPLINE_SKELETON", "pn")
    assert emitter.main(["--format", "mvn", "--dest", "127.0.0.1:9"]) == 2
    assert "--skeleton: for --format axis only" in capsys.readouterr().err


def test_demo_refuses_axis_flags_with_the_xsens_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--source", "xsens", "--merge", "--split", "1024"]) == 2  # before starting anything
    assert capsys.readouterr().err.strip() == ("mocapline demo: --merge, --split: for --source axis only, not read "
                                               "by --source xsens")
    assert demo.main(["--gloves"]) == 2


def test_heights_and_names_flags() -> None:
    assert mvn.parse_heights("1.8,1.62") == [1.8, 1.62]
    with pytest.raises(Exception, match="0.5-2.5"):
        mvn.parse_heights("175")
    take = mvn.MvnTake(performers=2, props=2, names=["Alice"])
    assert [take.name(c) for c in range(4)] == ["Alice", "Performer2", "Prop1", "Prop2"]
    assert take.height(1) == 1.75
