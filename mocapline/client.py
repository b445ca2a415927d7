"""`mocapline.client`: what a robot process imports to receive the MocapFrame stream exactly once,
in order, across restarts of the streamer and of itself (``mocapline.core.consumer``, where the
stages' own fan-out inputs come from too).

    from mocapline.client import MocapClient, ClientSettings

    with MocapClient(ClientSettings("tcp://127.0.0.1:5555", name="g1-left", state="g1-left.pos")) as client:
        for frame in client.frames():
            apply(frame.mocap)
"""

from mocapline.core.consumer import (
    ClientSettings,
    FilePosition,
    Frame,
    MemoryPosition,
    MocapClient,
    PositionStore,
)

__all__ = [
    "ClientSettings",
    "PositionStore",
    "MemoryPosition",
    "FilePosition",
    "Frame",
    "MocapClient",
]
