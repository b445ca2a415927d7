"""`mocapline.tools.port_player`: a G1 clip as the streamer's MocapFrames (what `bench robot` plays
of a CMU take), and the player's port as a consumer sees it (header, CRC, order, stamps, END)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from g1_facts import load_ik_model

from mocapline.client import ClientSettings, MocapClient
from mocapline.core import quat as Q
from mocapline.tools.port_player import PortPlayer, clip_frames, joint_frame, root_angular_velocity
from mocapline.tools.recorder.export import forward_kinematics


def _clip(n: int = 12, fps: float = 60.0) -> dict[str, np.ndarray]:
    """A root moving at 0.5 m/s along x while turning at 1 rad/s about z, arms swinging."""
    t = np.arange(n) / fps
    pos = np.stack((0.5 * t, np.zeros(n), np.full(n, 0.8)), axis=1)
    rot = Q.from_axis_angle(np.array([0.0, 0.0, 1.0]), 1.0 * t)
    q = np.zeros((n, 29))
    q[:, 15:29] = 0.3 * np.sin(2 * np.pi * t)[:, None]
    return {"time": t, "q": q, "qd": np.gradient(q, t, axis=0), "root_pose": np.concatenate((pos, rot), axis=1),
            "posture_index": 2 * np.arange(n)}


def test_a_clip_becomes_one_frame_per_sample_with_its_joints_root_velocities_and_hands() -> None:
    clip = _clip()
    frames = clip_frames(clip, first_posture_index=500)
    assert [f.index for f in frames] == list(range(12))
    assert [f.posture_index for f in frames] == [500 + 2 * k for k in range(12)]
    assert all(f.posture_index_first == f.posture_index_last == f.posture_index for f in frames)
    assert all(f.capture_timestamp_us == 0 for f in frames)
    np.testing.assert_allclose([f.source_time_s for f in frames], clip["time"])
    np.testing.assert_allclose([list(f.joint_pos) for f in frames], clip["q"], atol=1e-6)
    np.testing.assert_allclose([list(f.joint_vel) for f in frames], clip["qd"], atol=1e-5)
    np.testing.assert_allclose([list(f.body_pos_w) for f in frames], clip["root_pose"][:, :3], atol=1e-6)
    np.testing.assert_allclose([list(f.body_quat_w) for f in frames], clip["root_pose"][:, 3:], atol=1e-6)
    np.testing.assert_allclose([list(f.body_lin_vel_w) for f in frames], [[0.5, 0, 0]] * 12, atol=1e-5)
    np.testing.assert_allclose([list(f.body_ang_vel_w) for f in frames], [[0, 0, 1.0]] * 12, atol=1e-5)
    model = load_ik_model()
    pos, quat, names = forward_kinematics(clip["root_pose"][:, :3], clip["root_pose"][:, 3:], clip["q"], model)
    for side, body in (("left_hand", "left_wrist_yaw_link"), ("right_hand", "right_wrist_yaw_link")):
        b = names.index(body)
        expected = np.concatenate((pos[:, b], quat[:, b]), axis=1)
        np.testing.assert_allclose([list(getattr(f, side)) for f in frames], expected, atol=1e-5)


def test_root_angular_velocity_is_one_sided_at_the_ends_and_zero_for_one_sample() -> None:
    t = np.array([0.0, 0.1, 0.3])
    rot = Q.from_axis_angle(np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.2, 0.2]))
    w = root_angular_velocity(t, rot)
    np.testing.assert_allclose(w[:, 0], [2.0, 0.2 / 0.3, 0.0], atol=1e-12)
    np.testing.assert_allclose(w[:, 1:], 0.0, atol=1e-12)
    assert root_angular_velocity(t[:1], rot[:1]).shape == (1, 3) and not root_angular_velocity(t[:1], rot[:1]).any()


def test_the_player_serves_every_frame_in_order_stamped_as_sent_then_the_end(tmp_path) -> None:
    player = PortPlayer(tmp_path / "port")
    client = MocapClient(ClientSettings(player.endpoint, name="robot"))
    try:
        frames = [joint_frame(k, np.full(29, 0.01 * k), np.zeros(29), k / 50) for k in range(30)]
        player.play(frames, rate=1000.0, end=True)
        got, end = [], None
        deadline = time.monotonic() + 20
        while end is None and time.monotonic() < deadline:
            f = client.recv(100)
            if f is None:
                continue
            if f.is_end:
                end = f
            else:
                assert f.mocap is not None
                got.append(f.mocap)
        assert end is not None, f"{len(got)} frames, no END_OF_STREAM"
        assert [m.posture_index for m in got] == [1000 + k for k in range(30)]
        assert [m.joint_pos[0] for m in got] == pytest.approx([0.01 * k for k in range(30)])
        stamps = [m.capture_timestamp_us for m in got]
        assert stamps[0] > 0 and stamps == sorted(stamps)
        assert player.connected("robot") and player.produced == 30
        client.commit()
        deadline = time.monotonic() + 10
        while player.counts()["delivered"] < 30 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert player.counts() == {"delivered": 30, "unconfirmed": 0, "pending": 0}
    finally:
        client.close()
        player.close()
