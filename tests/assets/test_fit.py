"""The libvips path for JPEG logos (gymctl/assets/fit.py) against Pillow's: the same upright
pixels, the same crop in corrected pixels, the same Lanczos fit (within a level or two of
rounding), and a damaged file refused as damaged."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from gymctl.assets import fit
from tests.assets import corpus


def photo(width: int, height: int) -> Image.Image:
    """Smooth gradients, hard edges and noise: every part of a Lanczos kernel shows."""
    rng = np.random.default_rng(5)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    pixels = np.dstack([xs * 255 / width, ys * 255 / height, (xs + ys) % 97 * 2.5])
    pixels[height // 3 : height // 2, width // 4 : width // 2] = (200, 30, 30)
    pixels += rng.normal(0, 6, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def stored(orientation: int, width: int, height: int) -> tuple[int, int]:
    """The stored size of an upright `width` x `height`: 5 to 8 swap the axes."""
    return (width, height) if orientation < 5 else (height, width)


def pillow_fit(data: bytes, box: fit.Box, size: tuple[int, int]) -> np.ndarray:
    """What the Pillow path does: decode, turn upright, crop and fit in one Lanczos resize."""
    with Image.open(io.BytesIO(data)) as source:
        upright = ImageOps.exif_transpose(source)
        return np.asarray(upright.resize(size, Image.Resampling.LANCZOS, box=box))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_cropped_and_fitted_jpeg_matches_pillow_in_every_orientation(orientation: int) -> None:
    data = corpus.exif_jpeg(orientation, photo(900, 600))
    box, size = (70, 40, 830, 560), (401, 274)  # a crop in upright pixels, fitted at ~0.53
    pixels = fit.jpeg(data, stored(orientation, 900, 600), orientation, box, size, alpha=False)
    reference = pillow_fit(data, box, size).astype(np.int16)
    assert pixels.shape == (274, 401, 3)
    assert pixels.flags.writeable  # the background pass works in place
    assert pixels.flags.c_contiguous
    difference = np.abs(pixels.astype(np.int16) - reference)
    assert difference.mean() < 0.4, difference.mean()
    assert difference.max() <= 6, difference.max()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_crop_without_a_downscale_is_the_decoded_pixels(orientation: int) -> None:
    data = corpus.exif_jpeg(orientation, photo(240, 160))
    box = (10, 8, 210, 148)
    pixels = fit.jpeg(data, stored(orientation, 240, 160), orientation, box, (200, 140), alpha=True)
    with Image.open(io.BytesIO(data)) as source:
        reference = np.asarray(ImageOps.exif_transpose(source).crop(box).convert("RGBA"))
    assert np.array_equal(pixels, reference)


def test_a_greyscale_jpeg_comes_out_as_colour() -> None:
    data = corpus.grey_jpeg(256)
    pixels = fit.jpeg(data, (256, 256), 1, (0, 0, 256, 256), (256, 256), alpha=True)
    assert pixels.shape == (256, 256, 4)
    assert (pixels[..., 0] == pixels[..., 1]).all()
    assert (pixels[..., 1] == pixels[..., 2]).all()
    assert (pixels[..., 3] == 255).all()
    with Image.open(io.BytesIO(data)) as source:
        assert np.array_equal(pixels[..., 0], np.asarray(source))


@pytest.mark.parametrize("fraction", [0.3, 0.7, 0.99])
def test_a_truncated_jpeg_is_unreadable(fraction: float) -> None:
    data = corpus.truncated(corpus.noisy_jpeg(), fraction)
    with pytest.raises(fit.Unreadable):
        fit.jpeg(data, (320, 240), 1, (0, 0, 320, 240), (320, 240), alpha=True)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_box_in_upright_pixels_is_the_same_region_of_the_stored_image(orientation: int) -> None:
    rng = np.random.default_rng(orientation)
    stored = rng.integers(0, 256, (7, 11, 3), dtype=np.uint8)
    image = Image.fromarray(stored)
    upright = image if orientation == 1 else image.transpose(corpus.UPRIGHT[orientation])
    assert np.array_equal(fit.orient(stored, orientation), np.asarray(upright))
    for _ in range(50):
        left, top = int(rng.integers(0, upright.width)), int(rng.integers(0, upright.height))
        right = int(rng.integers(left + 1, upright.width + 1))
        bottom = int(rng.integers(top + 1, upright.height + 1))
        x0, y0, x1, y1 = fit.unorient((left, top, right, bottom), orientation, image.size)
        assert np.array_equal(
            fit.orient(stored[y0:y1, x0:x1], orientation),
            np.asarray(upright.crop((left, top, right, bottom))),
        )


def test_libvips_must_read_the_header_pillow_probed() -> None:
    """The 40 MP ceiling was checked on Pillow's reading of the header: a file libvips reads
    differently is not decoded."""
    with pytest.raises(fit.Unreadable):
        fit.jpeg(corpus.noisy_jpeg(), (321, 240), 1, (0, 0, 320, 240), (320, 240), alpha=True)
