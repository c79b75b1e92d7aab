"""Legacy projections, one test per row of spec A 2.10's table."""

from __future__ import annotations

from gymctl.branding.derive import brand
from gymctl.branding.palette import Palette
from gymctl.branding.projections import project

OWNER = Palette(primary="#1C40A0", secondary="#F6BE28", button="#E4572E")
SURFACES = Palette(primary="#1C40A0", card="#FFF8EE", background="#FBEFDD")


def _project(palette: Palette, schema: int):
    return project(brand(palette), schema, owner_surfaces=palette.owner_surfaces())


def test_schema_4_is_the_seven_colours_and_brand_schema_version_2():
    payload = _project(OWNER, 4)
    assert set(payload["palette"]) == {
        "primaryColor",
        "secondaryColor",
        "buttonColor",
        "cardColor",
        "backgroundColor",
        "darkCardColor",
        "darkBackgroundColor",
    }
    assert payload["palette"]["buttonColor"] == "#E4572E"
    assert payload["brand"]["schemaVersion"] == 2
    assert "backgroundStyle" not in payload["palette"]  # no backgroundStyle in schema 4


def test_schema_4_omits_button_color_when_the_owner_did_not_set_it():
    assert "buttonColor" not in _project(SURFACES, 4)["palette"]


def test_schema_3_backgroundstyle_custom_carries_the_derived_page_and_card_colours():
    payload = _project(SURFACES, 3)
    derived = brand(SURFACES)["palette"]
    assert set(payload["palette"]) == {
        "primaryColor",
        "secondaryColor",
        "accentColor",
        "backgroundStyle",
        "surfaceColor",
    }
    style = payload["palette"]["backgroundStyle"]
    assert style["type"] == "custom"
    assert (style["pageColor"], style["cardColor"]) == ("#FBEFDD", "#FFF8EE")
    assert (style["darkPageColor"], style["darkCardColor"]) == (
        derived["darkBackgroundColor"],
        derived["darkCardColor"],
    )
    assert payload["brand"]["schemaVersion"] == 1


def test_schema_2_is_tinted_without_owner_surfaces():
    payload = _project(OWNER, 2)
    assert payload["palette"]["backgroundStyle"] == "tinted"
    assert payload["palette"]["surfaceColor"] == brand(OWNER)["palette"]["cardColor"]
    assert payload["brand"]["schemaVersion"] == 1


def test_schema_2_is_default_when_the_owner_set_surfaces_it_cannot_carry():
    payload = _project(SURFACES, 2)
    assert payload["palette"]["backgroundStyle"] == "default"
    assert payload["palette"]["surfaceColor"] == "#FFF8EE"


def test_schema_1_is_the_same_set_without_surface_fields():
    payload = _project(SURFACES, 1)
    assert set(payload["palette"]) == {"primaryColor", "secondaryColor", "accentColor"}
    assert payload["brand"]["schemaVersion"] == 1


def test_schemas_1_to_3_never_carry_button_color():
    for schema in (1, 2, 3):
        payload = _project(OWNER, schema)
        assert "buttonColor" not in str(payload), schema
        assert "button" not in payload["brand"]["colors"]
        assert "#E4572E" not in str(payload)  # not even under another name


def test_legacy_accent_is_the_derived_accent():
    assert _project(OWNER, 1)["palette"]["accentColor"] == brand(OWNER)["light"]["focusRing"]
