# mypy: disable-error-code="type-arg,valid-type,call-arg"
"""The base-state message (:mod:`.base`) as a Cyclone DDS IDL struct."""

from dataclasses import dataclass

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, uint32

from mocapline.robot.unitree.base import TYPE_NAME

# No `from __future__ import annotations`: cyclonedds reads these annotations as objects.


@dataclass
class BaseState_(IdlStruct, typename=TYPE_NAME):  # noqa: N801 - an IDL name
    tick: uint32
    position: array[float32, 3]
    quaternion: array[float32, 4]
    linear_velocity: array[float32, 3]
    crc: uint32
