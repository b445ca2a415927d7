"""The Unitree DDS message families by name (a robot's description names its own): each family's
LowCmd_ / LowState_ layouts, motor slots, and whether it carries ``mode_machine`` (hg does: the
bridge copies it from LowState into LowCmd; go has none)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mocapline.robot.unitree import go, hg
from mocapline.robot.unitree.lowlevel import Layout


@dataclass(frozen=True)
class Family:
    name: str
    motor_slots: int
    low_cmd: Layout
    low_state: Layout
    new_low_cmd: Callable[[], np.ndarray]
    new_low_state: Callable[[], np.ndarray]
    has_mode_machine: bool


FAMILIES: dict[str, Family] = {
    "unitree_hg": Family("unitree_hg", hg.MOTOR_SLOTS, hg.LOW_CMD, hg.LOW_STATE, hg.new_low_cmd, hg.new_low_state,
                         True),
    "unitree_go": Family("unitree_go", go.MOTOR_SLOTS, go.LOW_CMD, go.LOW_STATE, go.new_low_cmd, go.new_low_state,
                         False),
}


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"DDS family {name!r}: choose from {', '.join(FAMILIES)}") from None
