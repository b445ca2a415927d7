"""The arm-sdk controller: the waist and arms from the stream on the vendor's arm interface (the
robot description's ``low_level.arm_sdk_topic``, LowCmd_ on rt/arm_sdk for the G1) while the
robot's own controller keeps the legs and the balance. ``motor_cmd[arm_sdk_weight_slot].q`` is the
blend weight in [0, 1] between the vendor's command (0) and this one (1).

It is the pd controller on the upper body (its playback, ramps and stall states, the vendor's
gains), and the weight follows its state: towards 1 while it drives (ramp_in, tracking, holding),
towards 0 while it would not (waiting, damping after a long stall, ended, estop), by at most
1 / ``arm_sdk_ramp_s`` a second, so the arms are handed over and back smoothly (Unitree's example
fades over seconds; xr_teleoperate lowers it by 0.01 every 20 ms). Where the pd controller would
damp, this one keeps its last target stiff while the weight falls: the vendor's controller takes the
arms back, not gravity. The legs are not sent (mode 0, kp 0): they are the vendor's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.services.robot.controller import Command, Controller, ControlSettings, Measured
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.safety import SafetyFilter
from mocapline.services.robot.timeline import StreamFrame

DRIVING = ("ramp_in", "tracking", "holding")


class ArmSdkController:
    name = "arm-sdk"
    stopping = False

    def __init__(self, robot: RobotDescription, settings: ControlSettings, safety: SafetyFilter,
                 counters: RobotCounters, bias: object | None = None) -> None:
        if not robot.low_level.arm_sdk_topic:
            raise ValueError(f"--controller arm-sdk: the {robot.title} has no arm interface (its description's "
                             "low_level.arm_sdk_topic)")
        self.robot = robot
        self.settings = settings
        self.inner = Controller(robot, dataclasses.replace(settings, joints="upper"), safety, counters, bias)
        self.timeline = self.inner.timeline
        self.topic = robot.low_level.arm_sdk_topic
        self.upper = robot.upper
        self.modes = np.zeros(robot.joint_count, dtype=np.uint8)
        self.modes[self.upper] = robot.motor_modes[self.upper]
        self.stop_s = settings.arm_sdk_ramp_s + 0.1  # an e-stop hands the arms back before the exit
        self.weight = 0.0
        self.held: Command | None = None  # the last stiff command (held while the weight falls)

    @property
    def state(self) -> str:
        return self.inner.state

    def on_state(self, measured: Measured) -> None:
        self.inner.on_state(measured)

    def on_frame(self, frame: StreamFrame) -> None:
        self.inner.on_frame(frame)

    def on_end(self) -> None:
        self.inner.on_end()

    def estop(self, reason: str, now: float) -> None:
        self.inner.estop(reason, now)

    def tick(self, now: float, dt: float) -> Command | None:
        cmd = self.inner.tick(now, dt)
        if cmd is None:
            return None
        goal = 1.0 if self.inner.state in DRIVING else 0.0
        step = dt / max(self.settings.arm_sdk_ramp_s, 1e-6)
        self.weight = float(np.clip(goal, self.weight - step, self.weight + step))
        if float(cmd.kp[self.upper].max(initial=0.0)) > 0:
            self.held = cmd
        elif self.held is not None:
            # the pd controller damps here: hold its last target while the vendor takes the arms back
            cmd = dataclasses.replace(self.held, started=cmd.started, reached=cmd.reached)
        else:
            # nothing driven yet: the measured pose, stiff, at weight 0 (what the vendor then blends with)
            cmd = dataclasses.replace(cmd, kp=self.robot.kp.copy(), kd=self.robot.kd.copy())
        legs = self.robot.group("legs")
        kp, kd = cmd.kp.copy(), cmd.kd.copy()
        kp[legs], kd[legs] = 0.0, 0.0
        return dataclasses.replace(cmd, kp=kp, kd=kd, weight=round(self.weight, 6))
