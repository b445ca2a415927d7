"""Generated protobuf bindings (see mocapline.tools.protogen)."""

from mocapline.core.pb.mocap_pb2 import EndOfStream, HumanFrame, MocapFrame, RobotFrame

__all__ = ["EndOfStream", "HumanFrame", "MocapFrame", "RobotFrame"]
