"""mocapline's own topic beside Unitree's: the simulated robot's base (pelvis) pose, which LowState
does not carry (a robot knows its orientation from its IMU, not where it stands).

`mocapline sim` publishes it with every LowState on ``BASE_TOPIC`` (same tick): the web viewer
draws the physics robot where its base is, the benches measure the root's travel and heading. A DDS
topic rather than a NATS status field: it comes at LowState's rate and tick, to whoever reads
LowState, and costs nothing without a reader; a real robot has no such topic (the viewer then
draws the measured robot at the target's root, as before). Fields: ``tick`` (LowState's),
``position`` m and ``quaternion`` w x y z in the world, ``linear_velocity`` m/s, ``crc`` as
LowState's (the CRC of :mod:`.crc` over the words before it).
"""

from __future__ import annotations

import numpy as np

from mocapline.robot.unitree.lowlevel import Fields, Layout

BASE_TOPIC = "mocapline/sim/base_state"
TYPE_NAME = "mocapline.msg.dds_.BaseState_"
BASE_STATE_FIELDS: Fields = [("tick", "u4", 1), ("position", "f4", 3), ("quaternion", "f4", 4),
                             ("linear_velocity", "f4", 3), ("crc", "u4", 1)]
BASE_STATE = Layout(BASE_STATE_FIELDS)


def base_state(tick: int, position: np.ndarray, quaternion: np.ndarray, linear_velocity: np.ndarray) -> bytes:
    """One sealed sample."""
    rec = BASE_STATE.new()
    rec["tick"], rec["position"], rec["quaternion"], rec["linear_velocity"] = tick, position, quaternion, \
        linear_velocity
    BASE_STATE.seal(rec)
    return BASE_STATE.sample(rec)


def idl_type() -> type:
    """The IDL struct the topic is registered with (cyclonedds imported here only)."""
    from mocapline.robot.unitree.idl_base import BaseState_

    return BaseState_
