"""The simulated robot: its Menagerie model (its description's build) with torque motors, the
motor law of Unitree's robots and simulator, and the LowState it reports in the build's message
family. Deterministic: the same commands, applied at the same steps, give the same states, bit for
bit (MuJoCo is deterministic on one machine).

Motor law, per enabled motor (``mode`` not 0; a disabled one gives no torque):
``tau + kp (q* - q) + kd (dq* - dq)``, clipped to the joint's torque limit (the model's). One
physics step (2 ms) per LowState. Joints of the model the body's stream does not carry (the
Dex3-1 hands of ``g1_dex3``) are held at 0 by a soft PD of the sim's own.

Bases: ``band`` hangs the robot on a spring (k 200 N/m, d 100 N s/m along the band) from a point
that holds the pelvis ``BAND_CLEARANCE`` above its standing height (3 m up for the G1), stretched
from the pelvis and pulling at the torso, as Unitree's simulator's elastic band does (pulled at the
pelvis, the top-heavy G1 turns upside down); ``fixed`` welds the pelvis 1 m up; ``free`` stands on
the floor (a G1 under a PD hold falls within seconds: that is the robot, not the sim).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.robot.model import ROOT_JOINT, joint_names, physics_spec, qpos_addresses, torque_limits
from mocapline.robot.unitree.family import family

BASES = ("band", "fixed", "free")
BAND_CLEARANCE = 0.57  # m the band holds the pelvis above its standing height (the feet clear the floor)
BAND_K = 200.0
BAND_D = 100.0
FIXED_HEIGHT = 1.0
HOLD_KP, HOLD_KD = 1.5, 0.2  # the soft hold of joints outside the body's stream (the Dex3-1 gains)


def sim_model(robot: RobotDescription, base: str) -> mujoco.MjModel:
    """The robot's model without visual meshes (collision geoms and a floor), torque motors in
    place of its actuators, each limited to the joint's torque limit."""
    if base not in BASES:
        raise ValueError(f"base {base!r}: choose from {BASES}")
    spec = physics_spec(robot)
    limits = dict(zip(robot.joint_names, torque_limits(spec.compile(), robot.joint_names), strict=True))
    for item in [*spec.actuators, *spec.keys]:
        spec.delete(item)
    for name in joint_names(spec.compile()):
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_motor()
        if name in limits:
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.ctrlrange = [-limits[name], limits[name]]
    floor = spec.worldbody.add_geom()
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0, 0, 0.05]
    pelvis = spec.body(robot.root_body)
    if base == "fixed":
        spec.delete(spec.joint(ROOT_JOINT))
        pelvis.pos = [0.0, 0.0, FIXED_HEIGHT]
    return spec.compile()


def band_anchor(robot: RobotDescription, model: mujoco.MjModel) -> np.ndarray:
    """Where the band is tied: at rest length 0, the robot's weight stretches it to hold the pelvis
    ``BAND_CLEARANCE`` above its standing height (3.0 m up for the G1)."""
    weight = float(np.sum(model.body_mass)) * -float(model.opt.gravity[2])
    return np.array([0.0, 0.0, robot.standing_height + BAND_CLEARANCE + weight / BAND_K])


def band_force(anchor: np.ndarray, pelvis: np.ndarray, velocity: np.ndarray) -> np.ndarray:
    """The elastic band's pull: a spring of rest length 0 from the pelvis to the anchor, damped
    along its own direction only."""
    span = anchor - pelvis
    length = float(np.linalg.norm(span))
    direction = span / length
    return (BAND_K * length - BAND_D * float(velocity @ direction)) * direction


@dataclass
class MotorCommand:
    """The commanded law of each of the robot's motors (float64, stream order)."""

    enabled: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    mode_machine: int = 0

    @classmethod
    def from_record(cls, cmd: np.ndarray, slots: np.ndarray, has_mode_machine: bool = True) -> MotorCommand:
        m = cmd["motor_cmd"][slots]
        return cls(m["mode"] != 0, m["q"].astype(np.float64), m["dq"].astype(np.float64),
                   m["tau"].astype(np.float64), m["kp"].astype(np.float64), m["kd"].astype(np.float64),
                   int(cmd["mode_machine"]) if has_mode_machine else 0)

    @classmethod
    def limp(cls, n: int) -> MotorCommand:
        z = np.zeros(n)
        return cls(np.zeros(n, dtype=bool), z, z, z, z, z)


class RobotPhysics:
    def __init__(self, robot: RobotDescription, base: str = "band", mode_machine: int = 0) -> None:
        self.robot = robot
        self.family = family(robot.low_level.family)
        self.slots = robot.motor_index
        self.base = base
        self.model = sim_model(robot, base)
        self.data = mujoco.MjData(self.model)
        self.mode_machine = mode_machine
        self.qadr, self.vadr = qpos_addresses(self.model, robot.joint_names)
        self.torque_limit = torque_limits(self.model, robot.joint_names)
        self.ctrl = np.array([self.model.actuator(n).id for n in robot.joint_names], dtype=np.intp)
        held = tuple(n for n in joint_names(self.model) if n not in robot.joint_names)
        self.held_qadr, self.held_vadr = qpos_addresses(self.model, held)
        self.held_ctrl = np.array([self.model.actuator(n).id for n in held], dtype=np.intp)
        self.pelvis = self.model.body(robot.root_body).id
        self.band_body = self.model.body(robot.torso_body).id
        self.band_anchor = band_anchor(robot, self.model)
        self.command = MotorCommand.limp(robot.joint_count)
        self.tick = 0
        self.reset()

    def reset(self) -> None:
        mujoco.mj_resetData(self.model, self.data)
        if self.base != "fixed":
            up = 0.0 if self.base == "free" else BAND_CLEARANCE - 0.083  # a little below where the band holds it
            self.data.qpos[0:3] = (0.0, 0.0, self.robot.standing_height + up)
            self.data.qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
        self.data.qpos[self.qadr] = self.robot.stand
        mujoco.mj_forward(self.model, self.data)
        self.tick = 0

    def apply(self, cmd: np.ndarray) -> bool:
        """Take a LowCmd record as the law until the next; False (ignored) when its CRC is wrong."""
        if not self.family.low_cmd.crc_ok(cmd):
            return False
        command = MotorCommand.from_record(cmd, self.slots, self.family.has_mode_machine)
        values = np.concatenate([command.q, command.dq, command.tau, command.kp, command.kd])
        if not np.all(np.isfinite(values)):
            return False
        self.command = command
        return True

    def torques(self) -> np.ndarray:
        c = self.command
        q = self.data.qpos[self.qadr]
        dq = self.data.qvel[self.vadr]
        tau = c.tau + c.kp * (c.q - q) + c.kd * (c.dq - dq)
        return np.where(c.enabled, np.clip(tau, -self.torque_limit, self.torque_limit), 0.0)

    def step(self) -> None:
        d = self.data
        d.ctrl[self.ctrl] = self.torques()
        if self.held_ctrl.size:
            d.ctrl[self.held_ctrl] = -HOLD_KP * d.qpos[self.held_qadr] - HOLD_KD * d.qvel[self.held_vadr]
        if self.base == "band":
            d.xfrc_applied[self.band_body, 0:3] = band_force(self.band_anchor, d.qpos[0:3], d.qvel[0:3])
        mujoco.mj_step(self.model, self.data)
        self.tick += 1

    def state(self) -> np.ndarray:
        """The LowState record of now (its CRC set)."""
        s = self.family.new_low_state()
        if self.family.has_mode_machine:
            s["mode_machine"] = self.command.mode_machine or self.mode_machine
        s["tick"] = (self.tick * round(self.model.opt.timestep * 1000)) & 0xFFFFFFFF
        imu = s["imu_state"]
        if self.base != "fixed":
            imu["quaternion"] = self.data.qpos[3:7]
            imu["gyroscope"] = self.data.qvel[3:6]  # the free joint's angular velocity is in the body frame
        else:
            imu["quaternion"] = (1.0, 0.0, 0.0, 0.0)
        motors, slots = s["motor_state"], self.slots
        motors["mode"][slots] = self.command.enabled
        motors["q"][slots] = self.data.qpos[self.qadr]
        motors["dq"][slots] = self.data.qvel[self.vadr]
        motors["ddq"][slots] = self.data.qacc[self.vadr]
        motors["tau_est"][slots] = self.data.ctrl[self.ctrl]
        self.family.low_state.seal(s)
        return s

    @property
    def pelvis_height(self) -> float:
        return float(self.data.xpos[self.pelvis][2])
