"""Build the MocapFrame (docs/protocol.md) from an interpolated robot sample, hands included (the
wrists' poses; on a build with hands also their joints, ``hand_joint_pos``).

left_hand / right_hand are the world poses (position, quaternion w x y z) of the robot's wrists
(its description's ``wrists``: the G1's wrist-yaw links, where the hands are mounted; a site at the
H1's forearm end), from the robot's forward kinematics at the sample's pose.
"""

from __future__ import annotations

import mujoco
import numpy as np

from mocapline.core import pb
from mocapline.robot.description import RobotDescription
from mocapline.robot.model import load_ik_model


class MocapFrameBuilder:
    def __init__(self, robot: RobotDescription) -> None:
        self.robot = robot
        self.model = load_ik_model(robot)
        self.data = mujoco.MjData(self.model)
        self.wrists = [self._frame(name) for name in robot.wrists]

    def _frame(self, name: str) -> tuple[bool, int]:
        """(is a body, id) of a body or a site."""
        body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        if body >= 0:
            return True, body
        return False, self.model.site(name).id

    def hands(self, root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray) -> list[list[float]]:
        d = self.data
        d.qpos[0:3] = root_pos
        d.qpos[3:7] = root_quat
        d.qpos[7:] = joint_pos
        mujoco.mj_kinematics(self.model, d)
        out = []
        for is_body, i in self.wrists:
            if is_body:
                out.append([*d.xpos[i].tolist(), *d.xquat[i].tolist()])
            else:
                quat = np.zeros(4)
                mujoco.mju_mat2Quat(quat, d.site_xmat[i])
                out.append([*d.site_xpos[i].tolist(), *quat.tolist()])
        return out

    def build(
        self,
        index: int,
        *,
        root_pos: np.ndarray,
        root_quat: np.ndarray,
        root_lin_vel: np.ndarray,
        root_ang_vel: np.ndarray,
        joint_pos: np.ndarray,
        joint_vel: np.ndarray,
        posture_index: int,
        posture_index_first: int,
        posture_index_last: int,
        capture_timestamp_us: int,
        time_s: float,
        traceparent: str = "",
        session_id: str = "",
        avatar_index: int = 0,
        avatar_name: str = "",
        bridged: bool = False,
        hand_joint_pos: np.ndarray | None = None,
        has_hands: bool = False,
    ) -> pb.MocapFrame:
        left, right = self.hands(root_pos, root_quat, joint_pos)
        return pb.MocapFrame(
            index=index,
            body_pos_w=root_pos.tolist(),
            body_lin_vel_w=root_lin_vel.tolist(),
            body_quat_w=root_quat.tolist(),
            body_ang_vel_w=root_ang_vel.tolist(),
            joint_pos=joint_pos.tolist(),
            joint_vel=joint_vel.tolist(),
            left_hand=left,
            right_hand=right,
            posture_index=posture_index,
            posture_index_first=posture_index_first,
            posture_index_last=posture_index_last,
            capture_timestamp_us=capture_timestamp_us,
            source_time_s=time_s,
            traceparent=traceparent,
            session_id=session_id,
            avatar_index=avatar_index,
            avatar_name=avatar_name,
            bridged=bridged,
            robot_model=self.robot.name,
            hand_joint_pos=[] if hand_joint_pos is None else hand_joint_pos.tolist(),
            has_hands=has_hands,
        )
