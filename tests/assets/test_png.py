"""The pipeline's PNG writer (gymctl/assets/png.py): a valid zlib stream (Adler-32 included)
whether deflated in one piece or in two halves on two threads, and the same pixels back."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from gymctl.assets import png


def chunks(data: bytes) -> dict[bytes, bytes]:
    found, at = {}, 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        found[kind] = found.get(kind, b"") + body
        at += 12 + length
    return found


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 3), (3, 5, 4), (70, 1000, 3), (1000, 1001, 4), (1001, 1000, 3)],
    ids=["1px", "tiny", "single-part", "two-halves-rgba", "two-halves-odd-rows"],
)
def test_pixels_come_back_from_a_valid_zlib_stream(shape: tuple[int, int, int]) -> None:
    pixels = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    pixels[: shape[0] // 2] //= 16  # some runs, so deflate has matches to find too
    data = png.encode(pixels)
    assert data.startswith(png.SIGNATURE)
    filtered = zlib.decompress(chunks(data)[b"IDAT"])  # raises on a wrong Adler-32
    h, w, c = shape
    rows = np.frombuffer(filtered, np.uint8).reshape(h, w * c + 1)
    assert (rows[:, 0] == 0).all(), "filter none on every row"
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == ("RGB" if c == 3 else "RGBA")
        assert np.array_equal(np.asarray(image), pixels)


def test_only_8_bit_rgb_or_rgba() -> None:
    with pytest.raises(ValueError):
        png.encode(np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(ValueError):
        png.encode(np.zeros((4, 4, 3), np.uint16))
