from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class MocapFrame(_message.Message):
    __slots__ = ("index", "body_pos_w", "body_lin_vel_w", "body_quat_w", "body_ang_vel_w", "joint_pos", "joint_vel", "left_hand", "right_hand", "posture_index", "posture_index_first", "posture_index_last", "capture_timestamp_us", "source_time_s", "traceparent", "session_id", "avatar_index", "avatar_name", "bridged", "robot_model", "hand_joint_pos", "has_hands")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BODY_POS_W_FIELD_NUMBER: _ClassVar[int]
    BODY_LIN_VEL_W_FIELD_NUMBER: _ClassVar[int]
    BODY_QUAT_W_FIELD_NUMBER: _ClassVar[int]
    BODY_ANG_VEL_W_FIELD_NUMBER: _ClassVar[int]
    JOINT_POS_FIELD_NUMBER: _ClassVar[int]
    JOINT_VEL_FIELD_NUMBER: _ClassVar[int]
    LEFT_HAND_FIELD_NUMBER: _ClassVar[int]
    RIGHT_HAND_FIELD_NUMBER: _ClassVar[int]
    POSTURE_INDEX_FIELD_NUMBER: _ClassVar[int]
    POSTURE_INDEX_FIRST_FIELD_NUMBER: _ClassVar[int]
    POSTURE_INDEX_LAST_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AVATAR_INDEX_FIELD_NUMBER: _ClassVar[int]
    AVATAR_NAME_FIELD_NUMBER: _ClassVar[int]
    BRIDGED_FIELD_NUMBER: _ClassVar[int]
    ROBOT_MODEL_FIELD_NUMBER: _ClassVar[int]
    HAND_JOINT_POS_FIELD_NUMBER: _ClassVar[int]
    HAS_HANDS_FIELD_NUMBER: _ClassVar[int]
    index: int
    body_pos_w: _containers.RepeatedScalarFieldContainer[float]
    body_lin_vel_w: _containers.RepeatedScalarFieldContainer[float]
    body_quat_w: _containers.RepeatedScalarFieldContainer[float]
    body_ang_vel_w: _containers.RepeatedScalarFieldContainer[float]
    joint_pos: _containers.RepeatedScalarFieldContainer[float]
    joint_vel: _containers.RepeatedScalarFieldContainer[float]
    left_hand: _containers.RepeatedScalarFieldContainer[float]
    right_hand: _containers.RepeatedScalarFieldContainer[float]
    posture_index: int
    posture_index_first: int
    posture_index_last: int
    capture_timestamp_us: int
    source_time_s: float
    traceparent: str
    session_id: str
    avatar_index: int
    avatar_name: str
    bridged: bool
    robot_model: str
    hand_joint_pos: _containers.RepeatedScalarFieldContainer[float]
    has_hands: bool
    def __init__(self, index: _Optional[int] = ..., body_pos_w: _Optional[_Iterable[float]] = ..., body_lin_vel_w: _Optional[_Iterable[float]] = ..., body_quat_w: _Optional[_Iterable[float]] = ..., body_ang_vel_w: _Optional[_Iterable[float]] = ..., joint_pos: _Optional[_Iterable[float]] = ..., joint_vel: _Optional[_Iterable[float]] = ..., left_hand: _Optional[_Iterable[float]] = ..., right_hand: _Optional[_Iterable[float]] = ..., posture_index: _Optional[int] = ..., posture_index_first: _Optional[int] = ..., posture_index_last: _Optional[int] = ..., capture_timestamp_us: _Optional[int] = ..., source_time_s: _Optional[float] = ..., traceparent: _Optional[str] = ..., session_id: _Optional[str] = ..., avatar_index: _Optional[int] = ..., avatar_name: _Optional[str] = ..., bridged: _Optional[bool] = ..., robot_model: _Optional[str] = ..., hand_joint_pos: _Optional[_Iterable[float]] = ..., has_hands: _Optional[bool] = ...) -> None: ...

class HumanFrame(_message.Message):
    __slots__ = ("posture_index", "capture_timestamp_us", "positions", "quaternions", "traceparent", "source", "segment", "session_id", "source_port", "avatar_index", "avatar_name", "finger_positions", "finger_quaternions", "prop_character", "prop_segment", "prop_positions", "prop_quaternions", "human_height")
    POSTURE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    QUATERNIONS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PORT_FIELD_NUMBER: _ClassVar[int]
    AVATAR_INDEX_FIELD_NUMBER: _ClassVar[int]
    AVATAR_NAME_FIELD_NUMBER: _ClassVar[int]
    FINGER_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    FINGER_QUATERNIONS_FIELD_NUMBER: _ClassVar[int]
    PROP_CHARACTER_FIELD_NUMBER: _ClassVar[int]
    PROP_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    PROP_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PROP_QUATERNIONS_FIELD_NUMBER: _ClassVar[int]
    HUMAN_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    posture_index: int
    capture_timestamp_us: int
    positions: _containers.RepeatedScalarFieldContainer[float]
    quaternions: _containers.RepeatedScalarFieldContainer[float]
    traceparent: str
    source: str
    segment: int
    session_id: str
    source_port: int
    avatar_index: int
    avatar_name: str
    finger_positions: _containers.RepeatedScalarFieldContainer[float]
    finger_quaternions: _containers.RepeatedScalarFieldContainer[float]
    prop_character: _containers.RepeatedScalarFieldContainer[int]
    prop_segment: _containers.RepeatedScalarFieldContainer[int]
    prop_positions: _containers.RepeatedScalarFieldContainer[float]
    prop_quaternions: _containers.RepeatedScalarFieldContainer[float]
    human_height: float
    def __init__(self, posture_index: _Optional[int] = ..., capture_timestamp_us: _Optional[int] = ..., positions: _Optional[_Iterable[float]] = ..., quaternions: _Optional[_Iterable[float]] = ..., traceparent: _Optional[str] = ..., source: _Optional[str] = ..., segment: _Optional[int] = ..., session_id: _Optional[str] = ..., source_port: _Optional[int] = ..., avatar_index: _Optional[int] = ..., avatar_name: _Optional[str] = ..., finger_positions: _Optional[_Iterable[float]] = ..., finger_quaternions: _Optional[_Iterable[float]] = ..., prop_character: _Optional[_Iterable[int]] = ..., prop_segment: _Optional[_Iterable[int]] = ..., prop_positions: _Optional[_Iterable[float]] = ..., prop_quaternions: _Optional[_Iterable[float]] = ..., human_height: _Optional[float] = ...) -> None: ...

class RobotFrame(_message.Message):
    __slots__ = ("posture_index", "capture_timestamp_us", "root_pos", "root_quat", "joint_pos", "ik_failed", "traceparent", "segment", "session_id", "avatar_index", "avatar_name", "robot_model", "hand_joint_pos", "has_hands")
    POSTURE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    ROOT_POS_FIELD_NUMBER: _ClassVar[int]
    ROOT_QUAT_FIELD_NUMBER: _ClassVar[int]
    JOINT_POS_FIELD_NUMBER: _ClassVar[int]
    IK_FAILED_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AVATAR_INDEX_FIELD_NUMBER: _ClassVar[int]
    AVATAR_NAME_FIELD_NUMBER: _ClassVar[int]
    ROBOT_MODEL_FIELD_NUMBER: _ClassVar[int]
    HAND_JOINT_POS_FIELD_NUMBER: _ClassVar[int]
    HAS_HANDS_FIELD_NUMBER: _ClassVar[int]
    posture_index: int
    capture_timestamp_us: int
    root_pos: _containers.RepeatedScalarFieldContainer[float]
    root_quat: _containers.RepeatedScalarFieldContainer[float]
    joint_pos: _containers.RepeatedScalarFieldContainer[float]
    ik_failed: bool
    traceparent: str
    segment: int
    session_id: str
    avatar_index: int
    avatar_name: str
    robot_model: str
    hand_joint_pos: _containers.RepeatedScalarFieldContainer[float]
    has_hands: bool
    def __init__(self, posture_index: _Optional[int] = ..., capture_timestamp_us: _Optional[int] = ..., root_pos: _Optional[_Iterable[float]] = ..., root_quat: _Optional[_Iterable[float]] = ..., joint_pos: _Optional[_Iterable[float]] = ..., ik_failed: _Optional[bool] = ..., traceparent: _Optional[str] = ..., segment: _Optional[int] = ..., session_id: _Optional[str] = ..., avatar_index: _Optional[int] = ..., avatar_name: _Optional[str] = ..., robot_model: _Optional[str] = ..., hand_joint_pos: _Optional[_Iterable[float]] = ..., has_hands: _Optional[bool] = ...) -> None: ...

class EndOfStream(_message.Message):
    __slots__ = ("last_frame_id", "frames_sent", "reason")
    LAST_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMES_SENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    last_frame_id: int
    frames_sent: int
    reason: str
    def __init__(self, last_frame_id: _Optional[int] = ..., frames_sent: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...
