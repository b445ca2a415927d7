"""The capture pipeline without sockets: datagram -> classify/parse -> ledger/merge -> HumanFrame.

Shared by the live service (UDP, TCP), `mocapline inspect` (recordings, pcap) and the tests, so all
produce the same frames and the same ledger from the same bytes.

Several performers: each Axis avatar_index (Xsens character ID) is a performer with its own
merger and ledger (its own posture_index sequence, gaps, duplicates, segments); the top-level
ledger fields combine them (``mocapline.core.ledger.combine``: equal to the one performer's when
there is one) and ``performers`` holds each one's. Rejected datagrams belong to no performer.

Before decoding, each path's assembler joins frames sent as several datagrams (Axis Neuron's
split frames, MVN's split samples; over Axis TCP datagrams come whole). Xsens messages that are
no performer's frame are kept here, not rejected: MXTP12 names and MXTP13 scaling per character,
and characters with props only (counted, their latest pose carried on every frame after).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.frames import N_BODIES, HumanFrame
from mocapline.core.ledger import combine, index_ranges
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, BvhReject, parse_datagram
from mocapline.formats.axis_split import AxisSplitAssembler
from mocapline.formats.mxtp02 import (
    POSITION_UNITS,
    MxtpAssembler,
    PositionUnit,
    PositionUnitSetting,
    XsensFrame,
    XsensReject,
    guess_position_unit,
    parse_mxtp02,
)
from mocapline.formats.mxtp_meta import (
    META_ID,
    SCALING_ID,
    ScalePoint,
    XsensMeta,
    XsensScaling,
    parse_meta,
    parse_scaling,
    scaling_height,
)
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture.assemblers import Assembler, WholeDatagrams, assembler_record, restored_assembler
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.services.capture.merge import PathMerger
from mocapline.services.capture.state import (
    CaptureState,
    CharacterState,
    DecoderState,
    PerformerState,
    PropState,
    StateError,
)

log = logging.getLogger(__name__)

PELVIS_HEIGHT_M = (0.3, 2.0)  # a standing or crouching person's pelvis


class Decoder(Protocol):
    """Turns one datagram into (posture_index, decoded) or raises an exception with ``.reason``."""

    source: str

    def decode(self, data: bytes) -> tuple[int, Any]: ...

    def performer(self, decoded: Any) -> tuple[int, str]: ...

    def assembler(self) -> Assembler: ...

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
        """The GMR bodies, followed by the hand bodies where the decoder computes them (Axis)."""
        ...

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]: ...

    def state(self) -> DecoderState: ...

    def restore(self, state: DecoderState) -> None: ...


class AxisDecoder:
    source = "axis"

    def __init__(self, config: AxisBvhConfig) -> None:
        self.config = config
        self.fk = AxisForwardKinematics(get_skeleton(config.skeleton), config.rotation_order)
        self._arrivals = 0

    def decode(self, data: bytes) -> tuple[int, Any]:
        dgram = parse_datagram(data, self.config)
        if dgram.posture_index is None:
            # The legacy header carries no frame index: number frames by arrival. Gaps and
            # duplicates cannot be detected in this mode (the service warns at start-up).
            dgram.posture_index = self._arrivals
        self._arrivals += 1
        return dgram.posture_index, dgram

    def state(self) -> DecoderState:
        return DecoderState(arrivals=self._arrivals)

    def restore(self, state: DecoderState) -> None:
        self._arrivals = state.arrivals

    def performer(self, decoded: Any) -> tuple[int, str]:
        return decoded.avatar_index, decoded.avatar_name

    def assembler(self) -> AxisSplitAssembler:
        return AxisSplitAssembler(self.config)

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.fk.bodies_and_hands(decoded.channels)

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return self.fk.bodies_and_hands_batch(np.stack([d.channels for d in decoded]))


class XsensDecoder:
    """MXTP02; each character ID is a performer. The first frame's pelvis height checks the
    position unit (the spec says cm, Xsens' manual m): a wrong one is logged once, loudly, with
    the flag that fixes it; ``position_unit="auto"`` lets that first frame decide."""

    source = "xsens"

    def __init__(self, position_unit: PositionUnitSetting = "m") -> None:
        self.position_unit = position_unit
        self.unit_check: dict[str, Any] | None = None

    def decode(self, data: bytes) -> tuple[int, Any]:
        """MXTP02 (a props-only character too), or MXTP12 / MXTP13 for the core to keep (index -1)."""
        unit: PositionUnit = "m" if self.position_unit == "auto" else self.position_unit
        message = bytes(data[:6])
        if message == META_ID:
            return -1, parse_meta(data)
        if message == SCALING_ID:
            return -1, parse_scaling(data, unit)
        frame = parse_mxtp02(data, position_unit=unit)
        if self.unit_check is None and frame.has_body:
            self._check_unit(frame)
        if self.position_unit == "auto" and self.unit_check is not None:
            for positions in (frame.positions, frame.prop_positions, frame.finger_positions):
                positions *= self.unit_check["scale"]
        return (frame.sample_counter if frame.has_body else -1), frame

    def state(self) -> DecoderState:
        return DecoderState(unit_check=None if self.unit_check is None else dict(self.unit_check))

    def restore(self, state: DecoderState) -> None:
        self.unit_check = None if state.unit_check is None else dict(state.unit_check)

    def _check_unit(self, frame: XsensFrame) -> None:
        read_as = "m" if self.position_unit == "auto" else self.position_unit
        raw = float(frame.positions[GMR_BODY_INDEX["Hips"], 2]) / POSITION_UNITS[read_as]
        guess = guess_position_unit(raw)
        unit = (guess or "m") if self.position_unit == "auto" else self.position_unit
        height = raw * POSITION_UNITS[unit]
        plausible = PELVIS_HEIGHT_M[0] <= height <= PELVIS_HEIGHT_M[1]
        if self.position_unit == "auto":
            log.warning("xsens: --position-unit auto: the first frame's pelvis is %.3f raw, read as %s (%.2f m)",
                        raw, unit, height)
        elif not plausible:
            fix = (f"restart capture with --position-unit {guess} (env MOCAPLINE_POSITION_UNIT={guess})"
                   if guess else "check MVN's streaming settings (is the character standing?)")
            log.warning("xsens: the pelvis is %.2f m above the floor with --position-unit %s, not a person's "
                        "height: %s", height, unit, fix)
        self.unit_check = {"position_unit": self.position_unit, "read_as": unit, "pelvis_height_m": height,
                           "plausible": plausible, "suggested_unit": guess,
                           "scale": POSITION_UNITS[unit] if self.position_unit == "auto" else 1.0}

    def performer(self, decoded: Any) -> tuple[int, str]:
        return decoded.character_id, ""

    def assembler(self) -> MxtpAssembler:
        return MxtpAssembler()

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
        return decoded.positions, decoded.quaternions

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return np.stack([d.positions for d in decoded]), np.stack([d.quaternions for d in decoded])


@dataclass
class CaptureCounters:
    rejected: Counter[str] = field(default_factory=Counter)
    frames_out: int = 0
    meta_datagrams: Counter[str] = field(default_factory=Counter)  # MXTP12 / MXTP13 taken in


@dataclass
class PropCharacter:
    """A character that streams props only (a tracked object): counted, its latest pose carried."""

    samples: int = 0
    last: XsensFrame | None = None
    last_data: bytes | None = None  # its datagram (what a checkpoint keeps)
    unit_checked: bool = True  # decoded after the position-unit check (with --position-unit auto: scaled)


@dataclass
class CharacterInfo:
    """What MXTP12 and MXTP13 said about a character."""

    name: str = ""
    segments: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    points: tuple[ScalePoint, ...] = ()
    height: float | None = None


def _role(k: int) -> str:
    return ("main", "side")[k] if k < 2 else f"path{k + 1}"


@dataclass
class Performer:
    """One avatar / character: its merger holds its ledger and merge state."""

    index: int
    name: str
    merger: PathMerger[tuple[Datagram, Any]]


class CaptureCore:
    """Feed datagrams in arrival order; collect HumanFrames, one per unique posture_index of each
    performer, in order per performer."""

    def __init__(
        self,
        decoder: Decoder,
        ports: list[int],
        *,
        merge_window_s: float = 0.25,
        allowed_sources: frozenset[str] | None = None,
        session_id: str | None = None,
        stream_ports: frozenset[int] = frozenset(),
    ) -> None:
        self.decoder = decoder
        self.ports = list(ports)
        self.stream_ports = stream_ports  # Axis TCP paths: datagrams cut from a stream, never split
        self.window_s = merge_window_s
        self.performers: dict[int, Performer] = {}
        self.assemblers: dict[int, Assembler] = {}
        self.allowed_sources = allowed_sources
        self.session_id = session_id or uuid.uuid4().hex
        self.counters = CaptureCounters()
        self.characters: dict[int, CharacterInfo] = {}  # Xsens MXTP12 / MXTP13, by character ID
        self.props: dict[int, PropCharacter] = {}  # Xsens characters with props only

    def state(self) -> CaptureState:
        """The whole state as a record (``state.py``): with the same decoder flags,
        ``from_state`` of it goes on exactly as this core would."""
        return CaptureState(
            session_id=self.session_id, ports=list(self.ports), merge_window_s=self.window_s,
            allowed_sources=self.allowed_sources, rejected=dict(self.counters.rejected),
            frames_out=self.counters.frames_out, decoder=self.decoder.state(),
            performers=[PerformerState(p.index, p.name, p.merger.state().map_items(lambda item: item[0]))
                        for p in self.performers.values()],
            assemblers={port: assembler_record(a) for port, a in self.assemblers.items()},
            stream_ports=sorted(self.stream_ports), meta_datagrams=dict(self.counters.meta_datagrams),
            characters=[CharacterState(c, i.name, dict(i.segments), i.points) for c, i in self.characters.items()],
            props=[PropState(c, p.samples, p.last_data, p.unit_checked) for c, p in self.props.items()],
        )

    @classmethod
    def from_state(cls, state: CaptureState, decoder: Decoder) -> CaptureCore:
        """A core in ``state`` around ``decoder`` (built from the flags, restored here); the frames
        waiting in the merge window are decoded again from their bytes. ``StateError`` if one of
        them no longer decodes (a state written under other flags)."""
        core = cls(decoder, state.ports, merge_window_s=state.merge_window_s, allowed_sources=state.allowed_sources,
                   session_id=state.session_id, stream_ports=frozenset(state.stream_ports))
        core.counters = CaptureCounters(Counter(state.rejected), state.frames_out, Counter(state.meta_datagrams))
        before = decoder.state()
        decoder.restore(state.decoder)  # before decoding again (the Xsens unit scale) and after
        try:
            for saved in state.performers:
                merger = PathMerger.from_state(saved.merger.map_items(core._decoded))
                core.performers[saved.index] = Performer(saved.index, saved.name, merger)
            for prop in state.props:
                last = None if prop.last is None else core._prop_sample(prop.last, prop.unit_checked, state.decoder)
                core.props[prop.character] = PropCharacter(prop.samples, last, prop.last, prop.unit_checked)
            core.assemblers = {port: restored_assembler(a, decoder.assembler) for port, a in state.assemblers.items()}
        except StateError:
            decoder.restore(before)
            raise
        core.characters = {c.character: CharacterInfo(c.name, dict(c.segments), c.points,
                                                      scaling_height(c.segments, c.points))
                           for c in state.characters}
        decoder.restore(state.decoder)  # decoding again counted Axis arrivals
        return core

    def _decoded(self, dgram: Datagram) -> tuple[Datagram, Any]:
        index, decoded = self._decode_again(dgram.data, "a frame in the merge window")
        if index < 0:
            raise StateError("a frame in the merge window is not a performer's")
        return dgram, decoded

    def _prop_sample(self, data: bytes, unit_checked: bool, decoder: DecoderState) -> XsensFrame:
        if not unit_checked:
            self.decoder.restore(replace(decoder, unit_check=None))  # as it was decoded: not scaled
        try:
            index, decoded = self._decode_again(data, "a props-only character's sample")
        finally:
            self.decoder.restore(decoder)
        if index >= 0 or not isinstance(decoded, XsensFrame):
            raise StateError("a props-only character's sample is not one")
        return decoded

    def _decode_again(self, data: bytes, what: str) -> tuple[int, Any]:
        try:
            return self.decoder.decode(data)
        except (BvhReject, XsensReject) as exc:
            raise StateError(f"{what} does not decode: {exc.reason}") from None

    def performer(self, index: int, name: str = "") -> Performer:
        state = self.performers.get(index)
        info = self.characters.get(index)
        if info is not None and info.name:
            name = info.name
        if state is None:
            merger: PathMerger[tuple[Datagram, Any]] = PathMerger(self.ports, window_s=self.window_s)
            state = self.performers[index] = Performer(index, name, merger)
        elif name and not state.name:
            state.name = name
        return state

    def _take_in(self, decoded: Any, data: bytes) -> None:
        """An Xsens message beside the poses: names (MXTP12), scaling (MXTP13), a props-only character."""
        if isinstance(decoded, XsensFrame):
            prop = self.props.setdefault(decoded.character_id, PropCharacter())
            if prop.last is None or prop.last.sample_counter != decoded.sample_counter:
                prop.samples += 1  # a copy of the same sample from another path is not another sample
            prop.last, prop.last_data = decoded, bytes(data)
            prop.unit_checked = self.decoder.state().unit_check is not None
            return
        info = self.characters.setdefault(decoded.character_id, CharacterInfo())
        if isinstance(decoded, XsensMeta):
            self.counters.meta_datagrams["MXTP12"] += 1
            if decoded.name:
                info.name = decoded.name
                if decoded.character_id in self.performers:
                    self.performers[decoded.character_id].name = decoded.name
            return
        assert isinstance(decoded, XsensScaling)
        self.counters.meta_datagrams["MXTP13"] += 1
        if decoded.segments:
            info.segments, info.points = decoded.segments, ()
        info.points += decoded.points
        info.height = scaling_height(info.segments, info.points)

    @property
    def merger(self) -> PathMerger[tuple[Datagram, Any]]:
        """The first performer's merger (the only one, for a single performer); before any frame,
        an empty one that belongs to no performer (for reading)."""
        if not self.performers:
            return PathMerger(self.ports, window_s=self.window_s)
        return next(iter(self.performers.values())).merger

    def paths_live(self, now: float) -> None:
        """Count every path as live from ``now`` (capture starts listening): a gap then waits, up to
        the merge window, for a path whose backlog is still being read. After a restart over TCP the
        TCP path resumes at the current index at once, while the UDP side path, whose socket was
        held, still has the missed indices queued; without this the side path looks long dead
        (its last datagram was before the crash) and the gap would be final at once."""
        for performer in self.performers.values():
            for state in performer.merger.paths.values():
                state.last_arrival = max(state.last_arrival, now)

    def feed(self, dgram: Datagram, now: float) -> list[HumanFrame]:
        return self._frames(self._push(dgram, now))

    def feed_batch(self, dgrams: list[Datagram], now: float) -> list[HumanFrame]:
        """Several datagrams (a backlog in the FIFO): same result as feeding them one by one, with
        the FK of all released frames done as one vectorised batch."""
        ready: list[tuple[Performer, int, tuple[Datagram, Any]]] = []
        for dgram in dgrams:
            ready.extend(self._push(dgram, now))
        return self._frames(ready)

    def _push(self, dgram: Datagram, now: float) -> list[tuple[Performer, int, tuple[Datagram, Any]]]:
        if self.allowed_sources is not None and dgram.source not in self.allowed_sources:
            self.counters.rejected["source_not_allowed"] += 1
            return []
        data = self._assembler(dgram.port).push(dgram.data, dgram.recv_ns, dgram.source)
        if data is None:
            return []  # one part of a split frame: held until the rest is in, or counted as rejected
        if data is not dgram.data:
            dgram = replace(dgram, data=data)  # the joined frame: what a checkpoint keeps of it
        try:
            index, decoded = self.decoder.decode(data)
        except (BvhReject, XsensReject) as exc:
            self.counters.rejected[exc.reason] += 1
            return []
        if index < 0:
            self._take_in(decoded, data)
            return []
        performer = self.performer(*self.decoder.performer(decoded))
        released = performer.merger.push(dgram.port, index, (dgram, decoded), now)
        return [(performer, i, item) for i, item in released]

    def _assembler(self, port: int) -> Assembler:
        assembler = self.assemblers.get(port)
        if assembler is None:
            whole = port in self.stream_ports
            assembler = self.assemblers[port] = WholeDatagrams() if whole else self.decoder.assembler()
        return assembler

    def poll(self, now: float) -> list[HumanFrame]:
        return self._frames([(p, i, item) for p in self.performers.values() for i, item in p.merger.poll(now)])

    def flush(self) -> list[HumanFrame]:
        for assembler in self.assemblers.values():
            assembler.flush()
        return self._frames([(p, i, item) for p in self.performers.values() for i, item in p.merger.flush()])

    def _frames(self, ready: list[tuple[Performer, int, tuple[Datagram, Any]]]) -> list[HumanFrame]:
        """FK for the frames the mergers released; several at once (a backlog) go as one batch."""
        if not ready:
            return []
        if len(ready) == 1:
            pos, quat = self.decoder.bodies(ready[0][2][1])
            all_pos, all_quat = pos[None], quat[None]
        else:
            all_pos, all_quat = self.decoder.bodies_batch([decoded for _, _, (_, decoded) in ready])
        out = []
        for k, (performer, index, (dgram, decoded)) in enumerate(ready):
            frame = HumanFrame(
                posture_index=index,
                capture_timestamp_us=dgram.recv_ns // 1000,
                positions=all_pos[k, :N_BODIES],
                quaternions=all_quat[k, :N_BODIES],
                source=self.decoder.source,
                segment=performer.merger.segment,
                session_id=self.session_id,
                source_port=dgram.port,
                avatar_index=performer.index,
                avatar_name=performer.name,
            )
            if isinstance(decoded, XsensFrame):
                self._xsens_extras(frame, decoded)
            elif all_pos.shape[1] > N_BODIES:
                frame.finger_positions, frame.finger_quaternions = all_pos[k, N_BODIES:], all_quat[k, N_BODIES:]
            out.append(frame)
        self.counters.frames_out += len(out)
        return out

    def _xsens_extras(self, frame: HumanFrame, decoded: XsensFrame) -> None:
        """Fingers, props (the character's own, then every props-only character's latest pose) and
        the height MXTP13 gave."""
        frame.finger_positions, frame.finger_quaternions = decoded.finger_positions, decoded.finger_quaternions
        sources = [decoded] + [p.last for _, p in sorted(self.props.items()) if p.last is not None]
        sources = [f for f in sources if len(f.prop_ids)]
        if sources:
            frame.prop_character = tuple(f.character_id for f in sources for _ in f.prop_ids)
            frame.prop_segment = tuple(int(i) for f in sources for i in f.prop_ids)
            frame.prop_positions = np.concatenate([f.prop_positions for f in sources])
            frame.prop_quaternions = np.concatenate([f.prop_quaternions for f in sources])
        info = self.characters.get(decoded.character_id)
        if info is not None and info.height:
            frame.human_height = info.height

    def _merger_ledger(self, merger: PathMerger[tuple[Datagram, Any]]) -> dict[str, Any]:
        """One performer's ledger with the seeds' field names, plus per-path detail."""
        merged = merger.merged
        return {
            "source_received": sum(p.ledger.received for p in merger.paths.values()),
            "source_unique_frames": merged.unique,
            "source_missing_indices": merged.missing,
            "source_duplicate_indices": merger.duplicates,
            "source_backward_indices": merged.backward,
            "first_posture_index": merged.first,
            "last_posture_index": merged.last,
            "missing_ranges": [list(r) for r in merged.missing_ranges],
            "segments": merged.segment + 1 if merged.first is not None else 0,
            "per_segment": merged.segment_counts(),
            "cross_path_copies": merger.cross_path_copies,
            "late_frames": merger.late_frames,
            "late_ranges": index_ranges(merger.late_indices),
            "input_pending": merger.pending,
            # In --ports order: the first is the main path, the second the side path.
            "paths": {
                str(port): {"role": _role(k), **p.ledger.as_dict("source_")}
                for k, (port, p) in enumerate(merger.paths.items())
            },
        }

    def ledger(self, input_pending: int = 0) -> dict[str, Any]:
        """The ledger (docs/ledger.md), plus per-path and per-performer detail."""
        performers = {str(k): self._merger_ledger(p.merger) for k, p in self.performers.items()}
        overall = combine(list(performers.values())) if performers else self._merger_ledger(self.merger)
        rejected = Counter(self.counters.rejected)
        held = split_frames = 0
        for assembler in self.assemblers.values():
            held += assembler.pending
            split_frames += assembler.joined
            rejected.update(assembler.rejected)
        paths = overall.pop("paths")
        led: dict[str, Any] = {
            "source_received": overall["source_received"],
            "source_unique_frames": overall["source_unique_frames"],
            "source_missing_indices": overall["source_missing_indices"],
            "source_duplicate_indices": overall["source_duplicate_indices"],
            "source_backward_indices": overall["source_backward_indices"],
            "rejected_datagrams": sum(rejected.values()),
            "first_posture_index": overall["first_posture_index"],
            "last_posture_index": overall["last_posture_index"],
            "missing_ranges": overall["missing_ranges"],
            # Runs between backward jumps (a looped take, an Axis restart); with several performers
            # the count adds up theirs and the detail is in each performer's ledger.
            "segments": overall["segments"],
            "per_segment": overall["per_segment"] if len(performers) <= 1 else [],
            "cross_path_copies": overall["cross_path_copies"],
            "late_frames": overall["late_frames"],
            "late_ranges": overall["late_ranges"],
            "rejected_by_reason": dict(sorted((k, v) for k, v in rejected.items() if v)),
            # frames (MVN samples) that came as several datagrams and were joined
            "split_frames": split_frames,
            "input_pending": input_pending + overall["input_pending"] + held,
            "human_frames_out": self.counters.frames_out,
            "paths": paths,
            "performers": {
                k: {"avatar_index": p.index, "avatar_name": p.name, **performers[k]}
                for k, p in ((str(i), p) for i, p in self.performers.items())
            },
        }
        if self.props or self.characters:
            led["props"] = {str(c): {"samples": p.samples, "segments": len(p.last.prop_ids) if p.last else 0,
                                     **({"name": info.name} if (info := self.characters.get(c)) and info.name else {})}
                            for c, p in sorted(self.props.items())}
            led["meta_datagrams"] = dict(sorted(self.counters.meta_datagrams.items()))
            for k, performer in led["performers"].items():
                info = self.characters.get(int(k))
                if info is not None and info.height:
                    performer["human_height_m"] = round(info.height, 3)
        if getattr(self.decoder, "unit_check", None) is not None:
            led["unit_check"] = self.decoder.unit_check  # type: ignore[attr-defined]
        return led
