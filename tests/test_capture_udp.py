"""Capture as a real process on loopback UDP, driven by the emitter."""

import numpy as np
import pytest

from mocapline.tools.emitter.emitter import TakePlan, emit_take

pytestmark = pytest.mark.integration


def test_take008_over_udp(capture_factory) -> None:
    cap = capture_factory(1)
    plan = TakePlan(frames=3151, first_index=9368, duplicate={12518})
    emit_take(plan, cap.dests(), rate_hz=2000)
    frames, ledger = cap.collect()
    assert ledger["source_received"] == 3152
    assert ledger["source_unique_frames"] == 3151
    assert ledger["source_duplicate_indices"] == 1
    assert ledger["source_missing_indices"] == 0
    assert ledger["source_backward_indices"] == 0
    assert ledger["rejected_datagrams"] == 0
    assert (ledger["first_posture_index"], ledger["last_posture_index"]) == (9368, 12518)
    assert ledger["input_pending"] == 0
    assert [f.posture_index for f in frames] == list(range(9368, 12519))
    assert ledger["human_frames_sent"] == 3151
    f = frames[0]
    assert f.positions.shape == (23, 3) and np.allclose(np.linalg.norm(f.quaternions, axis=1), 1.0)
    assert 0.5 < f.positions[0, 2] < 1.2  # hips height in metres, Z-up


def test_gap_on_main_only_is_recovered_by_merge(capture_factory) -> None:
    cap = capture_factory(2)
    plan = TakePlan(frames=400, first_index=1000, skip_main={1100, 1101, 1102, 1250})
    emit_take(plan, cap.dests(), rate_hz=1000)
    frames, ledger = cap.collect()
    assert [f.posture_index for f in frames] == list(range(1000, 1400))
    assert ledger["source_missing_indices"] == 0
    main, side = (ledger["paths"][str(p)] for p in cap.ports)
    assert main["source_missing_indices"] == 4 and side["source_missing_indices"] == 0
    assert main["source_missing_ranges"] == [[1100, 1102], [1250, 1250]]


def test_gap_on_both_paths_is_recorded(capture_factory) -> None:
    cap = capture_factory(2)
    plan = TakePlan(frames=300, first_index=0, skip_all={50, 51, 200}, skip_side={120})
    emit_take(plan, cap.dests(), rate_hz=1000)
    frames, ledger = cap.collect()
    expected = [i for i in range(300) if i not in (50, 51, 200)]
    assert [f.posture_index for f in frames] == expected
    assert ledger["source_missing_indices"] == 3
    assert ledger["missing_ranges"] == [[50, 51], [200, 200]]


def test_garbage_is_rejected_and_counted(capture_factory) -> None:
    cap = capture_factory(1)
    plan = TakePlan(frames=200, first_index=5, garbage=400, seed=3)
    emit_take(plan, cap.dests(), rate_hz=2000)
    frames, ledger = cap.collect()
    assert len(frames) == 200
    assert ledger["rejected_datagrams"] == 400
    assert sum(ledger["rejected_by_reason"].values()) == 400
    assert ledger["source_received"] == 200


def test_recording_replays_to_the_same_frames(capture_factory, tmp_path) -> None:
    rec = tmp_path / "take.mlrec"
    cap = capture_factory(1, ["--record", str(rec)])
    emit_take(TakePlan(frames=120, first_index=7, duplicate={50}), cap.dests(), rate_hz=500)
    frames, ledger = cap.collect()
    from mocapline.tools.emitter.emitter import replay

    cap2 = capture_factory(1)
    stats = replay(rec, cap2.dests(), speed=0)
    frames2, ledger2 = cap2.collect()
    assert stats.frames == 121
    assert [f.posture_index for f in frames2] == [f.posture_index for f in frames]
    assert ledger2["source_duplicate_indices"] == 1
    np.testing.assert_array_equal(frames2[-1].positions, frames[-1].positions)


def test_xsens_source_over_udp(capture_factory) -> None:
    import socket

    from mocapline.formats.mxtp02 import encode_mxtp02

    cap = capture_factory(1, ["--source", "xsens"])
    rng = np.random.default_rng(1)
    positions = rng.normal(size=(23, 3)) * 0.2 + [0.0, 0.0, 1.0]
    quats = rng.normal(size=(23, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats *= np.sign(quats[:, :1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for counter in [500, 501, 501, 503]:
            s.sendto(encode_mxtp02(counter, positions, quats), cap.dests()[0])
        s.sendto(b"MXTP02 but far too short", cap.dests()[0])
    frames, ledger = cap.collect()
    assert [f.posture_index for f in frames] == [500, 501, 503]
    assert ledger["source_duplicate_indices"] == 1 and ledger["source_missing_indices"] == 1
    assert ledger["rejected_datagrams"] == 1
    np.testing.assert_allclose(frames[0].positions, positions, atol=1e-6)
    np.testing.assert_allclose(frames[0].quaternions, quats, atol=1e-6)


def test_sigterm_stops_a_capture_whose_consumer_is_gone(capture_factory) -> None:
    """Plain link, its consumer gone: the sends block (PUSH never drops), yet SIGTERM stops capture
    at once with its final counts, instead of waiting for the SIGKILL that follows."""
    import json
    import signal
    import subprocess

    from helpers import wait_until

    cap = capture_factory(1, ["--exit-on-idle", "0"])
    emit_take(TakePlan(frames=20, first_index=100), cap.dests(), rate_hz=500)
    got = wait_until(lambda: cap.rx.recv(200), 10, what="a frame from capture")
    assert got is not None
    cap.rx.socket.close(linger=0)  # the consumer goes away; capture's PUSH has no peer now
    emit_take(TakePlan(frames=200, first_index=120), cap.dests(), rate_hz=1000)
    cap.proc.send_signal(signal.SIGTERM)
    try:
        out, err = cap.proc.communicate(timeout=5)  # not the hang: a SIGKILL would come after 10 s
    except subprocess.TimeoutExpired:
        pytest.fail("capture ignored SIGTERM while its output had no consumer")
    assert cap.proc.returncode == 0, err
    final = json.loads(out.strip().splitlines()[-1])
    assert final["source_unique_frames"] == 220
    assert "had no consumer" in err
