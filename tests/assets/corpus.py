"""The asset-pipeline test corpus, generated: small deterministic functions returning file bytes.

Nothing here is read from disk. Pixel-exact expectations (marker boxes, colours, coverages) are
module constants so the tests can check where things end up.
"""

from __future__ import annotations

import io
import struct
import zlib
from functools import cache

import numpy as np
from PIL import Image

WHITE = (255, 255, 255)
RED = (200, 30, 30)


# -- encoders ---------------------------------------------------------------------------------


def png(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", **options)
    return buffer.getvalue()


def jpeg(image: Image.Image, quality: int = 92, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality, **options)
    return buffer.getvalue()


def webp(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "WEBP", **options)
    return buffer.getvalue()


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))


def _png_file(width: int, height: int, colour_type: int, idat: bytes, depth: int = 8) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )


# -- plain slot images ------------------------------------------------------------------------


def logo_image(width: int = 300, height: int = 200) -> Image.Image:
    """RGBA: transparent around an opaque red block with a blue bar (a real transparent logo)."""
    image = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    image.paste((*RED, 255), (width // 5, height // 5, width * 4 // 5, height * 4 // 5))
    image.paste((20, 40, 220, 255), (width // 4, height // 2, width * 3 // 4, height * 3 // 5))
    return image


def transparent_logo_png(width: int = 300, height: int = 200) -> bytes:
    return png(logo_image(width, height))


def opaque_logo_png(width: int = 300, height: int = 200) -> bytes:
    return png(logo_image(width, height).convert("RGB"))


def opaque_rgba_png(width: int = 300, height: int = 200) -> bytes:
    """An RGBA PNG whose alpha is 255 everywhere: has an alpha channel, has no transparency."""
    image = logo_image(width, height)
    image.putalpha(255)
    return png(image)


def fully_transparent_png(width: int = 300, height: int = 200) -> bytes:
    return png(Image.new("RGBA", (width, height), (10, 20, 30, 0)))


def flat_rgb_png(width: int = 300, height: int = 200, colour=WHITE) -> bytes:
    return png(Image.new("RGB", (width, height), colour))


def transparent_logo_webp(width: int = 300, height: int = 200) -> bytes:
    return webp(logo_image(width, height), lossless=True)


def rgb_colour_key_png(width: int = 300, height: int = 200) -> bytes:
    """RGB PNG with a tRNS colour key (white is transparent): transparency without alpha."""
    image = Image.new("RGB", (width, height), WHITE)
    image.paste(RED, (width // 4, height // 4, width * 3 // 4, height * 3 // 4))
    return png(image, transparency=WHITE)


def palette_trns_png(width: int = 300, height: int = 200) -> bytes:
    """Palette PNG, index 0 transparent (tRNS), indexes 1 and 2 opaque red and blue."""
    pixels = np.zeros((height, width), np.uint8)
    pixels[height // 4 : height * 3 // 4, width // 4 : width // 2] = 1
    pixels[height // 4 : height * 3 // 4, width // 2 : width * 3 // 4] = 2
    image = Image.fromarray(pixels, "P")
    image.putpalette([0, 0, 0, *RED, 20, 40, 220] + [0] * (256 - 3) * 3)
    return png(image, transparency=0)


def grey_alpha_png(width: int = 300, height: int = 200) -> bytes:
    """LA PNG: a grey ramp with an alpha ramp, fully transparent on the left edge."""
    grey = np.tile(np.linspace(0, 255, width, dtype=np.float64), (height, 1)).astype(np.uint8)
    alpha = np.tile(np.linspace(0, 255, height, dtype=np.float64), (width, 1)).T.astype(np.uint8)
    alpha[:, : width // 10] = 0
    return png(Image.fromarray(np.dstack([grey, alpha]), "LA"))


# -- icons ------------------------------------------------------------------------------------

ICON_QUADRANTS = ((230, 40, 40), (40, 160, 60), (30, 60, 200), (240, 200, 30))


def icon_image(width: int = 1024, height: int = 1024) -> Image.Image:
    """RGB, four flat quadrants (top-left, top-right, bottom-left, bottom-right)."""
    image = Image.new("RGB", (width, height))
    w2, h2 = width // 2, height // 2
    for (x, y), colour in zip(((0, 0), (w2, 0), (0, h2), (w2, h2)), ICON_QUADRANTS, strict=True):
        image.paste(colour, (x, y, x + (width - w2 if x else w2), y + (height - h2 if y else h2)))
    return image


def icon_png(width: int = 1024, height: int = 1024) -> bytes:
    return png(icon_image(width, height))


def icon_jpeg(width: int = 1024, height: int = 1024) -> bytes:
    return jpeg(icon_image(width, height), quality=95)


ICON_HOLE = (256, 256, 768, 768)  # fully transparent square in the middle
ICON_HALF = (0, 0, 128, 1024)  # left band: white at alpha 128
ICON_FILL = (0x11, 0x22, 0x33)


def icon_with_transparency_png() -> bytes:
    image = icon_image().convert("RGBA")
    image.paste((255, 255, 255, 0), ICON_HOLE)
    image.paste((255, 255, 255, 128), ICON_HALF)
    return png(image)


def cmyk_jpeg(size: int = 1024) -> bytes:
    image = Image.new("CMYK", (size, size), (0, 0, 0, 0))
    half = size // 2
    image.paste((0, 255, 255, 0), (0, 0, half, half))  # red
    image.paste((255, 0, 255, 0), (half, 0, size, half))  # green
    image.paste((255, 255, 0, 0), (0, half, half, size))  # blue
    image.paste((0, 0, 0, 128), (half, half, size, size))  # grey
    return jpeg(image, quality=95)


def grey_jpeg(size: int = 1024) -> bytes:
    image = Image.new("L", (size, size), 200)
    image.paste(40, (0, 0, size // 2, size))
    return jpeg(image, quality=95)


GREY16_LEFT, GREY16_RIGHT = 0x8000, 0x4000  # 8-bit: about 128 and 64


def grey16_png(size: int = 1100) -> bytes:
    """16-bit greyscale PNG: left half 0x8000, right half 0x4000 (nothing near white)."""
    pixels = np.full((size, size), GREY16_RIGHT, np.uint16)
    pixels[:, : size // 2] = GREY16_LEFT
    data = png(Image.fromarray(pixels))
    assert data[24:26] == b"\x10\x00", "expected a 16-bit greyscale PNG"  # depth 16, colour 0
    return data


def grey16_logo_png(width: int = 300, height: int = 200) -> bytes:
    """16-bit greyscale: white (0xFFFF) around a 0x8000 block and a 0x4000 bar."""
    pixels = np.full((height, width), 0xFFFF, np.uint16)
    pixels[height // 4 : height * 3 // 4, width // 4 : width // 2] = GREY16_LEFT
    pixels[height // 4 : height * 3 // 4, width // 2 : width * 3 // 4] = GREY16_RIGHT
    return png(Image.fromarray(pixels))


# -- EXIF orientation -------------------------------------------------------------------------

EXIF_SIZE = (240, 160)  # orientation-corrected (displayed) width, height
EXIF_MARKER = (30, 24, 80, 64)  # marker box in corrected pixels, in the top-left region
# Pillow's exif_transpose method per orientation; the stored image is its inverse applied.
UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_INVERSE = {
    **UPRIGHT,
    6: Image.Transpose.ROTATE_90,
    8: Image.Transpose.ROTATE_270,
}


def exif_display_image() -> Image.Image:
    """What the viewer must see: white, with a red marker near (not at) the top-left corner."""
    image = Image.new("RGB", EXIF_SIZE, WHITE)
    image.paste(RED, EXIF_MARKER)
    return image


def _stored(orientation: int, image: Image.Image) -> Image.Image:
    return image if orientation == 1 else image.transpose(_INVERSE[orientation])


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def exif_jpeg(orientation: int, image: Image.Image | None = None) -> bytes:
    """A JPEG stored so that applying `orientation` shows `image` (by default the non-square
    exif_display_image())."""
    upright = exif_display_image() if image is None else image
    return jpeg(_stored(orientation, upright), quality=95, exif=_exif(orientation))


def exif_png(orientation: int) -> bytes:
    """A transparent PNG with an eXIf orientation: corrected, a green marker at EXIF_MARKER."""
    image = Image.new("RGBA", EXIF_SIZE, (0, 0, 0, 0))
    image.paste((30, 160, 60, 255), EXIF_MARKER)
    return png(_stored(orientation, image), exif=_exif(orientation))


# -- refused formats --------------------------------------------------------------------------


def animated_webp() -> bytes:
    frames = [logo_image(), logo_image().transpose(Image.Transpose.ROTATE_180)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "WEBP", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buffer.getvalue()


def apng() -> bytes:
    frames = [logo_image(), logo_image().transpose(Image.Transpose.ROTATE_180)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "PNG", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buffer.getvalue()


def gif() -> bytes:
    buffer = io.BytesIO()
    logo_image().save(buffer, "GIF")
    return buffer.getvalue()


def bmp() -> bytes:
    buffer = io.BytesIO()
    logo_image().save(buffer, "BMP")
    return buffer.getvalue()


def tiff() -> bytes:
    buffer = io.BytesIO()
    logo_image().save(buffer, "TIFF")
    return buffer.getvalue()


def svg() -> bytes:
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<svg xmlns="http://www.w3.org/2000/svg" width="1024" height="1024" viewBox="0 0 1 1">'
        b'<rect width="1" height="1" fill="#c81e1e"/></svg>\n'
    )


def bare_svg() -> bytes:
    return b'  <svg xmlns="http://www.w3.org/2000/svg" width="300" height="200"></svg>'


def _ftyp(brand: bytes, compatible: bytes) -> bytes:
    body = b"ftyp" + brand + b"\x00\x00\x00\x00" + compatible
    box = struct.pack(">I", 4 + len(body)) + body
    meta = struct.pack(">I", 8 + 64) + b"meta" + bytes(64)
    return box + meta


def heic_header() -> bytes:
    return _ftyp(b"heic", b"mif1heicmiaf")


def avif_header() -> bytes:
    return _ftyp(b"avif", b"avifmif1miaf")


def real_avif() -> bytes:
    """A decodable AVIF (Pillow 13 writes and, if asked without a format list, opens it)."""
    buffer = io.BytesIO()
    logo_image().save(buffer, "AVIF")
    return buffer.getvalue()


# -- broken files -----------------------------------------------------------------------------


def truncated(data: bytes, fraction: float = 0.6) -> bytes:
    return data[: int(len(data) * fraction)]


@cache
def noisy_logo_png(width: int = 320, height: int = 240) -> bytes:
    """A transparent logo with a noisy opaque middle: large enough IDAT to cut in the middle."""
    rng = np.random.default_rng(7)
    pixels = np.zeros((height, width, 4), np.uint8)
    y0, y1, x0, x1 = height // 6, height * 5 // 6, width // 6, width * 5 // 6
    pixels[y0:y1, x0:x1, :3] = rng.integers(0, 256, (y1 - y0, x1 - x0, 3), dtype=np.uint8)
    pixels[y0:y1, x0:x1, 3] = 255
    return png(Image.fromarray(pixels, "RGBA"))


@cache
def noisy_jpeg(width: int = 320, height: int = 240, margin: int = 40, quality: int = 90) -> bytes:
    """White around a noisy middle: removeBackground turns it into a valid logo."""
    rng = np.random.default_rng(11)
    pixels = np.full((height, width, 3), 255, np.uint8)
    pixels[margin:-margin, margin:-margin] = rng.integers(
        0, 200, (height - 2 * margin, width - 2 * margin, 3), dtype=np.uint8
    )
    return jpeg(Image.fromarray(pixels, "RGB"), quality=quality)


def png_bomb(width: int = 20000, height: int = 20000) -> bytes:
    """A PNG header claiming width x height RGBA over a tiny (valid but short) body."""
    return _png_file(width, height, 6, zlib.compress(bytes(4096), 9))


def jpeg_bomb(width: int = 8000, height: int = 6000) -> bytes:
    """A small real JPEG whose SOF0 claims width x height."""
    data = bytearray(jpeg(Image.new("RGB", (64, 64), RED)))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


@cache
def flat_la_png(width: int, height: int) -> bytes:
    """A width x height grey+alpha PNG, transparent with one opaque grey block, built row by row
    (Up filter: all rows but three are zero bytes), so 40 MP costs ~0.1 s and a few hundred KB."""
    y0, y1, x0, x1 = height // 4, height * 3 // 4, width // 4, width * 3 // 4
    blank = bytes(width * 2)
    block_row = bytearray(blank)
    block_row[x0 * 2 : x1 * 2] = b"\x80\xff" * (x1 - x0)
    leave_row = bytearray(blank)
    leave_row[x0 * 2 : x1 * 2] = b"\x80\x01" * (x1 - x0)  # Up filter: -0x80, -0xff mod 256
    compressor = zlib.compressobj(1)
    parts = [compressor.compress(b"\x00" + blank)]
    zero_row = b"\x02" + blank
    for y in range(1, height):
        if y == y0:
            parts.append(compressor.compress(b"\x02" + bytes(block_row)))
        elif y == y1:
            parts.append(compressor.compress(b"\x02" + bytes(leave_row)))
        else:
            parts.append(compressor.compress(zero_row))
    parts.append(compressor.flush())
    return _png_file(width, height, 4, b"".join(parts))


# -- background removal -----------------------------------------------------------------------


def uneven_corners_png(width: int = 300, height: int = 200) -> bytes:
    """Opaque, corners of four different colours."""
    image = Image.new("RGB", (width, height), WHITE)
    w2, h2 = width // 2, height // 2
    image.paste((250, 250, 250), (0, 0, w2, h2))
    image.paste((20, 20, 20), (w2, 0, width, h2))
    image.paste((20, 200, 20), (0, h2, w2, height))
    image.paste(RED, (w2 // 2, h2 // 2, width - w2 // 2, height - h2 // 2))
    return png(image)


def transparent_corners_png(width: int = 300, height: int = 200) -> bytes:
    """Transparent corners already, with a semi-transparent band inside the opaque logo."""
    image = logo_image(width, height)
    image.paste((240, 240, 240, 90), (width // 10, height // 10, width // 5, height * 9 // 10))
    return png(image)


AA_SIZE = (256, 192)
AA_BACKGROUND = (236, 240, 232)
AA_FOREGROUND = (20, 60, 0)  # one channel at 0: the un-mixed colour is unique (no ambiguity)
AA_FAR = (30, 40, 210)  # a second object far from the background
AA_SOLID = (96, 48, 160, 144)  # x0, y0, x1, y1 of the solid foreground block
AA_COVERAGES = (0.25, 0.5, 0.75)  # of the columns left of the block, outermost first
AA_FAR_BOX = (200, 24, 232, 168)


def antialiased_logo_png() -> bytes:
    """A dark block on a known light background; left of it three one-pixel columns blended at
    AA_COVERAGES (outermost 0.25, then 0.5, then 0.75), the right edge blended at 0.5."""
    bg = np.array(AA_BACKGROUND, np.float64)
    fg = np.array(AA_FOREGROUND, np.float64)
    pixels = np.empty((AA_SIZE[1], AA_SIZE[0], 3), np.float64)
    pixels[:] = bg
    x0, y0, x1, y1 = AA_SOLID
    pixels[y0:y1, x0:x1] = fg
    for offset, coverage in enumerate(reversed(AA_COVERAGES), start=1):
        pixels[y0:y1, x0 - offset] = coverage * fg + (1 - coverage) * bg
    pixels[y0:y1, x1] = 0.5 * fg + 0.5 * bg
    fx0, fy0, fx1, fy1 = AA_FAR_BOX
    pixels[fy0:fy1, fx0:fx1] = AA_FAR
    return png(Image.fromarray(np.rint(pixels).astype(np.uint8), "RGB"))


def flat_jpeg(width: int = 300, height: int = 200, colour=WHITE) -> bytes:
    return jpeg(Image.new("RGB", (width, height), colour))


def large_transparent_png(width: int = 5000, height: int = 1000) -> bytes:
    image = Image.new("LA", (width, height), (0, 0))
    image.paste((128, 255), (width // 4, height // 4, width * 3 // 4, height * 3 // 4))
    return png(image, compress_level=1)
