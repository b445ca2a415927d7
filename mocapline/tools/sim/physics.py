"""The simulated G1: Menagerie's model with torque motors, the motor law of Unitree's robots and
simulator, and the LowState it reports. Deterministic: the same commands, applied at the same
steps, give the same states, bit for bit (MuJoCo is deterministic on one machine).

Motor law, per enabled motor (``mode`` 1; a disabled one gives no torque):
``tau + kp (q* - q) + kd (dq* - dq)``, clipped to the joint's torque limit (Menagerie's
``actuatorfrcrange``). One physics step (2 ms) per LowState.

Bases: ``band`` hangs the G1 on a spring to a point 3 m up (k 200 N/m, d 100 N s/m along the
band), stretched from the pelvis and pulling at the torso, as Unitree's simulator's elastic band
does (pulled at the pelvis, the top-heavy G1 turns upside down); ``fixed`` welds the pelvis 1 m
up; ``free`` stands on the floor (a G1 under a PD hold falls within seconds: that is the robot,
not the sim).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.robot.g1 import G1_JOINT_NAMES, N_JOINTS, ROOT_BODY, ROOT_JOINT, reference_xml_path
from mocapline.robot.unitree.g1 import STAND
from mocapline.robot.unitree.lowlevel import LOW_CMD, LOW_STATE, new_low_state

BASES = ("band", "fixed", "free")
BAND_ANCHOR = np.array([0.0, 0.0, 3.0])
BAND_BODY = "torso_link"  # where the band pulls (its length is measured from the pelvis)
BAND_K = 200.0
BAND_D = 100.0
FIXED_HEIGHT = 1.0


def sim_model(base: str) -> mujoco.MjModel:
    """Menagerie's G1 without visual meshes (collision: the foot spheres and a floor), torque
    motors in place of its position servos."""
    if base not in BASES:
        raise ValueError(f"base {base!r}: choose from {BASES}")
    spec = mujoco.MjSpec.from_file(str(reference_xml_path()))
    for geom in list(spec.geoms):
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            spec.delete(geom)
    for mesh in list(spec.meshes):
        spec.delete(mesh)
    for item in [*spec.actuators, *spec.keys]:
        spec.delete(item)
    for name in G1_JOINT_NAMES:
        joint = spec.joint(name)
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_motor()
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(joint.actfrcrange)
    floor = spec.worldbody.add_geom()
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0, 0, 0.05]
    pelvis = spec.body(ROOT_BODY)
    if base == "fixed":
        spec.delete(spec.joint(ROOT_JOINT))
        pelvis.pos = [0.0, 0.0, FIXED_HEIGHT]
    return spec.compile()


def band_force(pelvis: np.ndarray, velocity: np.ndarray) -> np.ndarray:
    """The elastic band's pull: a spring of rest length 0 from the pelvis to the anchor, damped
    along its own direction only."""
    span = BAND_ANCHOR - pelvis
    length = float(np.linalg.norm(span))
    direction = span / length
    return (BAND_K * length - BAND_D * float(velocity @ direction)) * direction


@dataclass
class MotorCommand:
    """The commanded law of each of the 29 motors (float64, model order)."""

    enabled: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    mode_machine: int = 0

    @classmethod
    def from_record(cls, cmd: np.ndarray) -> MotorCommand:
        m = cmd["motor_cmd"][:N_JOINTS]
        return cls(m["mode"] == 1, m["q"].astype(np.float64), m["dq"].astype(np.float64),
                   m["tau"].astype(np.float64), m["kp"].astype(np.float64), m["kd"].astype(np.float64),
                   int(cmd["mode_machine"]))

    @classmethod
    def limp(cls) -> MotorCommand:
        z = np.zeros(N_JOINTS)
        return cls(np.zeros(N_JOINTS, dtype=bool), z, z, z, z, z)


class G1Physics:
    def __init__(self, base: str = "band", mode_machine: int = 0) -> None:
        self.base = base
        self.model = sim_model(base)
        self.data = mujoco.MjData(self.model)
        self.mode_machine = mode_machine
        ids = [self.model.joint(n).id for n in G1_JOINT_NAMES]
        self.qadr = np.array([self.model.jnt_qposadr[i] for i in ids])
        self.vadr = np.array([self.model.jnt_dofadr[i] for i in ids])
        self.torque_limit = np.array([self.model.jnt_actfrcrange[i][1] for i in ids])
        self.pelvis = self.model.body(ROOT_BODY).id
        self.band_body = self.model.body(BAND_BODY).id
        self.command = MotorCommand.limp()
        self.tick = 0
        self.reset()

    def reset(self) -> None:
        mujoco.mj_resetData(self.model, self.data)
        if self.base != "fixed":
            self.data.qpos[0:3] = (0.0, 0.0, 0.793 if self.base == "free" else 1.28)
            self.data.qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
        self.data.qpos[self.qadr] = STAND
        mujoco.mj_forward(self.model, self.data)
        self.tick = 0

    def apply(self, cmd: np.ndarray) -> bool:
        """Take a LowCmd record as the law until the next; False (ignored) when its CRC is wrong."""
        if not LOW_CMD.crc_ok(cmd):
            return False
        command = MotorCommand.from_record(cmd)
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
        self.data.ctrl[:] = self.torques()
        if self.base == "band":
            self.data.xfrc_applied[self.band_body, 0:3] = band_force(self.data.qpos[0:3], self.data.qvel[0:3])
        mujoco.mj_step(self.model, self.data)
        self.tick += 1

    def state(self) -> np.ndarray:
        """The LowState record of now (its CRC set)."""
        s = new_low_state()
        s["mode_machine"] = self.command.mode_machine or self.mode_machine
        s["tick"] = (self.tick * round(self.model.opt.timestep * 1000)) & 0xFFFFFFFF
        imu = s["imu_state"]
        if self.base != "fixed":
            imu["quaternion"] = self.data.qpos[3:7]
            imu["gyroscope"] = self.data.qvel[3:6]  # the free joint's angular velocity is in the body frame
        else:
            imu["quaternion"] = (1.0, 0.0, 0.0, 0.0)
        motors = s["motor_state"]
        motors["mode"][:N_JOINTS] = self.command.enabled
        motors["q"][:N_JOINTS] = self.data.qpos[self.qadr]
        motors["dq"][:N_JOINTS] = self.data.qvel[self.vadr]
        motors["ddq"][:N_JOINTS] = self.data.qacc[self.vadr]
        motors["tau_est"][:N_JOINTS] = self.data.ctrl
        LOW_STATE.seal(s)
        return s

    @property
    def pelvis_height(self) -> float:
        return float(self.data.xpos[self.pelvis][2])
