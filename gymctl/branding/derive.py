"""The published brand, schemaVersion 2 (spec A 2.10, 2.9): every colour the owner set is kept,
every absent one derived from the primary colour in OKLCH, every foreground derived.

Derivation (Material 3's tonal idea, in OKLCH instead of HCT):
- secondaryColor: the primary's hue and lightness at a third of its chroma (a muted companion);
- light page and card: near-white tints of the primary's hue (L 0.975 and 0.995, chroma capped
  at 0.012 and 0.004); dark page and card: near-black tints (L 0.18 and 0.24, capped at 0.02 and
  0.025);
- the button fill: buttonColor when set, else the primary colour;
- the accent (the focus ring, its only use): the primary's hue turned 60 degrees at no less
  lightness than 0.5, walked to 3:1 against the page (WCAG 2 non-text contrast); when no
  chroma is left (a grey primary, or a ring walked to black or white), the brand colour.

Roles of each mode (light: backgroundColor and cardColor; dark: the dark ones):
- fills, exact: page, card, primary, secondary, button; and the focusRing;
- text roles on the page, walked to 4.5:1 against the page: text, textMuted, heading, link
  (link is the website's accent role, derived from the primary colour);
- foregrounds on fills, always derived: onCard and onCardMuted (4.5:1), onSecondary (4.5:1),
  onPrimary and onButton (5.50:1 on a light fill, where black wins over white; 4.5:1 otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymctl.branding.colour import from_oklch, oklch
from gymctl.branding.contrast import FILLED_CONTROL, NON_TEXT, TEXT, dark_text_wins, ratio, readable
from gymctl.branding.palette import FIELDS, Palette

BRAND_SCHEMA_VERSION = 2
NO_CHROMA = 0.03  # below this OKLCH chroma a colour reads as grey
ACCENT_TURN = 60.0
PAGE_ROLES = ("text", "textMuted", "heading", "link")
# foreground role -> the fill it sits on
ON_FILL = {
    "onCard": "card",
    "onCardMuted": "card",
    "onPrimary": "primary",
    "onSecondary": "secondary",
    "onButton": "button",
}
FILLED_CONTROLS = ("primary", "button")


@dataclass(frozen=True)
class Resolved:
    """All seven colours of schema 4; `button` stays None when the owner did not set it."""

    primary: str
    secondary: str
    button: str | None
    card: str
    background: str
    dark_card: str
    dark_background: str
    accent: str

    def schema4(self) -> dict[str, str]:
        return {
            name: getattr(self, attribute)
            for name, attribute in FIELDS.items()
            if getattr(self, attribute) is not None
        }


def resolve(palette: Palette) -> Resolved:
    p = oklch(palette.primary)

    def tint(lightness: float, chroma_cap: float) -> str:
        return from_oklch(lightness, min(p.c, chroma_cap), p.h)

    accent = (
        palette.primary
        if p.c < NO_CHROMA
        else from_oklch(max(p.l, 0.5), p.c, (p.h + ACCENT_TURN) % 360)
    )
    if oklch(accent).c < NO_CHROMA:
        accent = palette.primary
    return Resolved(
        primary=palette.primary,
        secondary=palette.secondary or from_oklch(p.l, p.c / 3, p.h),
        button=palette.button,
        card=palette.card or tint(0.995, 0.004),
        background=palette.background or tint(0.975, 0.012),
        dark_card=palette.dark_card or tint(0.24, 0.025),
        dark_background=palette.dark_background or tint(0.18, 0.02),
        accent=accent,
    )


def _text(background: str, *, lightness_on_light: float, chroma: float, hue: float) -> str:
    """A tinted neutral for `background`, walked to 4.5:1."""
    lightness = lightness_on_light if dark_text_wins(background) else 1 - lightness_on_light / 3
    return readable(from_oklch(lightness, chroma, hue), background, TEXT)


def _on(fill: str, target: float) -> str:
    """The foreground on a fill: the fill's hue, nearly neutral, walked to `target`."""
    f = oklch(fill)
    start = 0.3 if dark_text_wins(fill) else 0.98
    return readable(from_oklch(start, min(f.c, 0.04), f.h), fill, target)


def mode(resolved: Resolved, *, dark: bool) -> dict[str, str]:
    page = resolved.dark_background if dark else resolved.background
    card = resolved.dark_card if dark else resolved.card
    ring = readable(resolved.accent, page, NON_TEXT)
    fills = {
        "page": page,
        "card": card,
        "primary": resolved.primary,
        "secondary": resolved.secondary,
        "button": resolved.button or resolved.primary,
        # The accent's one use; walked to 3:1 it may lose its chroma: then the brand colour.
        "focusRing": ring if oklch(ring).c >= NO_CHROMA else resolved.primary,
    }
    p = oklch(resolved.primary)
    roles = dict(fills)
    roles["text"] = _text(page, lightness_on_light=0.22, chroma=min(p.c, 0.02), hue=p.h)
    roles["textMuted"] = _text(page, lightness_on_light=0.48, chroma=min(p.c, 0.03), hue=p.h)
    roles["heading"] = _text(page, lightness_on_light=0.3, chroma=min(p.c, 0.08), hue=p.h)
    roles["link"] = readable(resolved.primary, page, TEXT)
    roles["onCard"] = _text(card, lightness_on_light=0.22, chroma=min(p.c, 0.02), hue=p.h)
    roles["onCardMuted"] = _text(card, lightness_on_light=0.48, chroma=min(p.c, 0.03), hue=p.h)
    for role, fill in ON_FILL.items():
        if role.startswith("onCard"):
            continue
        light_control = fill in FILLED_CONTROLS and dark_text_wins(fills[fill])
        roles[role] = _on(fills[fill], FILLED_CONTROL if light_control else TEXT)
    return roles


def brand(palette: Palette) -> dict[str, Any]:
    """The published brand, schemaVersion 2: the resolved schema-4 palette and both modes."""
    resolved = resolve(palette)
    return {
        "schemaVersion": BRAND_SCHEMA_VERSION,
        "palette": resolved.schema4(),
        "light": mode(resolved, dark=False),
        "dark": mode(resolved, dark=True),
    }


def text_pairs(modes: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Every text role of one mode with the background it is read on."""
    pairs = {role: (modes[role], modes["page"]) for role in PAGE_ROLES}
    pairs.update({role: (modes[role], modes[fill]) for role, fill in ON_FILL.items()})
    return pairs


def contrast_report(tokens: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Ratios of every text role in both modes, rounded to two places (for the CLI)."""
    return {
        name: {role: round(ratio(fg, bg), 2) for role, (fg, bg) in text_pairs(tokens[name]).items()}
        for name in ("light", "dark")
    }
