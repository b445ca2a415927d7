"""Capture's checkpoints: the core's whole state (ledgers, merge window, counters) at a journal
position, so that a restarted capture replays only the journal after it instead of the whole take.

Taken only at a quiet moment, when every datagram journaled so far has gone through the core and
every frame it released has been sent: then "journal records before ``position``" and "the core's
state" describe the same instant. Written to a temporary file, flushed and renamed over the last
one, so a crash leaves either the old checkpoint or the new one, never half of one.

The file is JSON: ``take_start``, ``position``, ``produced`` and ``capture``, the core's state
record (``state.py``, versioned). A checkpoint that does not read (damaged, another version, or the
pickle that capture wrote before the record existed, under its old name, which is never unpickled)
is logged and ignored: the restart then replays the whole take, slower but just as exact.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from mocapline.services.capture import state as capture_state
from mocapline.services.capture.state import CaptureState, StateError

log = logging.getLogger(__name__)

FILENAME = "capture.state.json"
LEGACY_FILENAME = "capture.checkpoint"  # a pickle, before the state record (left unread, removed)


@dataclass
class Checkpoint:
    take_start: int  # journal number of the take's marker: a checkpoint of another take is ignored
    position: int  # every journal record below this went through ``core``
    produced: int  # frames the core had released in this take (all of them sent)
    capture: CaptureState


def save(directory: Path, checkpoint: Checkpoint) -> None:
    blob = json.dumps({"take_start": checkpoint.take_start, "position": checkpoint.position,
                       "produced": checkpoint.produced, "capture": capture_state.to_json(checkpoint.capture)},
                      separators=(",", ":"), allow_nan=False).encode()
    tmp = Path(directory) / (FILENAME + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, Path(directory) / FILENAME)
    Path(directory, LEGACY_FILENAME).unlink(missing_ok=True)


def decode(blob: bytes) -> Checkpoint:
    """The checkpoint in ``blob``, or ``StateError`` saying what is wrong with it."""
    obj = capture_state.parse_json(blob, "capture checkpoint")
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool)
                                            for k in ("take_start", "position", "produced")):
        raise StateError("not a capture checkpoint (take_start, position or produced missing)")
    record = capture_state.from_json(obj.get("capture"))
    return Checkpoint(obj["take_start"], obj["position"], obj["produced"], record)


def load(directory: Path) -> Checkpoint | None:
    """The last checkpoint, or None (none yet, or one that does not read: then the caller replays
    the whole take)."""
    path = Path(directory) / FILENAME
    if not path.exists():
        if Path(directory, LEGACY_FILENAME).exists():
            log.warning("capture: %s is a checkpoint of an older capture (pickle), not read: the take is "
                        "replayed from the start of the journal", LEGACY_FILENAME)
        return None
    try:
        return decode(path.read_bytes())
    except (OSError, StateError) as exc:
        log.warning("capture: checkpoint %s not used (%s): the take is replayed from the start of the journal",
                    path, exc)
        return None
