"""Facts found running the bridge against Unitree's own SDK and simulator (docs/robot.md: Checked
against Unitree's simulator), held here without any of their code."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from g1_facts import G1

from mocapline.robot.unitree.hg import LOW_STATE, new_low_state
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.service import RobotLoop, RobotSettings

# XTypes type identifiers (minimal, complete) of Unitree's generated unitree_hg types
# (unitree_sdk2_python 37116c5 under cyclonedds 0.10.2): a peer matches ours when these are equal.
UNITREE_TYPE_IDS = {
    "LowCmd_": ("6569fc15f0d47aa8600b9e91fbbc", "42b0283aa7e1bb592ec898a0dbed"),
    "LowState_": ("2f38296b52aa0230b92d378b1e39", "2be9706c9587e8d8afd8bfc6de7b"),
    # the Dex3-1's (issue 33, the same checkout)
    "HandCmd_": ("a63e17e228e67d276dfe71d6f156", "5c45f9f8b1e1c279a659521332b0"),
    "HandState_": ("699eb3270c7d7788ed03bebe16b9", "b9f2806966060fc0f913a47b8ab9"),
}


@pytest.mark.parametrize("name", sorted(UNITREE_TYPE_IDS))
def test_our_idl_types_are_the_same_types_as_unitrees(name: str) -> None:
    idl = pytest.importorskip("mocapline.robot.unitree.idl_hg")
    info = getattr(idl, name).__idl__.get_type_info()
    minimal = info.minimal.typeid_with_size.type_id.value.hex()
    complete = info.complete.typeid_with_size.type_id.value.hex()
    assert (minimal, complete) == UNITREE_TYPE_IDS[name]


class _States:
    def __init__(self, samples: list[bytes]) -> None:
        self.samples = samples

    def take(self, n: int = 64) -> list[bytes]:
        out, self.samples = self.samples[:n], self.samples[n:]
        return out


class _Controller:
    def __init__(self) -> None:
        self.measured: list[Any] = []
        self.robot = G1
        self.topic = G1.low_level.lowcmd_topic
        self.modes = G1.motor_modes

    def on_state(self, measured: Any) -> None:
        self.measured.append(measured)


def _loop(samples: list[bytes], **changes: Any) -> tuple[RobotLoop, _Controller]:
    dds = SimpleNamespace(command_writer=lambda topic=None: None, state_reader=lambda: _States(samples))
    controller = _Controller()
    settings = replace(RobotSettings.defaults(), **changes)
    counters = RobotCounters.for_robot(G1)
    loop = RobotLoop(settings, SimpleNamespace(durable=None), controller, counters, dds)  # type: ignore[arg-type]
    return loop, controller


def _states() -> list[bytes]:
    """An unsealed LowState (crc 0, as Unitree's simulators publish), a sealed one, a corrupted one."""
    out = []
    for kind in ("unsealed", "sealed", "corrupted"):
        state = new_low_state()
        state["motor_state"]["q"][:29] = np.linspace(-0.3, 0.3, 29)
        if kind != "unsealed":
            LOW_STATE.seal(state)
        if kind == "corrupted":
            state["motor_state"]["q"][2] += 0.1
        out.append(LOW_STATE.sample(state))
    return out


def test_an_unsealed_lowstate_is_taken_and_counted_a_corrupted_one_refused() -> None:
    loop, controller = _loop(_states()[:1])
    loop._read_state()
    assert loop.counters.lowstate_received == 1 and loop.counters.lowstate_unsealed == 1
    assert len(controller.measured) == 1
    loop, controller = _loop(_states())
    loop._read_state()
    assert loop.counters.lowstate_received == 2 and loop.counters.lowstate_unsealed == 1
    assert dict(loop.counters.lowstate_rejected) == {"crc_mismatch": 1}


def test_require_lowstate_crc_refuses_an_unsealed_lowstate() -> None:
    loop, controller = _loop(_states(), require_lowstate_crc=True)
    loop._read_state()
    assert loop.counters.lowstate_received == 1 and loop.counters.lowstate_unsealed == 0
    assert dict(loop.counters.lowstate_rejected) == {"crc_unset": 1, "crc_mismatch": 1}
    assert controller.measured[-1].q[2] == pytest.approx(np.linspace(-0.3, 0.3, 29)[2], abs=1e-6)
