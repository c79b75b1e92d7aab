"""Hostile images through the member-app pipeline (spec A 2.11, 4 asset intake rules 1 to 9).

Every input is made here with Pillow (or by hand, chunk by chunk). Each test names the rule it
holds the pipeline to; each failed on the code it was
written against (s58).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageDraw

from gymctl.assets import pipeline
from gymctl.assets.pipeline import normalize
from gymctl.assets.types import AssetRefused, Crop, Slot, Transform

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _save(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _logo(size=(800, 400)) -> Image.Image:
    image = Image.new("RGBA", size, (0, 0, 0, 0))
    ImageDraw.Draw(image).rectangle((100, 100, size[0] - 100, size[1] - 100), fill=(10, 80, 200))
    return image


def _chunks(data: bytes) -> list[tuple[bytes, bytes, int]]:
    """(type, body, stored crc) of every chunk of a PNG."""
    out, at = [], len(PNG_SIGNATURE)
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        out.append((kind, body, crc))
        at += 12 + length
    return out


# -- rule 1: only animated files are refused as such -------------------------------------------


def test_a_multi_picture_jpeg_is_a_jpeg_not_an_animated_file() -> None:
    """Rule 1 refuses "SVG, GIF, HEIC and animated files"; a JPEG carrying a second picture in
    its MPF segment (a camera's Ultra HDR gain map, a depth map, a stereo pair) is one still
    JPEG whose primary image every decoder shows. Pillow opens it as MPO with n_frames 2, and
    the probe's `n_frames > 1` refused it as animated."""
    primary = Image.new("RGB", (800, 400), (240, 240, 240))
    ImageDraw.Draw(primary).ellipse((100, 100, 700, 300), fill=(10, 20, 200))
    gain_map = Image.new("RGB", (400, 200), (128, 128, 128))
    data = _save(primary, "MPO", save_all=True, append_images=[gain_map], quality=95)
    assert data.startswith(b"\xff\xd8\xff")  # sniffs as JPEG
    try:
        asset = normalize(data, Slot.logo, Transform(remove_background=True))
    except AssetRefused as refusal:
        pytest.fail(f"a still multi-picture JPEG was refused: {refusal.code} ({refusal})")
    assert (asset.width, asset.height) == (800, 400)
    assert asset.report["sourceFormat"] == "jpeg"


# -- rule 3 / rule 9: what is stored byte for byte must decode everywhere ------------------------


def test_a_png_whose_image_data_fails_its_crc_is_not_stored_byte_for_byte() -> None:
    """Rule 9: "A file that sniffs as accepted but fails to decode is brand_asset_source_format"
    (and the notes: "decode (or verify) before passing through"). Pillow's load() never checks
    an IDAT chunk's CRC, so a PNG whose image-data CRC is broken passed the passthrough's decode
    and was stored as-is; libpng (the phones', libvips') refuses a critical chunk with a bad
    CRC, so the stored icon/logo is undecodable where it is shown."""
    good = _save(_logo(), "PNG")
    data = bytearray(good)
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4 : idat])
    data[idat + 4 + length] ^= 0xFF  # first byte of the IDAT's CRC
    data = bytes(data)
    with pytest.raises(AssetRefused) as refused:
        normalize(data, Slot.logo, Transform())
    assert refused.value.code == "brand_asset_source_format"
    assert _chunks(good)  # the same file with its CRC whole is stored as it came
    assert normalize(good, Slot.logo, Transform()).png == good


# -- rule 5: the icon is an opaque PNG ----------------------------------------------------------


def test_an_opaque_1024_rgba_icon_is_stored_without_an_alpha_channel() -> None:
    """Spec A 2.11: the icon is an "opaque PNG". The re-encoding path drops an all-opaque alpha
    channel (_drop_opaque_alpha), but the passthrough stored a 1024x1024 RGBA PNG byte for byte,
    alpha channel and all: the app icon of the build input then has an alpha channel, which the
    App Store refuses for an icon ("can't be transparent nor contain an alpha channel"). The same
    image at 1100 px comes out RGB."""
    image = Image.new("RGBA", (1024, 1024), (20, 40, 200, 255))
    ImageDraw.Draw(image).ellipse((200, 200, 824, 824), fill=(250, 250, 250, 255))
    asset = normalize(_save(image, "PNG"), Slot.icon, Transform())
    larger = normalize(_save(image.resize((1100, 1100)), "PNG"), Slot.icon, Transform())
    assert Image.open(io.BytesIO(larger.png)).mode == "RGB"  # the re-encoded icon: no alpha
    stored = Image.open(io.BytesIO(asset.png))
    assert stored.mode == "RGB", f"the stored icon keeps an alpha channel ({stored.mode})"


# -- rule 6: downscaling keeps the source's colours --------------------------------------------


def test_a_colour_keyed_logo_downscaled_to_4096_shows_no_key_colour() -> None:
    """Rule 6 downscales to fit 4096. An RGB PNG whose transparency is a tRNS colour key
    (magenta here) was resized as RGB and only then keyed: Lanczos blends the key colour into
    the edge pixels, which no longer match the key exactly and come out opaque magenta-tinted
    fringe on a white mark. The same picture as RGBA comes out clean."""
    key = (255, 0, 255)
    image = Image.new("RGB", (6000, 2000), key)
    ImageDraw.Draw(image).ellipse((500, 300, 5500, 1700), fill=(255, 255, 255))
    asset = normalize(_save(image, "PNG", transparency=key), Slot.logo, Transform())
    assert asset.width == 4096
    pixels = np.asarray(Image.open(io.BytesIO(asset.png)).convert("RGBA")).reshape(-1, 4)
    visible = pixels[pixels[:, 3] > 0]
    # The mark is white: any visible pixel with green far below red/blue is key colour bled in.
    tinted = visible[(visible[:, 1].astype(int) + 60 < visible[:, 0]) & (visible[:, 3] > 128)]
    assert len(tinted) == 0, f"{len(tinted)} opaque key-coloured pixels, e.g. {tinted[:3].tolist()}"


# -- rule 8 reached before the work: a source that can never be 64 px wide -----------------------


def _thin_png(width: int, height: int) -> bytes:
    """A width x height greyscale PNG, all black, deflated row by row (a few tens of KB)."""
    row = b"\x00" + bytes(width)
    compressor = zlib.compressobj(9)
    block = row * 1_000_000
    parts = [compressor.compress(block) for _ in range(height // 1_000_000)]
    parts.append(compressor.compress(row * (height % 1_000_000)))
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", b"".join(parts))
        + _chunk(b"IEND", b"")
    )


def test_a_source_narrower_than_64_px_is_refused_before_it_is_resampled(monkeypatch) -> None:
    """Rule 8 refuses under 64 px (brand_asset_dimensions) and nothing is ever enlarged, so a
    1 x 40 000 000 px source (40 MP, allowed by rule 2; an 80 KB file) can only be refused.
    It was decoded, converted and Lanczos-resampled first: about 20 s of a request worker and
    one of the process's two normalization slots per 80 KB upload. Now refused from its size,
    before any of the work (no fit, no resample, no encode is reached)."""

    def reached(*_args, **_kwargs):
        pytest.fail("the thin source was fitted before its refusal")

    for step in ("_fit", "_fit_jpeg", "_resize", "_encode"):
        monkeypatch.setattr(pipeline, step, reached)
    data = _thin_png(1, 40_000_000)
    assert len(data) < 200_000
    with pytest.raises(AssetRefused) as refused:
        normalize(data, Slot.logo, Transform())
    assert refused.value.code == "brand_asset_dimensions"
    # A crop that leaves under 64 px of a large image, likewise.
    wide = _save(Image.new("RGB", (2000, 2000), (0, 0, 200)), "PNG")
    with pytest.raises(AssetRefused) as cropped:
        normalize(wide, Slot.logo, Transform(crop=Crop(0, 0, 2000, 40)))
    assert cropped.value.code == "brand_asset_dimensions"
