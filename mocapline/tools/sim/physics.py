"""The simulated robot: its Menagerie model (its description's build) with torque motors, the
motor law of Unitree's robots and simulator, and the LowState it reports in the build's message
family. Deterministic: the same commands, applied at the same steps, give the same states, bit for
bit (MuJoCo is deterministic on one machine).

Motor law, per enabled motor (``mode`` not 0; a disabled one gives no torque):
``tau + kp (q* - q) + kd (dq* - dq)``, clipped to the joint's torque limit (the model's). One
physics step (2 ms) per LowState. Joints of the model the body's stream does not carry (the
Dex3-1 hands of ``g1_dex3``) are held at 0 by a soft PD of the sim's own, until a hand's HandCmd_
comes (``apply_hand``: its motors' law, kp (q* - q) - kd dq, a disabled motor limp); ``hand_state``
is the HandState_ a hand reports.

The vendor's arm interface (``apply_arm``, the description's ``low_level.arm_sdk_topic``): while
no LowCmd has come (the robot is not in its low-level mode) a stand-in for the vendor's own
controller holds the stand pose with the description's gains (``vendor`` True), and an arm_sdk
command is blended into it on the waist and arms by its weight (``motor_cmd[arm_sdk_weight_slot].q``
in [0, 1]): each of q, dq, tau, kp, kd is ``w * arm_sdk + (1 - w) * vendor``; the legs stay the
vendor's. The first LowCmd ends it (low-level mode: LowCmd alone, arm_sdk ignored).

Bases: ``band`` hangs the robot on a spring (k 200 N/m, d 100 N s/m along the band) from a point
that holds the pelvis ``BAND_CLEARANCE`` above its standing height (3 m up for the G1), stretched
from the pelvis and pulling at the torso, as Unitree's simulator's elastic band does (pulled at the
pelvis, the top-heavy G1 turns upside down); ``fixed`` welds the pelvis 1 m up; ``free`` stands on
the floor (a G1 under a PD hold falls within seconds: that is the robot, not the sim). The free
base starts held where it stands (pelvis pinned at the standing height, upright; the joints move
as commanded), as a gantry holds a robot until its controller runs, and is let go at the first
stiff LowCmd (any kp > 0); the vendor's stand-in never lets go (it holds the stand pose, it does
not balance).

Feet and floor as in Unitree's model (unitree_mujoco's g1_29dof.xml): four 5 mm spheres under
each ankle-roll link at the same places, sliding friction 1 (MuJoCo takes the larger of the two
geoms': Menagerie's feet say 0.6, the floor 1). Steps of 2 ms, the PD law applied at every step
from the newest command (as the robot's motor drivers run it, far faster than commands come;
Unitree's simulator computes the torque once per command and holds it for its 5 ms steps).
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

    def blend(self, other: MotorCommand, weight: float, joints: np.ndarray) -> MotorCommand:
        """This command with ``joints`` moved ``weight`` of the way to ``other``'s law."""
        out = MotorCommand(self.enabled.copy(), self.q.copy(), self.dq.copy(), self.tau.copy(), self.kp.copy(),
                           self.kd.copy(), self.mode_machine)
        for name in ("q", "dq", "tau", "kp", "kd"):
            mine, theirs = getattr(out, name), getattr(other, name)
            mine[joints] = (1.0 - weight) * mine[joints] + weight * theirs[joints]
        return out


class RobotPhysics:
    def __init__(self, robot: RobotDescription, base: str = "band", mode_machine: int = 0,
                 vendor: bool = False) -> None:
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
        self.held_q, self.held_kp, self.held_kd = np.zeros(len(held)), np.full(len(held), HOLD_KP), \
            np.full(len(held), HOLD_KD)
        hands = robot.hands
        # per hand, its joints' rows among the held ones (the description's motor order)
        self.hand_rows = [np.array([held.index(n) for n in side], dtype=np.intp)
                          for side in ((hands.left, hands.right) if hands is not None and hands.cmd_topics else ())]
        self.pelvis = self.model.body(robot.root_body).id
        self.band_body = self.model.body(robot.torso_body).id
        self.band_anchor = band_anchor(robot, self.model)
        n = robot.joint_count
        self.vendor_command = MotorCommand(np.ones(n, dtype=bool), robot.stand.copy(), np.zeros(n), np.zeros(n),
                                           robot.kp.astype(np.float64), robot.kd.astype(np.float64))
        self.vendor = vendor  # the vendor's stand-in holds the robot until a LowCmd comes
        self.arm_weight = 0.0
        self.command = self.vendor_command if vendor else MotorCommand.limp(n)
        self.pinned = base == "free"  # held standing until the first stiff LowCmd
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
        self._pin = self.data.qpos[0:3].copy()
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
        self.vendor = False  # low-level mode from the first LowCmd on
        if self.pinned and np.any(command.enabled & (command.kp > 0)):
            self.pinned = False
        return True

    def apply_arm(self, cmd: np.ndarray) -> bool:
        """An arm_sdk command blended into the vendor's stand-in by its weight; False (ignored) when its
        CRC is wrong, it carries a non-finite value, or the robot is in low-level mode."""
        if not self.vendor or not self.family.low_cmd.crc_ok(cmd):
            return False
        arm = MotorCommand.from_record(cmd, self.slots, self.family.has_mode_machine)
        weight = float(cmd["motor_cmd"]["q"][self.robot.low_level.arm_sdk_weight_slot])
        values = np.concatenate([arm.q, arm.dq, arm.tau, arm.kp, arm.kd, [weight]])
        if not np.all(np.isfinite(values)):
            return False
        self.arm_weight = float(np.clip(weight, 0.0, 1.0))
        self.command = self.vendor_command.blend(arm, self.arm_weight, self.robot.upper)
        return True

    def apply_hand(self, side: int, cmd: np.ndarray) -> bool:
        """A hand's HandCmd_ record (:mod:`mocapline.robot.unitree.hand`) as its motors' law until
        the next; False (ignored) when a value is not finite."""
        motors = cmd["motor_cmd"]
        q, kp, kd = (motors[k].astype(np.float64) for k in ("q", "kp", "kd"))
        if not np.all(np.isfinite(np.concatenate([q, kp, kd]))):
            return False
        enabled = (motors["mode"] >> 4 & 0x07) != 0
        rows = self.hand_rows[side]
        self.held_q[rows], self.held_kp[rows], self.held_kd[rows] = q, np.where(enabled, kp, 0.0), \
            np.where(enabled, kd, 0.0)
        return True

    def hand_state(self, side: int) -> bytes:
        from mocapline.robot.unitree.hand import hand_state, new_hand_state

        rows = self.hand_rows[side]
        return hand_state(new_hand_state(), self.data.qpos[self.held_qadr[rows]], self.data.qvel[self.held_vadr[rows]],
                          self.data.ctrl[self.held_ctrl[rows]])

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
            d.ctrl[self.held_ctrl] = (self.held_kp * (self.held_q - d.qpos[self.held_qadr])
                                      - self.held_kd * d.qvel[self.held_vadr])
        if self.base == "band":
            d.xfrc_applied[self.band_body, 0:3] = band_force(self.band_anchor, d.qpos[0:3], d.qvel[0:3])
        mujoco.mj_step(self.model, self.data)
        if self.pinned:
            d.qpos[0:3], d.qpos[3:7], d.qvel[0:6] = self._pin, (1.0, 0.0, 0.0, 0.0), 0.0
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
