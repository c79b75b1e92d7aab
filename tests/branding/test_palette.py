"""Palette schema 4 (spec A 2.10): validation with a code per mistake, identity ignoring case."""

from __future__ import annotations

import pytest

from gymctl.branding.palette import Palette, brand_identity
from gymctl.errors import DomainError


@pytest.mark.parametrize(
    ("data", "code", "field"),
    [
        ([], "palette_invalid", None),
        ({"secondaryColor": "#000000"}, "palette_primary_required", "primaryColor"),
        ({"primaryColor": "blue"}, "palette_color_invalid", "primaryColor"),
        ({"primaryColor": "#12345"}, "palette_color_invalid", "primaryColor"),
        ({"primaryColor": "#1234567"}, "palette_color_invalid", "primaryColor"),
        ({"primaryColor": "#GGGGGG"}, "palette_color_invalid", "primaryColor"),
        ({"primaryColor": "#123456", "cardColor": 255}, "palette_color_invalid", "cardColor"),
        (
            {"primaryColor": "#123456", "accentColor": "#000000"},
            "palette_field_unknown",
            "accentColor",
        ),
        (
            {"primaryColor": "#123456", "backgroundStyle": "tinted"},
            "palette_field_unknown",
            None,
        ),
    ],
)
def test_bad_palettes_are_refused_with_a_code(data, code, field):
    with pytest.raises(DomainError) as refused:
        Palette.parse(data)
    assert (refused.value.code, refused.value.status) == (code, 400)
    if field:
        assert refused.value.details["fields"][0]["field"] == field


def test_schema_4_keeps_only_what_the_owner_set_and_the_case_they_typed():
    palette = Palette.parse({"primaryColor": "#aaBB11", "buttonColor": None})
    assert palette.as_json() == {"primaryColor": "#aaBB11"}


def test_palette_identity_compares_colours_case_insensitively_then_name_and_logos():
    """Spec A 2.10: palette identity for pending detection: colours (case-insensitive), name,
    logos."""
    one = brand_identity({"primaryColor": "#AABBCC"}, "Gym", {"logo": "k1"})
    assert one == brand_identity({"primaryColor": "#aabbcc"}, "Gym", {"logo": "k1"})
    assert one != brand_identity({"primaryColor": "#aabbcd"}, "Gym", {"logo": "k1"})
    assert one != brand_identity({"primaryColor": "#AABBCC"}, "Gym 2", {"logo": "k1"})
    assert one != brand_identity({"primaryColor": "#AABBCC"}, "Gym", {"logo": "k2"})
    derived = brand_identity({"primaryColor": "#AABBCC"}, "Gym", {})
    set_card = brand_identity({"primaryColor": "#AABBCC", "cardColor": "#FFFFFF"}, "Gym", {})
    assert derived != set_card  # an owner colour equal to a derived one is still a change
