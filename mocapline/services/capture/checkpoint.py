"""Capture's checkpoints: the core's whole state (ledgers, merge window, counters) at a journal
position, so that a restarted capture replays only the journal after it instead of the whole take.

Taken only at a quiet moment, when every datagram journaled so far has gone through the core and
every frame it released has been sent: then "journal records before ``position``" and "the core's
state" describe the same instant. Written to a temporary file, flushed and renamed over the last
one, so a crash leaves either the old checkpoint or the new one, never half of one. The file is
this service's own state (pickle); it is never read from anywhere else.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mocapline.services.capture.core import CaptureCore

FILENAME = "capture.checkpoint"


@dataclass
class Checkpoint:
    take_start: int  # journal number of the take's marker: a checkpoint of another take is ignored
    position: int  # every journal record below this went through ``core``
    produced: int  # frames the core had released in this take (all of them sent)
    core: CaptureCore  # with its decoder detached (rebuilt from the flags at start)
    decoder_state: dict[str, Any]


def save(directory: Path, checkpoint: Checkpoint) -> None:
    core = checkpoint.core
    decoder = core.decoder
    checkpoint.decoder_state = {"arrivals": getattr(decoder, "_arrivals", 0)}
    core.decoder = None  # type: ignore[assignment]
    try:
        blob = pickle.dumps(checkpoint, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        core.decoder = decoder
    tmp = Path(directory) / (FILENAME + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, Path(directory) / FILENAME)


def load(directory: Path, decoder: Any) -> Checkpoint | None:
    """The last checkpoint with ``decoder`` attached, or None (none yet, or unreadable: then the
    caller replays the whole take, which is slower but just as exact)."""
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    try:
        checkpoint = pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - a bad checkpoint only costs a longer replay
        return None
    if not isinstance(checkpoint, Checkpoint) or not hasattr(checkpoint.core, "characters"):
        return None  # not ours, or written before capture kept Xsens characters (or one merger per performer)
    checkpoint.core.decoder = decoder
    if hasattr(decoder, "_arrivals"):
        decoder._arrivals = int(checkpoint.decoder_state.get("arrivals", 0))
    return checkpoint
