"""Generated protobuf bindings (see mocapline.protogen)."""

from mocapline.pb.mocap_pb2 import EndOfStream, HumanFrame, MocapFrame, RobotFrame

__all__ = ["EndOfStream", "HumanFrame", "MocapFrame", "RobotFrame"]
