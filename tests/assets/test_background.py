"""The corner decision (spec A 4, asset rule 6: "decided on a 384 px sample") reads only the
sample's corner pixels, reduced from the output's corner blocks: it must decide exactly as the
whole sample would."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from gymctl.assets import background


def whole_sample_analysis(image: Image.Image) -> background.Analysis:
    """The rule read literally: reduce the whole output to the sample, average its corners."""
    factor = -(-max(image.size) // background.SAMPLE_SIDE)
    sample = np.asarray((image.reduce(factor) if factor > 1 else image).convert("RGBA"))
    h, w = sample.shape[:2]
    patches = [sample[:2, :2], sample[:2, w - 2 :], sample[h - 2 :, :2], sample[h - 2 :, w - 2 :]]
    corners = np.array([p.reshape(-1, 4).mean(axis=0) for p in patches])
    if (corners[:, 3] < 1).all():
        return background.Analysis("transparent")
    if (corners[:, 3] < 254).any():
        return background.Analysis("uneven")
    if (corners[:, :3].max(axis=0) - corners[:, :3].min(axis=0)).max() > background.CORNER_SPREAD:
        return background.Analysis("uneven")
    r, g, b = (round(float(v)) for v in corners[:, :3].mean(axis=0))
    return background.Analysis("flat", (r, g, b))


@pytest.mark.parametrize(
    "size",
    [(4096, 2731), (2731, 4096), (1000, 3), (3, 769), (769, 770), (385, 97), (384, 1), (64, 64)],
)
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_the_corners_decide_as_the_whole_sample(size: tuple[int, int], mode: str) -> None:
    rng = np.random.default_rng(size[0] * 7 + size[1])
    w, h = size
    pixels = np.empty((h, w, len(mode)), np.uint8)
    pixels[..., :3] = rng.integers(220, 241, (h, w, 3), dtype=np.uint8)  # a noisy flat colour
    if mode == "RGBA":
        pixels[..., 3] = 255
        holes = rng.random((h, w)) < 0.003  # a few see-through pixels: premultiplied averages
        pixels[..., 3][holes] = rng.integers(0, 255, int(holes.sum()), dtype=np.uint8)
    image = Image.fromarray(pixels, mode)
    assert background.analyse(image) == whole_sample_analysis(image)
    # And with every corner different: the same verdict, the same colour when flat.
    for y, x in ((0, 0), (0, w - 1), (h - 1, 0), (h - 1, w - 1)):
        pixels[max(0, y - 40) : y + 40, max(0, x - 40) : x + 40, :3] = rng.integers(0, 256, 3)
        image = Image.fromarray(pixels, mode)
        assert background.analyse(image) == whole_sample_analysis(image)
