"""`mocapline.client`: what a robot process imports to receive the MocapFrame stream exactly once,
in order, across restarts of the streamer and of itself (``mocapline.core.consumer``, where the
stages' own fan-out inputs come from too).

    from mocapline.client import MocapClient, ClientSettings

    with MocapClient(ClientSettings("tcp://127.0.0.1:5555", name="g1-left", state="g1-left.pos")) as client:
        for frame in client.frames():
            apply(frame.mocap)

Exactly once into your own storage, across a kill of the robot process (docs/protocol.md): keep
each frame's result and its position in one step, with a ``Journal`` or your own transaction:

    journal = Journal("g1-left.journal")
    with MocapClient(ClientSettings(endpoint, name="g1-left"), store=journal) as client:
        client.run(lambda frame: apply(frame) or None, until_end=True)
"""

from mocapline.core.consumer import (
    ClientSettings,
    FilePosition,
    Frame,
    MemoryPosition,
    MocapClient,
    PositionStore,
)
from mocapline.core.journal import Journal, JournalEntry

__all__ = [
    "ClientSettings",
    "PositionStore",
    "MemoryPosition",
    "FilePosition",
    "Journal",
    "JournalEntry",
    "Frame",
    "MocapClient",
]
