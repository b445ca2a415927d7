"""The stack plans its processes as each service's settings: every command line it starts parses
back to the settings it planned, and carries what the stack's config asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from mocapline.services.auditor import service as auditor
from mocapline.services.capture import service as capture
from mocapline.services.retarget import service as retarget
from mocapline.services.robot import service as robot
from mocapline.services.streamer import service as streamer
from mocapline.services.viewer import service as viewer
from mocapline.tools.pipeline.plan import as_worker, plan
from mocapline.tools.pipeline.stack import StackConfig
from mocapline.tools.sim import service as sim

PARSE = {
    "auditor": lambda a: auditor.settings_from(auditor.AuditorSettings, auditor.build_parser().parse_args(a)),
    "capture": lambda a: capture.CaptureSettings.from_args(capture.build_parser().parse_args(a)),
    "retarget": lambda a: retarget.RetargetSettings.from_args(retarget.build_parser().parse_args(a)),
    "streamer": lambda a: streamer.StreamerSettings.from_args(streamer.build_parser().parse_args(a)),
    "viewer": lambda a: viewer.ViewerSettings.from_args(viewer.build_parser().parse_args(a)),
    "robot": lambda a: robot.RobotSettings.from_args(robot.build_parser().parse_args(a)),
    "sim": lambda a: sim.settings_from(sim.SimSettings, sim.build_parser().parse_args(a)),
}


@pytest.fixture(autouse=True)
def _declared_defaults(monkeypatch) -> None:
    """The command lines parsed as a service would with no MOCAPLINE_* variable (the stack gives
    its children their NATS address as one: not part of what is compared here)."""
    for name in ("MOCAPLINE_METRICS_PORT", "MOCAPLINE_METRICS_HOST", "MOCAPLINE_NATS"):
        monkeypatch.delenv(name, raising=False)


def planned(config: StackConfig, fds: dict[str, tuple[int, ...]] | None = None, workers: list[str] | None = None):
    out = {p.name: p for p in plan(config, fds or {}, workers or [])}
    for p in out.values():
        assert PARSE[p.command](p.settings.to_argv()) == p.settings, p.name
    return {name: p.settings for name, p in out.items()}


def test_a_plain_stack() -> None:
    s = planned(StackConfig(main_port=9014, side_port=9015, human_port=9556, display="none", human_height=1.7,
                            metrics_ports={"capture": 0}))
    assert list(s) == ["auditor", "capture", "retarget", "streamer", "viewer"]
    assert s["capture"].ports == [9014] and s["capture"].output == "tcp://127.0.0.1:9556"
    assert s["capture"].stage.metrics_port == 0 and s["capture"].stage.state_dir is None
    assert s["retarget"].input == "tcp://127.0.0.1:9556" and s["retarget"].options.human_height == 1.7
    assert s["auditor"].side_port == 9015 and s["viewer"].display == "none"


def test_a_durable_scaled_out_xsens_stack(tmp_path: Path) -> None:
    config = StackConfig(source="xsens", merge=True, state_dir=tmp_path, fsync="always", viewer=False,
                         plain_output=True, retarget_workers=2)
    s = planned(config, {"capture": (5, 6)}, ["w1", "w2"])
    assert list(s) == ["auditor", "capture", "retarget.w1", "retarget.w2", "streamer"]
    assert s["capture"].output_fanout and s["capture"].udp_fds == [5, 6] and s["capture"].ports == [7014, 7015]
    assert s["capture"].stage.state_dir == tmp_path / "capture" and s["capture"].stage.log.fsync == "always"
    assert s["streamer"].fan_in and s["streamer"].plain_output
    w2 = s["retarget.w2"]
    assert w2.worker == "w2" and w2.stage.state_dir == tmp_path / "retarget.w2" / "w2"
    assert w2.ik_config == "xsens" and w2.output == "tcp://127.0.0.1:*" and w2.stage.metrics_port == 0
    assert s["auditor"].side_port == 0  # merged: no side path of its own
    w3 = as_worker(w2, "w3", tmp_path)
    assert retarget.RetargetSettings.from_args(retarget.build_parser().parse_args(w3.to_argv())) == w3
    assert "--worker=w3" in w3.to_argv() and f"--state-dir={tmp_path / 'retarget.w3'}" in w3.to_argv()


def test_over_tcp_capture_listens_only_on_the_side_path_when_merging() -> None:
    s = planned(StackConfig(transport="tcp", axis_port=7101, merge=True, side_port=7115, viewer=False))
    assert s["capture"].transport == "tcp" and s["capture"].axis == ("127.0.0.1", 7101)
    assert s["capture"].ports == [7115]


def test_the_robot_end_drives_the_sim_on_the_configs_domain(tmp_path: Path) -> None:
    config = StackConfig(output_port=9555, state_dir=tmp_path, robot="sim", robot_domain=42, robot_interface="lo",
                         robot_args=["--no-bias", "--rate=250"])
    s = planned(config)
    assert list(s)[-2:] == ["sim", "robot"]
    assert s["sim"].domain == 42 and s["sim"].interface == "lo" and s["sim"].base == "band"
    r = s["robot"]
    assert r.input == "tcp://127.0.0.1:9555" and r.domain == 42 and not r.control.bias and r.control.rate == 250
    assert r.stage.state_dir == tmp_path / "robot"
    assert s["viewer"].robot_domain == 42 and s["viewer"].robot_interface == "lo"  # the page draws the sim's G1
    g1 = planned(StackConfig(robot="g1", robot_domain=0, robot_interface="eth0"))
    assert "sim" not in g1 and g1["viewer"].robot_domain == 0 and g1["viewer"].robot_interface == "eth0"
    assert planned(StackConfig(robot_domain=3)).get("viewer").robot_domain is None  # no robot: no LowState read


def test_up_puts_the_suit_on_a_standing_g1_with_the_policy_or_beside_the_vendors_balance(tmp_path: Path) -> None:
    """`up --robot sim --base free --controller policy --policy F [--robot-clock lockstep]`, and
    `--controller arm-sdk` (the sim's stand-in for the vendor's controller takes rt/arm_sdk)."""
    policy = planned(StackConfig(state_dir=tmp_path, robot="sim", robot_base="free", robot_controller="policy",
                                 robot_policy="/p/twist2.onnx", robot_clock="lockstep"))
    sim, r = policy["sim"], policy["robot"]
    assert sim.base == "free" and sim.clock == "lockstep" and sim.vendor_controller == "none"
    assert r.controller == "policy" and r.policy == "/p/twist2.onnx" and r.clock == "lowstate"
    assert r.control.max_speed == 1.0  # the stream at 1x of the robot's simulated time
    assert robot.RobotSettings.from_args(robot.build_parser().parse_args(r.to_argv())) == r
    assert policy["retarget"].options.joint_ranges == "human"  # the shoulders keep one branch for the policy
    assert "--joint-ranges=human" in policy["retarget"].to_argv()
    arms = planned(StackConfig(state_dir=tmp_path, robot="sim", robot_controller="arm-sdk"))
    assert arms["sim"].vendor_controller == "stand" and arms["robot"].controller == "arm-sdk"
    assert arms["sim"].clock == "realtime" and arms["robot"].clock == "wall"
    assert arms["retarget"].options.joint_ranges == "full"
    with pytest.raises(ValueError, match="--policy FILE.onnx"):
        planned(StackConfig(robot="sim", robot_controller="policy"))


def test_the_robots_extra_flags_do_not_pick_up_this_processs_environment(monkeypatch) -> None:
    monkeypatch.setenv("MOCAPLINE_NATS", "")  # as the test suite runs: no NATS in this process
    robot_argv = [p for p in plan(StackConfig(robot="g1", robot_args=["--no-bias"]), {}, [])][-1].settings.to_argv()
    assert not any(a.startswith("--nats") for a in robot_argv) and "--no-bias" in robot_argv


def test_axis_neuron_skeleton_reaches_capture_from_up_and_demo(tmp_path: Path) -> None:
    """`up --skeleton pn` (and `record`, which shares its options) and `demo --skeleton pn --version
    1.1.0.0`: capture parses the Perception Neuron skeleton; the demo's take is sent as Axis Neuron sends it."""
    from mocapline.formats.skeleton import SkeletonKind
    from mocapline.tools.pipeline import demo, up

    args = up.build_parser().parse_args(["--skeleton", "pn", "--log-dir", str(tmp_path)])
    assert planned(up.stack_config(args))["capture"].skeleton == SkeletonKind.PN_PRO
    assert planned(up.stack_config(up.build_parser().parse_args(["--log-dir", str(tmp_path)])))["capture"].skeleton \
        == SkeletonKind.AXIS_STUDIO
    args = demo.build_parser().parse_args(["--skeleton", "pn", "--version", "1.1.0.0", "--split", "1024"])
    assert planned(demo.demo_config(args))["capture"].skeleton == SkeletonKind.PN_PRO
    assert demo.take_plan(args).version == (1, 1, 0, 0) and demo.take_plan(args).split_bytes == 1024


def test_up_listens_where_the_source_sends_unless_told(tmp_path: Path) -> None:
    """`up --source xsens` takes MVN's port 9763 (not Axis Studio's 7014, where MVN sends nothing),
    `--main-port` still wins, and capture is planned on it."""
    from mocapline.tools.pipeline import up

    def capture_ports(*flags: str) -> list[int]:
        args = up.build_parser().parse_args([*flags, "--log-dir", str(tmp_path)])
        return list(planned(up.stack_config(args))["capture"].ports)

    assert capture_ports() == [7014]  # the side path goes to the auditor (no --merge)
    assert capture_ports("--source", "xsens")[0] == 9763
    assert capture_ports("--source", "xsens", "--main-port", "9800")[0] == 9800


def test_every_metrics_endpoint_is_on_loopback_unless_the_stack_is_told(tmp_path: Path) -> None:
    """`up` said `metrics on http://0.0.0.0:9101/metrics` for every service, although the robot
    port is loopback-only by default: a laptop on a studio network published its counters to
    everyone. Loopback unless `--metrics-host` (compose says METRICS_BIND)."""
    config = dict(state_dir=tmp_path / "s", robot="sim", display="none")
    services = {name: s for name, s in planned(StackConfig(**config)).items() if name != "sim"}  # the sim: none
    assert sorted(services) == ["auditor", "capture", "retarget", "robot", "streamer", "viewer"]
    hosts = {name: getattr(s, "stage", s).metrics_host for name, s in services.items()}
    assert set(hosts.values()) == {"127.0.0.1"}, hosts
    assert PARSE["capture"]([]).stage.metrics_host == "127.0.0.1"  # a service started by hand, too
    wide = planned(StackConfig(**config, metrics_host="0.0.0.0"))
    assert {getattr(s, "stage", s).metrics_host for name, s in wide.items() if name != "sim"} == {"0.0.0.0"}
