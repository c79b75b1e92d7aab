"""Colours as `#RRGGBB` text, and OKLCH: the perceptual space the derivation works in.

OKLab (Björn Ottosson, 2020; CSS Color 4's `oklab()`/`oklch()`) keeps lightness and hue apart, so
tinting a surface or darkening a text colour keeps the brand's hue, which HSL does not. Colours
outside sRGB are brought back by lowering chroma at constant lightness and hue (CSS Color 4's
gamut mapping, without the JND shortcut), then clipped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

HEX = re.compile(r"^#[0-9A-Fa-f]{6}$")
GAMUT_EPSILON = 1e-6


def is_hex(value: object) -> bool:
    return isinstance(value, str) and HEX.fullmatch(value) is not None


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def to_hex(channels: tuple[float, float, float]) -> str:
    """sRGB channels in 0..1 (clipped) as `#RRGGBB`."""
    return "#" + "".join(f"{round(min(1.0, max(0.0, c)) * 255):02X}" for c in channels)


def _linear(channel: float) -> float:
    return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4


def _gamma(channel: float) -> float:
    if channel <= 0.0031308:
        return 12.92 * channel
    return 1.055 * math.copysign(abs(channel) ** (1 / 2.4), channel) - 0.055


@dataclass(frozen=True)
class Oklch:
    l: float  # noqa: E741 (the space's own name for lightness, 0..1)
    c: float
    h: float  # degrees


def oklch(hex_colour: str) -> Oklch:
    r, g, b = (_linear(v / 255) for v in rgb(hex_colour))
    lms = (
        0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b,
        0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b,
        0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b,
    )
    lc, mc, sc = (math.copysign(abs(v) ** (1 / 3), v) for v in lms)
    lightness = 0.2104542553 * lc + 0.7936177850 * mc - 0.0040720468 * sc
    a = 1.9779984951 * lc - 2.4285922050 * mc + 0.4505937099 * sc
    b_ = 0.0259040371 * lc + 0.7827717662 * mc - 0.8086757660 * sc
    chroma = math.hypot(a, b_)
    hue = math.degrees(math.atan2(b_, a)) % 360 if chroma > GAMUT_EPSILON else 0.0
    return Oklch(lightness, chroma, hue)


def _linear_rgb(colour: Oklch) -> tuple[float, float, float]:
    a = colour.c * math.cos(math.radians(colour.h))
    b = colour.c * math.sin(math.radians(colour.h))
    lc = colour.l + 0.3963377774 * a + 0.2158037573 * b
    mc = colour.l - 0.1055613458 * a - 0.0638541728 * b
    sc = colour.l - 0.0894841775 * a - 1.2914855480 * b
    l_, m_, s_ = lc**3, mc**3, sc**3
    return (
        4.0767416621 * l_ - 3.3077115913 * m_ + 0.2309699292 * s_,
        -1.2684380046 * l_ + 2.6097574011 * m_ - 0.3413193965 * s_,
        -0.0041960863 * l_ - 0.7034186147 * m_ + 1.7076147010 * s_,
    )


def _in_gamut(channels: tuple[float, float, float]) -> bool:
    return all(-GAMUT_EPSILON <= c <= 1 + GAMUT_EPSILON for c in channels)


def from_oklch(lightness: float, chroma: float, hue: float) -> str:
    """The sRGB colour nearest to the given OKLCH one: chroma lowered until it fits."""
    lightness = min(1.0, max(0.0, lightness))
    chroma = max(0.0, chroma)
    colour = Oklch(lightness, chroma, hue)
    if not _in_gamut(_linear_rgb(colour)):
        low, high = 0.0, chroma
        for _ in range(24):
            middle = (low + high) / 2
            if _in_gamut(_linear_rgb(Oklch(lightness, middle, hue))):
                low = middle
            else:
                high = middle
        colour = Oklch(lightness, low, hue)
    return to_hex(tuple(_gamma(c) for c in _linear_rgb(colour)))  # type: ignore[arg-type]
