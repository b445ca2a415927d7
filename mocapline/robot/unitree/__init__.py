"""Unitree's low-level interface as mocapline speaks it: the ``unitree_hg`` LowCmd / LowState
messages (their byte layouts, their CRC) and Cyclone DDS around them.

``crc`` and ``lowlevel`` need numpy only; ``idl`` and ``dds`` import cyclonedds (the ``[robot]``
extra), so nothing else in mocapline does.
"""
