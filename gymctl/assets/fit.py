"""Fit a JPEG within the slot's bounds with libvips (pyvips): decode, crop and Lanczos-3 downscale
as one stream over both cores, never holding the full-resolution source (a 40 MP source costs
160 MB and most of the time in Pillow). The decoded pixels are Pillow's (the same libjpeg-turbo
settings); the resampling differs from Pillow's Lanczos by a level or two (docs/decisions.md).

Only the pixels come from here: the probe, the orientation and the crop box are read with Pillow
beforehand, and libvips is asked for JPEG alone, so it never sniffs a format itself.
"""

from __future__ import annotations

import numpy as np
import pyvips

Box = tuple[int, int, int, int]

# Every upload is a new file: cached operations would only hold on to memory.
pyvips.cache_set_max(0)


class Unreadable(Exception):
    """libvips could not decode the file (damaged or truncated)."""


def jpeg(
    data: bytes,
    stored: tuple[int, int],
    orientation: int,
    box: Box,
    size: tuple[int, int],
    *,
    alpha: bool,
) -> np.ndarray:
    """The `box` (orientation-corrected pixels) of the JPEG `data`, resized to `size` and
    upright: a writable (height, width, 3 or 4) uint8 array, opaque alpha when `alpha`.
    `stored` is the size Pillow probed (and checked against the pixel ceiling): libvips must
    read the same header."""
    try:
        image = pyvips.Image.jpegload_buffer(data, access="sequential", fail_on="truncated")
        if (image.width, image.height) != stored:
            raise Unreadable("libvips reads another size than the probe")
        if image.bands not in (1, 3) or image.format != "uchar":
            raise Unreadable("not an 8-bit colour or grey JPEG")  # Pillow read it otherwise
        left, top, right, bottom = unorient(box, orientation, stored)
        if (left, top, right, bottom) != (0, 0, image.width, image.height):
            image = image.crop(left, top, right - left, bottom - top)
        width, height = size if orientation < 5 else size[::-1]  # 5 to 8 swap the axes
        if (width, height) != (image.width, image.height):
            image = image.resize(
                width / image.width, vscale=height / image.height, kernel="lanczos3"
            )
        if image.bands == 1:
            image = image.bandjoin([image, image])
        if alpha:
            image = image.bandjoin(255)
        buffer = image.write_to_memory()  # the whole stream runs here
    except pyvips.Error as error:
        raise Unreadable(str(error)) from None
    pixels = np.frombuffer(buffer, dtype=np.uint8).reshape(image.height, image.width, image.bands)
    return np.ascontiguousarray(orient(pixels, orientation))


def unorient(box: Box, orientation: int, size: tuple[int, int]) -> Box:
    """`box` in the upright image, as a box of the stored (raw) image of `size`."""
    left, top, right, bottom = box
    w, h = size
    return {
        1: (left, top, right, bottom),
        2: (w - right, top, w - left, bottom),
        3: (w - right, h - bottom, w - left, h - top),
        4: (left, h - bottom, right, h - top),
        5: (top, left, bottom, right),
        6: (top, h - right, bottom, h - left),
        7: (w - bottom, h - right, w - top, h - left),
        8: (w - bottom, left, w - top, right),
    }[orientation]


def orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """The stored pixels turned upright, as Pillow's ImageOps.exif_transpose does (a view)."""
    return {
        1: lambda p: p,
        2: lambda p: p[:, ::-1],
        3: lambda p: p[::-1, ::-1],
        4: lambda p: p[::-1],
        5: lambda p: p.swapaxes(0, 1),
        6: lambda p: np.rot90(p, -1),
        7: lambda p: p[::-1, ::-1].swapaxes(0, 1),
        8: lambda p: np.rot90(p, 1),
    }[orientation](pixels)
