"""Fuzz: mutated images into every slot. The only outcomes are a valid NormalizedAsset or an
AssetRefused with one of the spec's codes (a 400), never any other exception (a 500)."""

from __future__ import annotations

import io
import struct
import zlib
from functools import cache

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

from gymctl.assets.pipeline import normalize
from gymctl.assets.types import AssetRefused, NormalizedAsset, Slot, Transform
from tests.assets import corpus
from tests.assets.test_pipeline import PIPELINE_CODES

MAX_BYTES = 4 * 1024 * 1024


@cache
def seeds() -> tuple[bytes, ...]:
    small = corpus.logo_image(96, 80)
    return (
        corpus.png(small),
        corpus.palette_trns_png(96, 80),
        corpus.grey_alpha_png(96, 80),
        corpus.rgb_colour_key_png(96, 80),
        corpus.png(corpus.logo_image(96, 80), compress_level=0),  # big IDAT, easy to hit pixels
        corpus.webp(small, lossless=True),
        corpus.webp(small, quality=70),
        corpus.jpeg(small.convert("RGB"), quality=80),
        corpus.exif_jpeg(6),
        corpus.exif_png(8),
        corpus.jpeg(Image.new("CMYK", (96, 80), (0, 200, 200, 0))),
        corpus.png(corpus.icon_image(1024, 1024)),
        corpus.jpeg(corpus.icon_image(1024, 1024), quality=50),
        corpus.apng(),
        corpus.animated_webp(),
    )


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        # Half of the edits land in the first 64 bytes, where the headers are.
        index = draw(
            st.one_of(st.integers(0, min(63, len(data) - 1)), st.integers(0, len(data) - 1))
        )
        operation = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if operation == "flip":
            data[index] ^= 1 << draw(st.integers(0, 7))
        elif operation == "set":
            data[index] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif operation == "insert":
            data[index:index] = draw(st.binary(min_size=1, max_size=16))
        elif operation == "delete":
            del data[index : index + draw(st.integers(1, 16))]
        else:
            del data[index:]
    return bytes(data)


TRANSFORMS = {
    Slot.icon: [
        {},
        {"background": "#112233"},
        {"crop": {"x": 0, "y": 0, "width": 1024, "height": 1024}},
    ],
    Slot.logo: [
        {},
        {"removeBackground": True},
        {"crop": {"x": 4, "y": 4, "width": 80, "height": 70}},
    ],
}


def check(data: bytes, slot: Slot, fields: dict) -> None:
    transform = Transform.from_dict(fields, slot)
    try:
        outcome: NormalizedAsset | AssetRefused = normalize(
            data, slot, transform, max_bytes=MAX_BYTES
        )
    except AssetRefused as refused:
        outcome = refused
    event(outcome.code if isinstance(outcome, AssetRefused) else "asset")
    if isinstance(outcome, AssetRefused):
        assert outcome.code in PIPELINE_CODES, outcome.code
        assert outcome.status == 400
        return
    asset = outcome
    assert isinstance(asset, NormalizedAsset)
    with Image.open(io.BytesIO(asset.png)) as image:
        assert image.format == "PNG"
        image.load()
        assert image.size == (asset.width, asset.height)
        alpha = np.asarray(image.convert("RGBA"))[..., 3]
    assert len(asset.png) <= MAX_BYTES
    assert asset.report["bytes"] == len(asset.png)
    if slot is Slot.icon:
        assert image.size == (1024, 1024)
        assert alpha.min() == 255
    else:
        assert min(image.size) >= 64
        assert max(image.size) <= 4096
        assert alpha.min() < 255  # (whether all-transparent is brand_asset_empty: test_pipeline)


FUZZ = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(data=mutated(), slot=st.sampled_from(list(Slot)), choice=st.integers(0, 2))
def test_mutated_images_give_an_asset_or_a_spec_code(data: bytes, slot: Slot, choice: int) -> None:
    fields = TRANSFORMS[Slot.icon if slot is Slot.icon else Slot.logo][choice]
    check(data, slot, fields)


@FUZZ
@given(
    seed=st.sampled_from(range(len(seeds()))),
    cut=st.floats(0.0, 1.0, exclude_max=True),
    slot=st.sampled_from(list(Slot)),
)
def test_truncated_images_give_an_asset_or_a_spec_code(seed: int, cut: float, slot: Slot) -> None:
    data = seeds()[seed]
    check(data[: int(len(data) * cut)], slot, {})


@st.composite
def rewritten_header(draw: st.DrawFn) -> bytes:
    """A PNG with a rewritten IHDR (valid CRC, so it gets past the chunk check) or a JPEG with
    rewritten SOF dimensions: the claimed size and layout no longer match the body."""
    side = st.one_of(st.integers(0, 2100), st.integers(0, 70000))
    width, height = draw(side), draw(side)
    if draw(st.booleans()):
        data = bytearray(draw(st.sampled_from([s for s in seeds() if s.startswith(b"\x89PNG")])))
        depth = draw(st.sampled_from([1, 2, 4, 8, 16, 3]))
        colour = draw(st.sampled_from([0, 2, 3, 4, 6, 5]))
        interlace = draw(st.sampled_from([0, 1, 2]))
        ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
        data[16:29] = ihdr
        data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
        return bytes(data)
    data = bytearray(draw(st.sampled_from([s for s in seeds() if s.startswith(b"\xff\xd8")])))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, min(height, 65535), min(width, 65535))
    return bytes(data)


@settings(FUZZ, max_examples=80)
@given(data=rewritten_header(), slot=st.sampled_from(list(Slot)))
def test_rewritten_headers_give_an_asset_or_a_spec_code(data: bytes, slot: Slot) -> None:
    check(data, slot, {})
