"""Background removal (spec A 4, asset rule 6): the colour shared by the four corners, decided on a
small sample, is cleared on the full-resolution output in slices, and edge pixels are un-mixed.

An anti-aliased edge pixel is a blend c = a*f + (1-a)*bg of the foreground f and the known
background bg. f is taken from the pixel furthest from the background within a few pixels (the
solid foreground beside the edge), then a = <c-bg, f-bg> / |f-bg|^2. Near-background pixels
become fully transparent wherever they sit (enclosed ones too).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from PIL import Image

SAMPLE_SIDE = 384  # BRAND_BACKGROUND_SAMPLE_MAX_SIDE
SLICE_PIXELS = 1_000_000
CLEAR = 24  # Chebyshev distance to the background at or below which a pixel is background
CORNER_SPREAD = 24  # corners further apart than this are not one colour
NEIGHBOUR_RADIUS = 3

_slices = ThreadPoolExecutor(max_workers=2, thread_name_prefix="asset-background")


@dataclass(frozen=True)
class Analysis:
    kind: str  # flat, uneven or transparent
    colour: tuple[int, int, int] | None = None


def analyse(image: Image.Image) -> Analysis:
    """Decide on a sample no larger than SAMPLE_SIDE whether the corners share one opaque colour."""
    factor = -(-max(image.size) // SAMPLE_SIDE)  # ceil: the sample's side is at most 384
    patches = [
        np.asarray(_corner(image, factor, right, bottom)) for bottom in (0, 1) for right in (0, 1)
    ]
    corners = np.array([p.reshape(-1, 4).mean(axis=0) for p in patches])
    alphas = corners[:, 3]
    if (alphas < 1).all():
        return Analysis("transparent")
    if (alphas < 254).any():
        return Analysis("uneven")
    spread = corners[:, :3].max(axis=0) - corners[:, :3].min(axis=0)
    if spread.max() > CORNER_SPREAD:
        return Analysis("uneven")
    r, g, b = (round(float(v)) for v in corners[:, :3].mean(axis=0))
    return Analysis("flat", (r, g, b))


def _corner(image: Image.Image, factor: int, right: int, bottom: int) -> Image.Image:
    """The 2x2 pixels at one corner of the sample (`image` reduced by `factor`, a box average),
    reduced from that corner's blocks alone: the same pixels, without reducing the rest."""
    box = []
    for side, far in ((image.width, right), (image.height, bottom)):
        samples = -(-side // factor)
        first = max(samples - 2, 0) if far else 0
        box.append((first * factor, min((first + 2) * factor, side)))
    (left, right_edge), (top, bottom_edge) = box
    patch = image.crop((left, top, right_edge, bottom_edge))
    return (patch.reduce(factor) if factor > 1 else patch).convert("RGBA")


def remove(pixels: np.ndarray, colour: tuple[int, int, int]) -> None:
    """Clear `colour` from RGBA `pixels` (full resolution, slice by slice, in place) and un-mix
    its edges."""
    h, w = pixels.shape[:2]
    flat = pixels.reshape(-1, 4)
    words = pixels.view(np.uint32).reshape(-1)  # one pixel = one word: clearing is one store
    luts = [np.abs(np.arange(256, dtype=np.int16) - c).astype(np.uint8) for c in colour]
    distance = np.empty(h * w, dtype=np.uint8)
    rows = max(1, SLICE_PIXELS // w)

    def clear(top: int) -> None:
        span = slice(top * w, min(h, top + rows) * w)
        part = flat[span]
        d = np.maximum(np.maximum(luts[0][part[:, 0]], luts[1][part[:, 1]]), luts[2][part[:, 2]])
        distance[span] = d
        # Cleared pixels keep no colour either: zeros compress far better than hidden noise.
        words[span][d <= CLEAR] = 0

    # Slices are independent; numpy releases the GIL, so two threads share the work.
    list(_slices.map(clear, range(0, h, rows)))
    # An edge pixel is visible but has a neighbour clearly further from the background: it is
    # a blend. Solid pixels (nothing further nearby) are never altered.
    nearby = _max_filter(distance.reshape(h, w), NEIGHBOUR_RADIUS).reshape(-1)
    edge = np.flatnonzero((distance > CLEAR) & (nearby - distance > CLEAR))  # nearby >= distance
    if edge.size:
        _unmix(flat, distance, edge, np.array(colour, dtype=np.float32), w, h)


def _max_filter(values: np.ndarray, radius: int) -> np.ndarray:
    """The maximum over a (2r+1)^2 square around each pixel (separable, edges clamped)."""
    out = values.copy()
    for axis in (0, 1):
        source = out.copy()
        size = source.shape[axis]
        for shift in range(1, radius + 1):
            if shift >= size:
                break
            ahead = [slice(None)] * 2
            behind = [slice(None)] * 2
            ahead[axis], behind[axis] = slice(shift, None), slice(None, -shift)
            np.maximum(out[tuple(behind)], source[tuple(ahead)], out=out[tuple(behind)])
            np.maximum(out[tuple(ahead)], source[tuple(behind)], out=out[tuple(ahead)])
    return out


def _unmix(
    flat: np.ndarray, distance: np.ndarray, edge: np.ndarray, bg: np.ndarray, w: int, h: int
) -> None:
    """Foreground = the neighbour furthest from the background within the radius; alpha = the
    projection of (c - bg) on (f - bg)."""
    c = flat[edge, :3].astype(np.float32)
    ys, xs = np.divmod(edge, w)
    best = np.zeros(edge.size, dtype=np.int16)
    source = edge.copy()
    for dy in range(-NEIGHBOUR_RADIUS, NEIGHBOUR_RADIUS + 1):
        for dx in range(-NEIGHBOUR_RADIUS, NEIGHBOUR_RADIUS + 1):
            ny, nx = ys + dy, xs + dx
            inside = (ny >= 0) & (ny < h) & (nx >= 0) & (nx < w)
            neighbour = np.where(inside, ny * w + nx, edge)
            d = distance[neighbour].astype(np.int16)
            better = inside & (d > best)
            best[better] = d[better]
            source[better] = neighbour[better]
    fg = flat[source, :3].astype(np.float32)
    delta = c - bg
    direction = fg - bg
    alpha = (delta * direction).sum(axis=1) / np.maximum((direction**2).sum(axis=1), 1)
    alpha = np.clip(alpha, 0, 1)
    flat[edge, :3] = fg.astype(np.uint8)
    flat[edge, 3] = np.rint(flat[edge, 3] * alpha).astype(np.uint8)
