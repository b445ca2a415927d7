"""Cyclone DDS around the low-level topics: a domain (its id and network interface), and raw
writers/readers that move the messages' CDR bytes (:mod:`lowlevel`) without cyclonedds' Python
(de)serializer, which at 500 Hz would cost the bridge a large share of a core
(``mocapline bench lowcmd``; docs/benchmarks.md, Robot).

The topics are registered with the IDL types of :mod:`idl`, so discovery and type matching with
Unitree's peers are the ordinary ones; only the payload bytes are made here. This uses
cyclonedds 0.10's ``_clayer.ddspy_write``/``ddspy_take`` (the calls its DataWriter.write and
DataReader.take make after serializing): pinned by the ``[robot]`` extra to 0.10.x.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cyclonedds._clayer import ddspy_take, ddspy_write
from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from mocapline.robot.description import RobotDescription

LOWCMD_TOPIC = "rt/lowcmd"
LOWSTATE_TOPIC = "rt/lowstate"
ROBOT_DOMAIN = 0  # a real G1
SIM_DOMAIN = 1  # Unitree's simulator (and mocapline sim's default)
CLOSE_LINGER_S = 0.5  # at most, for the readers to acknowledge the last samples (LowLevel.close)


@dataclass(frozen=True)
class DdsSettings:
    domain: int = SIM_DOMAIN
    # "" = Cyclone's own choice (or CYCLONEDDS_URI); "lo" = loopback only, discovery by unicast
    # to 127.0.0.1 (tests, one machine); a name (enp3s0) = the robot's network.
    interface: str = ""
    family: str = "unitree_hg"  # the robot's message family (its description's low_level.family)
    lowcmd_topic: str = LOWCMD_TOPIC
    lowstate_topic: str = LOWSTATE_TOPIC


def dds_settings(robot: RobotDescription, domain: int = SIM_DOMAIN, interface: str = "") -> DdsSettings:
    """The DDS settings of a robot build: its family and topics, on ``domain`` / ``interface``."""
    ll = robot.low_level
    return DdsSettings(domain, interface, ll.family, ll.lowcmd_topic, ll.lowstate_topic)


def idl_types(family: str) -> tuple[type, type]:
    """(LowCmd_, LowState_) IDL types of a family."""
    if family == "unitree_go":
        from mocapline.robot.unitree import idl_go as idl
    else:
        from mocapline.robot.unitree import idl_hg as idl  # type: ignore[no-redef]
    return idl.LowCmd_, idl.LowState_


def config_xml(settings: DdsSettings) -> str | None:
    if not settings.interface:
        return None
    if settings.interface == "lo":
        return ("<CycloneDDS><Domain Id='any'><General><Interfaces><NetworkInterface name='lo'/></Interfaces>"
                "<AllowMulticast>false</AllowMulticast></General><Discovery>"
                "<ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>40</MaxAutoParticipantIndex>"
                "<Peers><Peer Address='127.0.0.1'/></Peers></Discovery></Domain></CycloneDDS>")
    return (f"<CycloneDDS><Domain Id='any'><General><Interfaces><NetworkInterface name='{settings.interface}'/>"
            "</Interfaces></General></Domain></CycloneDDS>")


class RawWriter:
    def __init__(self, writer: DataWriter) -> None:
        self.writer = writer
        self._ref = writer._ref

    def write(self, sample: bytes) -> None:
        ret = ddspy_write(self._ref, sample)
        if ret < 0:
            raise OSError(f"DDS write failed ({ret})")

    def wait_for_acks(self, timeout_s: float) -> bool:
        """True once every matched reader has acknowledged what was written (at once with none)."""
        return bool(self.writer.wait_for_acks(duration(seconds=max(0.0, timeout_s))))


class RawReader:
    """``waitable=False``: no waitset (``wait`` unusable), so dropping the RawReader deletes the
    DDS reader (the web viewer reads LowState only while a page is open)."""

    def __init__(self, participant: DomainParticipant, reader: DataReader, waitable: bool = True) -> None:
        self.reader = reader
        self._ref = reader._ref
        self.waitset: WaitSet | None = None
        if waitable:
            self.waitset = WaitSet(participant)
            self.waitset.attach(ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any))

    def take(self, n: int = 64) -> list[bytes]:
        """The samples waiting (up to ``n``), oldest first, as serialized bytes."""
        got = ddspy_take(self._ref, n)
        if isinstance(got, int):
            raise OSError(f"DDS take failed ({got})")
        return [data for data, info in got if info.valid_data]

    def wait(self, timeout_s: float) -> bool:
        assert self.waitset is not None, "a reader made with waitable=False"
        return self.waitset.wait(duration(seconds=max(0.0, timeout_s))) > 0


class LowLevel:
    """One participant with the two topics; ``command_writer``/``state_reader`` for the robot's
    controller (the bridge), ``state_writer``/``command_reader`` for the robot (the sim)."""

    def __init__(self, settings: DdsSettings, *, depth: int = 1) -> None:
        self.settings = settings
        xml = config_xml(settings)
        self.domain: Any = Domain(settings.domain, xml) if xml else None
        self.participant = DomainParticipant(settings.domain)
        self.qos = Qos(Policy.Reliability.Reliable(duration(milliseconds=10)), Policy.History.KeepLast(depth))
        low_cmd, low_state = idl_types(settings.family)
        self.cmd_topic: Topic = Topic(self.participant, settings.lowcmd_topic, low_cmd)
        self.state_topic: Topic = Topic(self.participant, settings.lowstate_topic, low_state)
        self._topics: dict[str, Topic] = {}
        self._writers: list[RawWriter] = []

    def _writer(self, topic: Topic) -> RawWriter:
        writer = RawWriter(DataWriter(self.participant, topic, qos=self.qos))
        self._writers.append(writer)
        return writer

    def _command_topic(self, name: str | None) -> Topic:
        """The LowCmd topic, or another topic of the LowCmd type (the arm interface, rt/arm_sdk)."""
        if name is None or name == self.settings.lowcmd_topic:
            return self.cmd_topic
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, idl_types(self.settings.family)[0])
        return self._topics[name]

    def command_writer(self, topic: str | None = None) -> RawWriter:
        return self._writer(self._command_topic(topic))

    def state_writer(self) -> RawWriter:
        return self._writer(self.state_topic)

    def command_reader(self, topic: str | None = None) -> RawReader:
        return RawReader(self.participant, DataReader(self.participant, self._command_topic(topic), qos=self.qos))

    def state_reader(self, waitable: bool = True) -> RawReader:
        return RawReader(self.participant, DataReader(self.participant, self.state_topic, qos=self.qos), waitable)

    def _base_topic(self) -> Topic:
        from mocapline.robot.unitree.base import BASE_TOPIC, idl_type

        if BASE_TOPIC not in self._topics:
            self._topics[BASE_TOPIC] = Topic(self.participant, BASE_TOPIC, idl_type())
        return self._topics[BASE_TOPIC]

    def base_writer(self) -> RawWriter:
        """mocapline sim's base pose (:mod:`.base`), beside LowState."""
        return self._writer(self._base_topic())

    def base_reader(self, waitable: bool = True) -> RawReader:
        return RawReader(self.participant, DataReader(self.participant, self._base_topic(), qos=self.qos), waitable)

    def _hand_topic(self, name: str, state: bool) -> Topic:
        from mocapline.robot.unitree.idl_hg import HandCmd_, HandState_

        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, HandState_ if state else HandCmd_)
        return self._topics[name]

    def hand_writer(self, topic: str, state: bool = False) -> RawWriter:
        """A hand's HandCmd_ (the bridge) or, ``state``, HandState_ (the sim) writer (:mod:`.hand`)."""
        return self._writer(self._hand_topic(topic, state))

    def hand_reader(self, topic: str, state: bool = False) -> RawReader:
        return RawReader(self.participant, DataReader(self.participant, self._hand_topic(topic, state), qos=self.qos),
                         waitable=False)

    def close(self, linger_s: float = CLOSE_LINGER_S) -> None:
        """Wait (at most ``linger_s`` in all) for the readers to acknowledge what the writers sent,
        then drop the participant. A bridge's last LowCmd, its damping, was written just before it
        exits: dropped at once, it did not always reach the robot (the sim counted 3012 of 3013)."""
        deadline = time.monotonic() + linger_s
        for writer in self._writers:
            writer.wait_for_acks(deadline - time.monotonic())
        self._writers.clear()
        self.participant = None  # type: ignore[assignment, unused-ignore]
        self.domain = None


@contextmanager
def open_low_level(settings: DdsSettings, *, depth: int = 1) -> Iterator[LowLevel]:
    ll = LowLevel(settings, depth=depth)
    try:
        yield ll
    finally:
        ll.close()
