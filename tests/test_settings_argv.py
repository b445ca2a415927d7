"""Each service's settings render their own command line: parsing ``to_argv()`` gives the same
settings back, from the defaults and from flags that change every kind of value."""

from __future__ import annotations

import pytest

from mocapline.services.auditor import service as auditor
from mocapline.services.capture import service as capture
from mocapline.services.retarget import service as retarget
from mocapline.services.robot import service as robot
from mocapline.services.streamer import service as streamer
from mocapline.services.viewer import service as viewer
from mocapline.tools.sim import service as sim

STAGE = ["--nats=nats://127.0.0.1:4999", "--log-level=DEBUG", "--metrics-port=0", "--fsync=always",
         "--segment-mb=8.5", "--retain-mb=100", "--window=64"]


def capture_settings(args: list[str]) -> capture.CaptureSettings:
    return capture.CaptureSettings.from_args(capture.build_parser().parse_args(args))


def retarget_settings(args: list[str]) -> retarget.RetargetSettings:
    return retarget.RetargetSettings.from_args(retarget.build_parser().parse_args(args))


def streamer_settings(args: list[str]) -> streamer.StreamerSettings:
    return streamer.StreamerSettings.from_args(streamer.build_parser().parse_args(args))


def viewer_settings(args: list[str]) -> viewer.ViewerSettings:
    return viewer.ViewerSettings.from_args(viewer.build_parser().parse_args(args))


def auditor_settings(args: list[str]) -> auditor.AuditorSettings:
    return auditor.settings_from(auditor.AuditorSettings, auditor.build_parser().parse_args(args))


def robot_settings(args: list[str]) -> robot.RobotSettings:
    return robot.RobotSettings.from_args(robot.build_parser().parse_args(args))


def sim_settings(args: list[str]) -> sim.SimSettings:
    return sim.settings_from(sim.SimSettings, sim.build_parser().parse_args(args))


CASES = [
    (capture_settings, []),
    (capture_settings, ["--source=xsens", "--ports", "9000", "9001", "--position-unit=auto", "--merge-window-ms=80",
                        "--allow-source", "10.0.0.2", "--udp-fds=5,6", "--status-interval=0", *STAGE]),
    (capture_settings, ["--transport=tcp", "--axis=10.1.2.3:7002", "--ports", "7015", "--header-format=current",
                        "--rotation-order=ZXY", "--state-dir=/tmp/x", "--output-fanout", "--checkpoint-s=0.5"]),
    (capture_settings, ["--skeleton=pn", "--header-format=legacy"]),
    (retarget_settings, []),
    (retarget_settings, ["--human-height=1.62", "--performer-height=Ann=1.55", "--performer-height=Bo=1.9",
                         "--no-velocity-limit", "--backend=mink", "--filter=smooth3", "--iterations=7",
                         "--input-fps=120", "--ik-config=xsens", "--robot-model=h1"]),
    (retarget_settings, ["--worker=w2", "--state-dir=/tmp/s", "--output=tcp://127.0.0.1:*", *STAGE]),
    (streamer_settings, []),
    (streamer_settings, ["--fan-in", "--state-dir=/tmp/s", "--plain-output", "--output-fps=50",
                         "--record-frames=/tmp/r", *STAGE]),
    (viewer_settings, []),
    (viewer_settings, ["--display=none", "--web-port=8099", "--plots-dir=/tmp/p", "--exit-on-end", "--name=v2",
                       "--idle-batch-ms=0", *STAGE]),
    (viewer_settings, ["--robot-domain=0", "--robot-interface=enp3s0"]),
    (auditor_settings, []),
    (auditor_settings, ["--side-port=0", "--side-fd=7", "--sd-port=0", "--metrics-port=0", "--interval=0.5"]),
    (robot_settings, []),
    (robot_settings, ["--no-feed-forward", "--no-bias", "--joints=upper", "--rate=250", "--stall-ms=70",
                      "--stall-damp-ms=1500", "--lag-target-ms=7", "--rest-after-end", "--domain=0",
                      "--interface=enp3s0", "--performer=2", "--name=g1", "--robot-model=h1", *STAGE]),
    (sim_settings, []),
    (sim_settings, ["--base=fixed", "--clock=lockstep", "--duration=2.5", "--domain=7", "--interface=lo"]),
    (sim_settings, ["--robot-model=g1_23"]),
    (streamer_settings, ["--robot-model=g1_dex3"]),
    (viewer_settings, ["--robot-model=h1"]),
]


@pytest.mark.parametrize(("parse", "args"), CASES)
def test_parsing_to_argv_gives_the_same_settings(parse, args) -> None:
    settings = parse(args)
    assert parse(settings.to_argv()) == settings


def test_settings_at_their_defaults_render_no_flag(monkeypatch) -> None:
    for name in ("MOCAPLINE_METRICS_PORT", "MOCAPLINE_NATS"):
        monkeypatch.delenv(name, raising=False)
    for kind in (retarget.RetargetSettings, streamer.StreamerSettings, viewer.ViewerSettings, auditor.AuditorSettings,
                 robot.RobotSettings, sim.SimSettings):
        assert kind.defaults().to_argv() == [], kind
    # capture's ports follow from its source when none is given: they are always written out
    assert capture.CaptureSettings.defaults().to_argv() == ["--ports", "7014"]


def test_a_changed_mode_is_one_flag() -> None:
    from dataclasses import replace

    settings = replace(capture.CaptureSettings.defaults(), transport="tcp", axis=("10.0.0.9", 7001), ports=[])
    assert settings.to_argv() == ["--transport=tcp", "--ports", "--axis=10.0.0.9:7001"]


def test_a_skeleton_alias_renders_as_the_skeleton_it_names() -> None:
    settings = capture_settings(["--skeleton=pn"])
    assert settings.skeleton == "pn_pro" and "--skeleton=pn_pro" in settings.to_argv()
