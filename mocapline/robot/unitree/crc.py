"""The CRC Unitree's robots check on LowCmd (and put on LowState).

The rule: over the packed struct's 32-bit little-endian words, the ``crc`` field left out;
polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no reflection, no final xor, each word fed most
significant bit first. Feeding a word MSB first is feeding its little-endian bytes in reverse
order, so the rule is CRC-32/MPEG-2 over the words' bytes swapped.

:func:`crc32_words` computes it in C through zlib's CRC-32: zlib's is the reflected form of the
same polynomial, so reflecting every input byte, then the (un-xored) result, gives the plain form.
:func:`crc32_words_reference` is the rule written out bit by bit (slow; the tests compare both).
"""

from __future__ import annotations

import zlib

import numpy as np

POLY = 0x04C11DB7
INIT = 0xFFFFFFFF

_REVERSED_BYTE = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _reflect32(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


def crc32_words(data: bytes | bytearray | memoryview) -> int:
    """The CRC of ``data`` (a whole number of 32-bit little-endian words)."""
    if len(data) % 4:
        raise ValueError(f"{len(data)} bytes is not a whole number of 32-bit words")
    swapped = np.frombuffer(data, dtype="<u4").astype(">u4").tobytes()
    # zlib.crc32 starts from 0xFFFFFFFF and xors the end with it: undo the final xor.
    reflected = zlib.crc32(swapped.translate(_REVERSED_BYTE)) ^ 0xFFFFFFFF
    return _reflect32(reflected)


def crc32_words_reference(data: bytes | bytearray | memoryview) -> int:
    """The rule as stated, one bit at a time."""
    if len(data) % 4:
        raise ValueError(f"{len(data)} bytes is not a whole number of 32-bit words")
    crc = INIT
    for (word,) in np.frombuffer(data, dtype="<u4").reshape(-1, 1).tolist():
        for bit in range(31, -1, -1):
            top = (crc >> 31) ^ ((word >> bit) & 1)
            crc = (crc << 1) & 0xFFFFFFFF
            if top:
                crc ^= POLY
    return crc


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 of a byte string, MSB first (check value of b"123456789": 0x0376E6E7)."""
    crc = INIT
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ POLY) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc
