"""Background removal (spec A 4, asset rule 6): the colour shared by the four corners, decided on a
small sample, is cleared on the full-resolution output in slices, and edge pixels are un-mixed.

An anti-aliased edge pixel is a blend c = a*f + (1-a)*bg of the foreground f and the known
background bg. f is taken from the nearest solid foreground pixel (within a few pixels), then
a = <c-bg, f-bg> / |f-bg|^2; with no solid neighbour, f is the colour-to-alpha extreme along
c-bg. Near-background pixels become fully transparent wherever they sit (enclosed ones too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

SAMPLE_SIDE = 384  # BRAND_BACKGROUND_SAMPLE_MAX_SIDE
SLICE_PIXELS = 1_000_000
CLEAR = 24  # Chebyshev distance to the background at or below which a pixel is background
SOLID = 128  # at or above which a pixel is solid foreground (never altered)
CORNER_SPREAD = 24  # corners further apart than this are not one colour
NEIGHBOUR_RADIUS = 3


@dataclass(frozen=True)
class Analysis:
    kind: str  # flat, uneven or transparent
    colour: tuple[int, int, int] | None = None


def analyse(image: Image.Image) -> Analysis:
    """Decide on a sample no larger than SAMPLE_SIDE whether the corners share one opaque colour."""
    sample = image.copy()
    sample.thumbnail((SAMPLE_SIDE, SAMPLE_SIDE), Image.Resampling.BOX)
    pixels = np.asarray(sample.convert("RGBA"))
    h, w = pixels.shape[:2]
    patches = [pixels[:2, :2], pixels[:2, w - 2 :], pixels[h - 2 :, :2], pixels[h - 2 :, w - 2 :]]
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


def remove(image: Image.Image, colour: tuple[int, int, int]) -> Image.Image:
    """Clear `colour` from an RGBA image (full resolution, slice by slice) and un-mix its edges."""
    pixels = np.array(image.convert("RGBA"))  # one writable copy
    h, w = pixels.shape[:2]
    flat = pixels.reshape(-1, 4)
    bg = np.array(colour, dtype=np.int16)
    luts = [np.abs(np.arange(256, dtype=np.int16) - c).astype(np.uint8) for c in colour]
    distance = np.empty(h * w, dtype=np.uint8)
    rows = max(1, SLICE_PIXELS // w)
    for top in range(0, h, rows):
        part = flat[top * w : (top + rows) * w]
        d = np.maximum(np.maximum(luts[0][part[:, 0]], luts[1][part[:, 1]]), luts[2][part[:, 2]])
        distance[top * w : top * w + len(part)] = d
        part[d <= CLEAR, 3] = 0
    edge = np.flatnonzero((distance > CLEAR) & (distance < SOLID))
    if edge.size:
        _unmix(flat, distance, edge, bg, w, h)
    return Image.fromarray(pixels, "RGBA")


def _unmix(
    flat: np.ndarray, distance: np.ndarray, edge: np.ndarray, bg: np.ndarray, w: int, h: int
) -> None:
    c = flat[edge, :3].astype(np.float32)
    fg = np.full_like(c, np.nan)
    ys, xs = np.divmod(edge, w)
    for radius in range(1, NEIGHBOUR_RADIUS + 1):
        missing = np.isnan(fg[:, 0])
        if not missing.any():
            break
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                if max(abs(dx), abs(dy)) != radius:
                    continue
                ny, nx = ys + dy, xs + dx
                ok = missing & (ny >= 0) & (ny < h) & (nx >= 0) & (nx < w)
                sel = np.flatnonzero(ok)
                neighbour = ny[sel] * w + nx[sel]
                solid = distance[neighbour] >= SOLID
                take = sel[solid]
                fg[take] = flat[neighbour[solid], :3]
                missing[take] = False
    bgf = bg.astype(np.float32)
    delta = c - bgf
    unknown = np.isnan(fg[:, 0])
    if unknown.any():
        # Colour-to-alpha: the most transparent reading, f at the extreme along c - bg.
        room = np.where(delta[unknown] > 0, 255 - bgf, bgf)
        ratio = np.abs(delta[unknown]) / np.maximum(room, 1)
        a = np.clip(ratio.max(axis=1, keepdims=True), 1e-3, 1)
        fg[unknown] = np.clip(bgf + delta[unknown] / a, 0, 255)
    direction = fg - bgf
    alpha = (delta * direction).sum(axis=1) / np.maximum((direction**2).sum(axis=1), 1)
    alpha = np.clip(alpha, 0, 1)
    flat[edge, :3] = np.clip(np.rint(fg), 0, 255).astype(np.uint8)
    flat[edge, 3] = np.rint(flat[edge, 3] * alpha).astype(np.uint8)
