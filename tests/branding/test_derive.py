"""Colour maths and the published brand's derivation (spec A 2.9, 2.10, 8)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gymctl.branding.colour import from_oklch, oklch
from gymctl.branding.contrast import BLACK, WHITE, luminance, ratio, readable
from gymctl.branding.derive import (
    FILLED_CONTROLS,
    NO_CHROMA,
    ON_FILL,
    brand,
    contrast_report,
    resolve,
    text_pairs,
)
from gymctl.branding.palette import FIELDS, Palette

hex_colours = st.integers(0, 0xFFFFFF).map(lambda n: f"#{n:06X}")
maybe = st.one_of(st.none(), hex_colours)
palettes = st.builds(
    Palette,
    primary=hex_colours,
    secondary=maybe,
    button=maybe,
    card=maybe,
    background=maybe,
    dark_card=maybe,
    dark_background=maybe,
)


def test_wcag_reference_ratios():
    assert ratio(BLACK, WHITE) == pytest.approx(21.0)
    assert ratio("#777777", WHITE) == pytest.approx(4.48, abs=0.01)
    assert ratio("#767676", WHITE) == pytest.approx(4.54, abs=0.01)
    assert luminance(WHITE) == pytest.approx(1.0)


@pytest.mark.parametrize("colour", ["#1C40A0", "#FFE600", "#00FF00", "#808080", "#0A0A0A"])
def test_oklch_round_trips_srgb_colours(colour):
    c = oklch(colour)
    assert from_oklch(c.l, c.c, c.h) == colour


def test_out_of_gamut_oklch_keeps_lightness_and_hue_and_loses_chroma():
    vivid = from_oklch(0.7, 0.4, 150)  # far outside sRGB
    mapped = oklch(vivid)
    assert mapped.l == pytest.approx(0.7, abs=0.01)
    assert mapped.h == pytest.approx(150, abs=2)
    assert mapped.c < 0.4


def test_readable_keeps_a_colour_that_already_reaches_the_target():
    assert readable("#1C40A0", WHITE) == "#1C40A0"


def test_readable_walks_lightness_keeping_the_hue():
    walked = readable("#FFE600", "#FFFFFF")  # yellow text on white: 1.3:1
    assert ratio(walked, "#FFFFFF") >= 4.5
    assert abs(oklch(walked).h - oklch("#FFE600").h) < 3


@given(palettes)
@settings(max_examples=300, deadline=None)
def test_every_text_role_reaches_4_5_to_1_on_its_background_for_any_palette(palette):
    """Spec A 2.9: text roles are walked toward 4.5:1 against the derived page background;
    foregrounds on fills are always derived and readable too."""
    tokens = brand(palette)
    for mode in ("light", "dark"):
        for role, (fg, bg) in text_pairs(tokens[mode]).items():
            assert ratio(fg, bg) >= 4.5, (mode, role, fg, bg)


@given(palettes)
@settings(max_examples=300, deadline=None)
def test_owner_colours_are_honoured_and_fills_stay_exact(palette):
    """Every colour the owner set is kept exactly; every absent one is derived."""
    tokens = brand(palette)
    emitted = tokens["palette"]
    for name, attribute in FIELDS.items():
        owner = getattr(palette, attribute)
        if owner is not None:
            assert emitted[name] == owner
        elif name != "buttonColor":
            assert emitted[name].startswith("#")
    assert ("buttonColor" in emitted) is (palette.button is not None)
    resolved = resolve(palette)
    light, dark = tokens["light"], tokens["dark"]
    assert light["primary"] == dark["primary"] == palette.primary
    assert light["button"] == (palette.button or palette.primary)
    assert (light["page"], light["card"]) == (resolved.background, resolved.card)
    assert (dark["page"], dark["card"]) == (resolved.dark_background, resolved.dark_card)


@given(palettes)
@settings(max_examples=300, deadline=None)
def test_filled_controls_reach_5_5_on_a_light_fill_whenever_any_colour_can(palette):
    """Spec A 8: filled controls 5.50:1 for a light primary fill. On a light fill only black
    can go further than the walk; when even black stays below 5.5 the walk ends at black."""
    tokens = brand(palette)
    for fill in FILLED_CONTROLS:
        colour = tokens["light"][fill]
        on = tokens["light"][f"on{fill[0].upper()}{fill[1:]}"]
        if ratio(BLACK, colour) >= ratio(WHITE, colour):
            if ratio(BLACK, colour) >= 5.5:
                assert ratio(on, colour) >= 5.5
            else:
                assert on == BLACK


def test_a_very_light_and_a_very_dark_primary_get_opposite_foregrounds():
    light = brand(Palette(primary="#FFF8C0"))["light"]
    dark = brand(Palette(primary="#0B0B2A"))["light"]
    assert luminance(light["onPrimary"]) < 0.1
    assert ratio(light["onPrimary"], "#FFF8C0") >= 5.5
    assert luminance(dark["onPrimary"]) > 0.8


def test_the_link_is_the_primary_colour_walked_on_the_page():
    """The website derives its accent roles from the primary colour."""
    tokens = brand(Palette(primary="#FFE600"))["light"]
    assert tokens["link"] != "#FFE600"
    assert abs(oklch(tokens["link"]).h - oklch("#FFE600").h) < 3
    assert brand(Palette(primary="#1C40A0"))["light"]["link"] == "#1C40A0"


def test_the_accent_reaches_only_the_focus_ring_and_falls_back_to_the_brand_colour():
    """The accent colour reaches only the focus ring; with no chroma left, the brand colour."""
    coloured = brand(Palette(primary="#1C40A0"))
    ring = coloured["light"]["focusRing"]
    assert ring not in {v for k, v in coloured["light"].items() if k != "focusRing"}
    assert oklch(ring).c >= NO_CHROMA
    assert ratio(ring, coloured["light"]["page"]) >= 3
    grey = brand(Palette(primary="#808080"))
    assert grey["light"]["focusRing"] == grey["dark"]["focusRing"] == "#808080"


def test_absent_surfaces_are_tints_of_the_primary_hue():
    resolved = resolve(Palette(primary="#1C40A0"))
    page, dark_page = oklch(resolved.background), oklch(resolved.dark_background)
    assert page.l > 0.95
    assert dark_page.l < 0.25
    assert abs(page.h - oklch("#1C40A0").h) < 10


def test_contrast_report_covers_every_text_role():
    report = contrast_report(brand(Palette(primary="#1C40A0")))
    assert set(report["light"]) == {"text", "textMuted", "heading", "link", *ON_FILL}
    assert min(report["dark"].values()) >= 4.5
