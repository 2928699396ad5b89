"""Small encoded images that declare huge pictures (decompression bombs), made without the pixels.

Shared by the unit tests (every entry point refuses them from the header) and the node test
(the node's peak memory stays flat when one arrives on image/compressed); ``traced_peak``
says what a call allocated on the way to its answer.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable

import cv2
import numpy as np


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(side: int, colour: tuple[int, int, int] = (30, 60, 90), rows_per_block: int = 100) -> bytes:
    """A valid RGB PNG of side x side pixels of one colour, made without holding its pixels.

    Rows after the first use the "up" filter (all zero bytes). Each block of rows is deflated
    after a full flush, which resets the compressor, so one compressed block can be repeated;
    the zlib checksum is accumulated block by block.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = b"\x00" + bytes(colour) * side
    row = b"\x02" + bytes(3 * side)
    blocks, tail = divmod(side - 1, rows_per_block)
    block = row * rows_per_block
    head = compressor.compress(first) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.compress(row * tail) + compressor.flush(zlib.Z_FINISH)
    checksum = zlib.adler32(first)
    for _ in range(blocks):
        checksum = zlib.adler32(block, checksum)
    checksum = zlib.adler32(row * tail, checksum)
    stream = b"\x78\xda" + head + middle * blocks + end + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    chunks = _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", stream) + _png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def jpeg_declaring(width: int, height: int) -> bytes:
    """A small baseline JPEG whose frame header (SOF0) is rewritten to declare width x height."""
    ok, encoded = cv2.imencode(".jpg", np.full((16, 16, 3), 128, np.uint8))
    assert ok
    data = bytearray(encoded.tobytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def traced_peak(call: Callable[[], object], refusal: type[Exception] = ValueError) -> tuple[object, int]:
    """(the call's result or the ``refusal`` it raised, peak bytes tracemalloc saw meanwhile).

    numpy and OpenCV output arrays are traced (both allocate through numpy), so a decoded
    bitmap shows up here whichever library made it.
    """
    tracemalloc.start()
    try:
        try:
            outcome: object = call()
        except refusal as error:
            outcome = error
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
