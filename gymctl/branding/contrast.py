"""WCAG 2 contrast, and walking a text colour until it is readable on its background.

Ratios are always measured on the `#RRGGBB` colour that is emitted, never on the unrounded one,
so a role that is said to reach 4.5:1 does reach it in the browser.
"""

from __future__ import annotations

from gymctl.branding.colour import from_oklch, oklch, rgb

TEXT = 4.5  # WCAG 2 AA for body text (spec A 2.9, 8)
NON_TEXT = 3.0  # WCAG 2 1.4.11, for the focus ring
FILLED_CONTROL = 5.5  # text on a light primary fill (spec A 8: filled controls 5.50:1)
BLACK, WHITE = "#000000", "#FFFFFF"
WALK_STEPS = 100


def _channel(value: int) -> float:
    c = value / 255
    return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4


def luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance."""
    r, g, b = (_channel(v) for v in rgb(hex_colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ratio(first: str, second: str) -> float:
    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def dark_text_wins(background: str) -> bool:
    """Is black more legible than white on `background`? (A 'light' fill or page.)"""
    return ratio(BLACK, background) >= ratio(WHITE, background)


def readable(colour: str, background: str, target: float = TEXT) -> str:
    """`colour` itself when it reaches `target` on `background`; otherwise the smallest step in
    OKLCH lightness (hue and chroma kept as far as sRGB allows) toward black on a light
    background or white on a dark one that reaches it, and at the end black or white.

    Black or white always reaches 4.58:1 on any background, so 4.5:1 is always met; a higher
    target on a mid-tone may not be, and then the most legible end is used.
    """
    if ratio(colour, background) >= target:
        return colour
    darker = dark_text_wins(background)
    start = oklch(colour)
    for step in range(1, WALK_STEPS + 1):
        share = step / WALK_STEPS
        lightness = start.l * (1 - share) if darker else start.l + (1 - start.l) * share
        candidate = from_oklch(lightness, start.c, start.h)
        if ratio(candidate, background) >= target:
            return candidate
    return BLACK if darker else WHITE
