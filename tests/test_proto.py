import numpy as np
import pytest

from mocapline.core import pb
from mocapline.core.frames import FrameFieldError, HumanFrame, RobotFrame
from mocapline.tools.protogen import is_stale


def test_generated_code_is_up_to_date() -> None:
    assert not is_stale(), "proto/mocap.proto changed: run `python -m mocapline.tools.protogen`"


def test_mocap_frame_field_numbers_never_change() -> None:
    fields = {f.name: f.number for f in pb.MocapFrame.DESCRIPTOR.fields}
    original = ["index", "body_pos_w", "body_lin_vel_w", "body_quat_w", "body_ang_vel_w",
             "joint_pos", "joint_vel", "left_hand", "right_hand"]
    assert [fields[n] for n in original] == list(range(1, 10))
    assert fields["posture_index"] == 10 and fields["traceparent"] == 15


def test_human_frame_round_trip() -> None:
    rng = np.random.default_rng(0)
    f = HumanFrame(9368, 123, rng.normal(size=(23, 3)), rng.normal(size=(23, 4)), traceparent="tp", segment=2)
    g = HumanFrame.from_bytes(f.to_bytes())
    assert g.posture_index == 9368 and g.segment == 2 and g.traceparent == "tp"
    np.testing.assert_array_equal(g.positions, f.positions)
    np.testing.assert_array_equal(g.quaternions, f.quaternions)


def test_robot_frame_round_trip_and_length_check() -> None:
    f = RobotFrame(7, 1, np.arange(3.0), np.array([1.0, 0, 0, 0]), np.linspace(-1, 1, 29), ik_failed=True)
    g = RobotFrame.from_bytes(f.to_bytes(), 29)
    np.testing.assert_array_equal(g.joint_pos, f.joint_pos)
    assert g.ik_failed
    msg = f.to_proto()
    del msg.joint_pos[-1]
    with pytest.raises(FrameFieldError, match="joint_pos has 28"):
        RobotFrame.from_proto(msg, 29)
    assert len(RobotFrame.from_proto(msg).joint_pos) == 28  # no count given: the header's was checked


def test_human_frame_rejects_short_arrays() -> None:
    msg = pb.HumanFrame(posture_index=1, positions=[0.0] * 66, quaternions=[0.0] * 92)
    with pytest.raises(FrameFieldError, match="positions"):
        HumanFrame.from_proto(msg)
