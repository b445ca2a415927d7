"""MotionStreamInterpolator on trajectories whose exact values are known."""

import numpy as np
import pytest

from mocapline.core import quat as Q
from mocapline.core.frames import RobotFrame
from mocapline.services.streamer.interpolator import MotionStreamInterpolator

AXIS = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
OMEGA = 1.7  # rad/s about AXIS
JOINT_A = np.linspace(-0.5, 0.5, 29)
JOINT_B = np.linspace(1.0, -2.0, 29)  # rad/s
ROOT_A = np.array([0.1, -0.2, 0.78])
ROOT_B = np.array([0.4, -0.3, 0.05])  # m/s


def state(t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root position, root quaternion and joints at time t: linear / constant angular velocity."""
    return ROOT_A + ROOT_B * t, Q.from_axis_angle(AXIS, OMEGA * t), JOINT_A + JOINT_B * t


def frame(index: int, fps: float, first: int = 1000, **kw) -> RobotFrame:
    p, q, j = state((index - first) / fps)
    return RobotFrame(posture_index=index, capture_timestamp_us=index * 10, root_pos=p, root_quat=q, joint_pos=j, **kw)


def feed(interp: MotionStreamInterpolator, indices, fps: float, first: int = 1000):
    per_push = []
    for i in indices:
        per_push.append(interp.push(frame(i, fps, first)))
    return per_push


def assert_on_trajectory(sample, t: float) -> None:
    p, q, j = state(t)
    assert sample.time_s == pytest.approx(t, abs=1e-12)
    np.testing.assert_allclose(sample.root_pos, p, atol=1e-12)
    np.testing.assert_allclose(sample.joint_pos, j, atol=1e-12)
    assert abs(np.dot(sample.root_quat, q)) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(sample.root_lin_vel, ROOT_B, atol=1e-9)
    np.testing.assert_allclose(sample.joint_vel, JOINT_B, atol=1e-9)
    np.testing.assert_allclose(sample.root_ang_vel, OMEGA * AXIS, atol=1e-9)


def test_equal_rates_are_one_to_one_bit_exact_and_immediate() -> None:
    interp = MotionStreamInterpolator(60, 60)
    frames = [frame(i, 60.0) for i in range(1000, 1030)]
    for k, f in enumerate(frames):
        out = interp.push(f)
        assert len(out) == 1  # emitted on the same call: no latency
        s = out[0]
        assert (s.index, s.source_first, s.source_last) == (k, f.posture_index, f.posture_index)
        np.testing.assert_array_equal(s.joint_pos, f.joint_pos)
        np.testing.assert_array_equal(s.root_pos, f.root_pos)
        np.testing.assert_array_equal(s.root_quat, f.root_quat / np.linalg.norm(f.root_quat))
        assert s.capture_timestamp_us == f.capture_timestamp_us
        if k == 0:
            assert not s.joint_vel.any() and not s.root_lin_vel.any() and not s.root_ang_vel.any()
        else:
            np.testing.assert_allclose(s.joint_vel, (f.joint_pos - frames[k - 1].joint_pos) * 60, rtol=1e-12)
            np.testing.assert_allclose(s.root_ang_vel, OMEGA * AXIS, atol=1e-9)
    assert interp.stats.samples_out == interp.stats.frames_in == 30


@pytest.mark.parametrize("fps_in, fps_out", [(30, 60), (30, 50), (60, 30), (50, 60), (60, 45), (120, 60)])
def test_resampled_samples_lie_on_the_known_trajectory(fps_in, fps_out) -> None:
    interp = MotionStreamInterpolator(fps_in, fps_out)
    pushes = feed(interp, range(1000, 1000 + fps_in + 1), fps_in)  # one second, both ends
    samples = [s for out in pushes for s in out]
    # exactly the output clock's ticks in [0, 1 s]
    assert [s.index for s in samples] == list(range(fps_out + 1))
    for k, s in enumerate(samples):
        t = k / fps_out
        if k == 0:
            assert s.time_s == 0.0
            continue
        assert_on_trajectory(s, t)
    # every sample is emitted by the first frame at or after its time: causal, minimal delay
    for i, out in enumerate(pushes):
        for s in out:
            assert (i - 1) / fps_in < s.time_s + 1e-12 <= i / fps_in + 1e-12


def test_source_ranges_cover_every_input_frame() -> None:
    # downsampling folds skipped frames into the next sample
    interp = MotionStreamInterpolator(60, 30)
    samples = [s for out in feed(interp, range(1000, 1009), 60.0) for s in out]
    assert [(s.source_first, s.source_last) for s in samples] == [
        (1000, 1000), (1001, 1002), (1003, 1004), (1005, 1006), (1007, 1008)]
    # upsampling: interior samples name both ends, on-frame samples their frame
    interp = MotionStreamInterpolator(30, 60)
    samples = [s for out in feed(interp, range(1000, 1003), 30.0) for s in out]
    assert [(s.source_first, s.source_last) for s in samples] == [
        (1000, 1000), (1000, 1001), (1001, 1001), (1001, 1002), (1002, 1002)]
    # non-integer ratio: no input frame is left out of every range
    interp = MotionStreamInterpolator(60, 45)
    samples = [s for out in feed(interp, range(1000, 1061), 60.0) for s in out]
    covered = set()
    for s in samples:
        covered.update(range(s.source_first, s.source_last + 1))
    assert covered == set(range(1000, 1061))


def test_missing_indices_stretch_time_instead_of_speeding_up() -> None:
    interp = MotionStreamInterpolator(60, 60)
    indices = [1000, 1001, 1002, 1006, 1007]  # 1003..1005 lost upstream
    pushes = feed(interp, indices, 60.0)
    assert [len(o) for o in pushes] == [1, 1, 1, 4, 1]
    gap = pushes[3]
    for k, s in enumerate(gap):
        assert_on_trajectory(s, (3 + k) / 60)
        assert (s.source_first, s.source_last) == ((1002, 1006) if k < 3 else (1006, 1006))


def test_new_take_restarts_the_clock_and_duplicates_are_ignored() -> None:
    interp = MotionStreamInterpolator(60, 60)
    feed(interp, range(1000, 1005), 60.0)
    assert interp.push(frame(1004, 60.0)) == []
    assert interp.stats.duplicates == 1
    out = interp.push(frame(50, 60.0, first=50))  # Axis restarted: index went backwards
    assert len(out) == 1 and out[0].time_s == 0.0 and out[0].take == 2
    assert not out[0].joint_vel.any()
    assert out[0].index == 5  # the output sequence number keeps counting
    out = interp.push(frame(51, 60.0, first=50, segment=1))  # a new segment is a new take too
    assert out[0].time_s == 0.0 and interp.stats.takes == 3


def test_quaternion_sign_flips_do_not_spin_the_root() -> None:
    interp = MotionStreamInterpolator(30, 60)
    f0, f1 = frame(1000, 30.0), frame(1001, 30.0)
    f1.root_quat = -f1.root_quat  # same rotation, other sign
    interp.push(f0)
    mid, end = interp.push(f1)
    assert_on_trajectory(mid, 1 / 60)
    np.testing.assert_allclose(end.root_ang_vel, OMEGA * AXIS, atol=1e-9)


def test_ik_failure_and_identity_propagate() -> None:
    interp = MotionStreamInterpolator(30, 60)
    interp.push(frame(1000, 30.0, traceparent="00-a-b-01", session_id="s"))
    mid, end = interp.push(frame(1001, 30.0, ik_failed=True, traceparent="00-c-d-01", session_id="s"))
    assert mid.ik_failed and end.ik_failed
    assert end.traceparent == "00-c-d-01" and end.session_id == "s" and end.capture_timestamp_us == 10010
    nxt = interp.push(frame(1002, 30.0))
    assert nxt[0].ik_failed  # the interior sample still mixes the failed frame in
    assert not nxt[1].ik_failed


def test_rates_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MotionStreamInterpolator(0, 60)


def test_flush_ends_the_take_and_holds_nothing_back() -> None:
    interp = MotionStreamInterpolator(30, 60)
    feed(interp, range(1000, 1004), 30.0)
    assert interp.pending == 0
    assert interp.flush() == []
    out = interp.push(frame(1004, 30.0))  # the next frame starts a new take at t = 0
    assert len(out) == 1 and out[0].time_s == 0.0 and interp.stats.takes == 2
    assert (out[0].posture_index, out[0].posture_index_first, out[0].posture_index_last) == (1004, 1004, 1004)


def test_a_bridged_gap_carries_its_own_indices_and_real_frames_are_never_repeated() -> None:
    """1100..1102 missing upstream: three frames flagged bridged with 1100, 1101, 1102, then the
    real 1103 once (the samples used to carry 1103 four times)."""
    m = MotionStreamInterpolator(60.0, 60.0)
    out = []
    for i in (1098, 1099, 1103, 1104):
        out += m.push_values(i, np.zeros(3), np.array([1.0, 0, 0, 0]), np.full(29, float(i)))
    assert [(s.posture_index, s.bridged) for s in out] == [
        (1098, False), (1099, False), (1100, True), (1101, True), (1102, True), (1103, False), (1104, False)]
    assert [s.joint_pos[0] for s in out[2:5]] == pytest.approx([1100.0, 1101.0, 1102.0])
    assert m.stats.bridged == 3
