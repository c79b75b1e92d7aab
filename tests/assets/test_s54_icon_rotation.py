"""Spec A 4, asset rules 4 and 5 for an icon from an EXIF-rotated JPEG: "auto-orient (crop
coordinates are in the orientation-corrected pixels)", then "refuse ... brand_icon_source_small
below 1024 px (never upscaled)".

The icon's source size was the crop times a draft scale inferred as stored width over decoded
width, but the decoded image is upright and the stored size is not: for orientations 5 to 8 the
"scale" was height over width. A 1023 px crop of a landscape-stored quarter-turned photo was
taken and upscaled; a 1024 px crop of a portrait-stored one was refused. The draft scale is now
the one the decoder was asked for, and the crop is measured in upright source pixels."""

# ruff: noqa: F811 (the fixture imported is redefined as a test argument)

from __future__ import annotations

import io

import pytest
from PIL import Image

from gymctl.assets.pipeline import normalize
from gymctl.assets.types import AssetRefused, Slot, Transform
from tests.assets import corpus
from tests.assets.test_pipeline import decoded, near  # noqa: F401 (fixture)

GREY, RED, BLUE = (128, 128, 128), (220, 30, 30), (30, 60, 220)
MARKER = (100, 60, 300, 260)  # red, in upright pixels
FAR_MARKER = 200  # blue, this far in from the upright image's bottom-right corner
ORIENTATIONS = [1, 3, 5, 6, 7, 8]
STORED = [pytest.param((2000, 1500), id="landscape"), pytest.param((1500, 2000), id="portrait")]


def upright(size: tuple[int, int]) -> Image.Image:
    """What the owner sees (and crops in): grey, a red marker at MARKER, a blue one near the
    far corner."""
    image = Image.new("RGB", size, GREY)
    image.paste(RED, MARKER)
    w, h = size
    image.paste(BLUE, (w - FAR_MARKER - 200, h - FAR_MARKER - 200, w - FAR_MARKER, h - FAR_MARKER))
    return image


def rotated_jpeg(stored: tuple[int, int], orientation: int) -> tuple[bytes, tuple[int, int]]:
    """A JPEG stored at `stored` whose orientation shows upright(); and the upright size."""
    size = stored if orientation < 5 else (stored[1], stored[0])
    return corpus.exif_jpeg(orientation, upright(size)), size


def icon(data: bytes, crop: dict | None = None):
    transform = Transform.from_dict({"crop": crop} if crop else {}, Slot.icon)
    return normalize(data, Slot.icon, transform)


def refusal(data: bytes, crop: dict | None = None) -> AssetRefused:
    with pytest.raises(AssetRefused) as refused:
        icon(data, crop)
    return refused.value


def pixel(asset, xy: tuple[int, int]) -> tuple[int, ...]:
    with Image.open(io.BytesIO(asset.png)) as image:
        return image.convert("RGB").getpixel(xy)


# -- the 1024 px limit, in orientation-corrected pixels --------------------------------------


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_a_crop_under_1024_is_refused_whatever_the_orientation(stored, orientation) -> None:
    data, _ = rotated_jpeg(stored, orientation)
    refused = refusal(data, {"x": 0, "y": 0, "width": 1023, "height": 1023})
    assert refused.code == "brand_icon_source_small"
    assert (refused.width, refused.height) == stored  # the file as stored, measured


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_a_crop_of_1024_is_taken_at_its_own_size_from_the_upright_image(
    stored, orientation
) -> None:
    data, _ = rotated_jpeg(stored, orientation)
    asset = icon(data, {"x": 0, "y": 0, "width": 1024, "height": 1024})
    assert (asset.width, asset.height) == (1024, 1024)
    assert asset.report["downscaled"] is False
    assert asset.report["cropped"] is True
    # The crop is of the upright image: its red marker where the owner saw it, grey around.
    assert near(pixel(asset, (200, 160)), RED, 24), pixel(asset, (200, 160))
    for xy in ((1023 - 200, 160), (200, 1023 - 160), (1023 - 200, 1023 - 160), (600, 600)):
        assert near(pixel(asset, xy), GREY, 24), (xy, pixel(asset, xy))


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_a_larger_crop_at_the_far_corner_is_downscaled_to_1024(stored, orientation) -> None:
    data, (w, h) = rotated_jpeg(stored, orientation)
    side = 1100
    asset = icon(data, {"x": w - side, "y": h - side, "width": side, "height": side})
    assert (asset.width, asset.height) == (1024, 1024)
    assert asset.report["downscaled"] is True
    # The blue marker spans 700..900 of the 1100 px crop: about 652..838 of the icon.
    assert near(pixel(asset, (745, 745)), BLUE, 24), pixel(asset, (745, 745))
    assert near(pixel(asset, (200, 200)), GREY, 24), pixel(asset, (200, 200))


def test_the_reported_cases() -> None:
    """The two cases as found: stored 2000x1500 and 1500x3000, orientation 6."""
    small, _ = rotated_jpeg((2000, 1500), 6)  # upright 1500x2000
    assert refusal(small, {"x": 0, "y": 0, "width": 1000, "height": 1000}).code == (
        "brand_icon_source_small"
    )
    large, _ = rotated_jpeg((1500, 3000), 6)  # upright 3000x1500
    asset = icon(large, {"x": 0, "y": 0, "width": 1100, "height": 1100})
    assert (asset.width, asset.height) == (1024, 1024)


# -- the draft decode (an uncropped upright JPEG of 2048 px or more) -------------------------


@pytest.mark.parametrize(
    ("stored", "drafted"),
    [((2050, 2049), (1025, 1025)), ((4096, 4096), (1024, 1024)), ((3000, 2999), (1500, 1500))],
)
def test_a_large_upright_jpeg_is_drafted_and_taken_whole(stored, drafted, decoded) -> None:
    data, _ = rotated_jpeg(stored, 1)
    asset = icon(data)
    assert set(decoded) == {drafted}  # decoded at a fraction of its size, never at full size
    assert (asset.width, asset.height) == (1024, 1024)
    assert asset.report["downscaled"] is True
    assert asset.report["cropped"] is False
    # The whole image: the red marker near the top-left corner, the blue near the far one.
    scale = 1024 / stored[0]
    red = (round(200 * scale), round(160 * scale))
    blue = (1023 - round((FAR_MARKER + 100) * scale), 1023 - round((FAR_MARKER + 100) * scale))
    assert near(pixel(asset, red), RED, 24), pixel(asset, red)
    assert near(pixel(asset, blue), BLUE, 24), pixel(asset, blue)
    assert near(pixel(asset, (512, 512)), GREY, 24), pixel(asset, (512, 512))


@pytest.mark.parametrize(
    ("stored", "code"),
    [
        ((2049, 2051), None),  # 2 px off square: taken (drafted 1025x1026)
        ((2049, 2052), "brand_icon_dimensions"),  # 3 px off: refused (drafted 1025x1026 too)
        ((2052, 2049), "brand_icon_dimensions"),
        ((2051, 2049), None),
    ],
)
def test_a_drafted_source_is_measured_in_its_own_pixels(stored, code, decoded) -> None:
    """The draft's size is the source's over the scale rounded up: the square check reads the
    source's own size, not the decoded size times the scale."""
    data, _ = rotated_jpeg(stored, 1)
    if code is None:
        asset = icon(data)
        assert (asset.width, asset.height) == (1024, 1024)
    else:
        assert refusal(data).code == code
    assert decoded[0] == ((stored[0] + 1) // 2, (stored[1] + 1) // 2)


@pytest.mark.parametrize("orientation", [6, 8])
def test_a_large_rotated_jpeg_is_decoded_whole_and_kept_square(orientation, decoded) -> None:
    data, _ = rotated_jpeg((2052, 2049), orientation)  # 3 px off square
    assert refusal(data).code == "brand_icon_dimensions"
    data, _ = rotated_jpeg((2051, 2049), orientation)
    asset = icon(data)
    assert (asset.width, asset.height) == (1024, 1024)
    assert (2051, 2049) in decoded  # no draft for a turned image: decoded as stored
