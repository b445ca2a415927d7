"""The modes the pipeline's flags choose between, as types: a flag's ``choices`` are built from
them (``options.choices``) and a settings field holding one is checked by mypy."""

from __future__ import annotations

from typing import Literal

Source = Literal["axis", "xsens"]  # Axis Studio's binary BVH, Xsens MVN's MXTP02
# The UDP port each source sends to unless told otherwise (Axis Studio's default, MVN's network streamer's).
SOURCE_PORTS: dict[Source, int] = {"axis": 7014, "xsens": 9763}
Transport = Literal["udp", "tcp"]  # tcp: capture is the client of Axis Studio's TCP server
Display = Literal["auto", "window", "web", "none"]  # the viewer's; auto: a window where a display exists
