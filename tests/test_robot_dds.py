"""The low-level DDS link hands its last samples over before it goes: a bridge's final LowCmd (its
damping) is written just before it exits, and dropped at once it did not always reach the robot
(the sim counted 3012 of 3013)."""

from __future__ import annotations

import pytest

pytest.importorskip("cyclonedds")

from robot_rig import private_domain  # noqa: E402


def test_closing_waits_for_each_writers_readers_within_the_linger_then_drops_the_participant(monkeypatch) -> None:
    from mocapline.robot.registry import get_robot
    from mocapline.robot.unitree.dds import CLOSE_LINGER_S, LowLevel, RawWriter, dds_settings
    from mocapline.robot.unitree.family import family

    robot = get_robot("g1")
    settings = dds_settings(robot, private_domain(), "lo")
    ll = LowLevel(settings)
    command, state = ll.command_writer(), ll.state_writer()
    asked: list[tuple[RawWriter, float, bool]] = []
    real = RawWriter.wait_for_acks

    def recorded(self: RawWriter, timeout_s: float) -> bool:
        asked.append((self, timeout_s, ll.participant is not None))
        return real(self, timeout_s)

    monkeypatch.setattr(RawWriter, "wait_for_acks", recorded)
    kind = family(robot.low_level.family)
    cmd = kind.new_low_cmd()
    kind.low_cmd.seal(cmd)
    command.write(kind.low_cmd.sample(cmd))  # a bridge's last LowCmd, just before it goes
    ll.close()
    assert [w for w, _, _ in asked] == [command, state]
    assert all(0 < timeout <= CLOSE_LINGER_S and alive for _, timeout, alive in asked), asked
    assert ll.participant is None
