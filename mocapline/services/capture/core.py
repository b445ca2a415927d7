"""The capture pipeline without sockets: datagram -> classify/parse -> ledger/merge -> HumanFrame.

Shared by the live service (UDP), `mocapline inspect` (recordings, pcap) and the tests, so all three
produce the same frames and the same ledger from the same bytes.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from mocapline.core.frames import HumanFrame
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, BvhReject, parse_datagram
from mocapline.formats.mxtp02 import XsensReject, parse_mxtp02
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.services.capture.merge import PathMerger

log = logging.getLogger(__name__)


class Decoder(Protocol):
    """Turns one datagram into (posture_index, decoded) or raises an exception with ``.reason``."""

    source: str

    def decode(self, data: bytes) -> tuple[int, Any]: ...

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]: ...

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]: ...


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

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.fk.bodies(decoded.channels)

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return self.fk.bodies_batch(np.stack([d.channels for d in decoded]))


class XsensDecoder:
    source = "xsens"

    def __init__(self, position_unit: str = "m") -> None:
        self.position_unit = position_unit

    def decode(self, data: bytes) -> tuple[int, Any]:
        frame = parse_mxtp02(data, position_unit=self.position_unit)
        return frame.sample_counter, frame

    def bodies(self, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
        return decoded.positions, decoded.quaternions

    def bodies_batch(self, decoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return np.stack([d.positions for d in decoded]), np.stack([d.quaternions for d in decoded])


@dataclass
class CaptureCounters:
    rejected: Counter[str] = field(default_factory=Counter)
    frames_out: int = 0


def _role(k: int) -> str:
    return ("main", "side")[k] if k < 2 else f"path{k + 1}"


class CaptureCore:
    """Feed datagrams in arrival order; collect HumanFrames, one per unique posture_index, in order."""

    def __init__(
        self,
        decoder: Decoder,
        ports: list[int],
        *,
        merge_window_s: float = 0.05,
        allowed_sources: frozenset[str] | None = None,
        session_id: str | None = None,
    ) -> None:
        self.decoder = decoder
        self.merger: PathMerger[tuple[Datagram, Any]] = PathMerger(ports, window_s=merge_window_s)
        self.allowed_sources = allowed_sources
        self.session_id = session_id or uuid.uuid4().hex
        self.counters = CaptureCounters()

    def feed(self, dgram: Datagram, now: float) -> list[HumanFrame]:
        return self._frames(self._push(dgram, now))

    def feed_batch(self, dgrams: list[Datagram], now: float) -> list[HumanFrame]:
        """Several datagrams (a backlog in the FIFO): same result as feeding them one by one, with
        the FK of all released frames done as one vectorised batch."""
        ready: list[tuple[int, tuple[Datagram, Any]]] = []
        for dgram in dgrams:
            ready.extend(self._push(dgram, now))
        return self._frames(ready)

    def _push(self, dgram: Datagram, now: float) -> list[tuple[int, tuple[Datagram, Any]]]:
        if self.allowed_sources is not None and dgram.source not in self.allowed_sources:
            self.counters.rejected["source_not_allowed"] += 1
            return []
        try:
            index, decoded = self.decoder.decode(dgram.data)
        except (BvhReject, XsensReject) as exc:
            self.counters.rejected[exc.reason] += 1
            return []
        return self.merger.push(dgram.port, index, (dgram, decoded), now)

    def poll(self, now: float) -> list[HumanFrame]:
        return self._frames(self.merger.poll(now))

    def flush(self) -> list[HumanFrame]:
        return self._frames(self.merger.flush())

    def _frames(self, ready: list[tuple[int, tuple[Datagram, Any]]]) -> list[HumanFrame]:
        """FK for the frames the merger released; several at once (a backlog) go as one batch."""
        if not ready:
            return []
        if len(ready) == 1:
            pos, quat = self.decoder.bodies(ready[0][1][1])
            all_pos, all_quat = pos[None], quat[None]
        else:
            all_pos, all_quat = self.decoder.bodies_batch([decoded for _, (_, decoded) in ready])
        out = []
        for k, (index, (dgram, _)) in enumerate(ready):
            positions, quaternions = all_pos[k], all_quat[k]
            out.append(
                HumanFrame(
                    posture_index=index,
                    capture_timestamp_us=dgram.recv_ns // 1000,
                    positions=positions,
                    quaternions=quaternions,
                    source=self.decoder.source,
                    segment=self.merger.segment,
                    session_id=self.session_id,
                    source_port=dgram.port,
                )
            )
        self.counters.frames_out += len(out)
        return out

    def ledger(self, input_pending: int = 0) -> dict[str, Any]:
        """The ledger (docs/ledger.md), plus per-path detail."""
        merged = self.merger.merged
        paths = self.merger.paths
        return {
            "source_received": sum(p.ledger.received for p in paths.values()),
            "source_unique_frames": merged.unique,
            "source_missing_indices": merged.missing,
            "source_duplicate_indices": self.merger.duplicates,
            "source_backward_indices": merged.backward,
            "rejected_datagrams": sum(self.counters.rejected.values()),
            "first_posture_index": merged.first,
            "last_posture_index": merged.last,
            "missing_ranges": [list(r) for r in merged.missing_ranges],
            "segments": merged.segment + 1 if merged.first is not None else 0,
            "per_segment": merged.segment_counts(),
            "cross_path_copies": self.merger.cross_path_copies,
            "late_frames": self.merger.late_frames,
            "rejected_by_reason": dict(sorted(self.counters.rejected.items())),
            "input_pending": input_pending + self.merger.pending,
            "human_frames_out": self.counters.frames_out,
            # In --ports order: the first is the main path, the second the side path.
            "paths": {
                str(port): {"role": _role(k), **p.ledger.as_dict("source_")}
                for k, (port, p) in enumerate(paths.items())
            },
        }
