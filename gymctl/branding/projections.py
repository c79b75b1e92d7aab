"""Payloads per requested schema (spec A 2.10, 9): schema 4 is current; 1 to 3 are frozen legacy
projections for installed app versions, to be removed when no installed version asks for them.

| schema | palette fields                                                 | brand            |
|--------|----------------------------------------------------------------|------------------|
| 4      | the seven colours (buttonColor only when the owner set it)     | schemaVersion 2  |
| 3      | primary, secondary, accentColor, backgroundStyle {custom,      | schemaVersion 1  |
|        | derived page and card colours}, surfaceColor                   |                  |
| 2      | same set; backgroundStyle "tinted" (no owner surfaces) or      | schemaVersion 1  |
|        | "default" (owner surfaces it cannot carry)                     |                  |
| 1      | primary, secondary, accentColor (no surface fields)            | schemaVersion 1  |

Schemas 1 to 3 never carry buttonColor (nor the button roles). surfaceColor is the light card
colour, owner-set or derived; accentColor is the derived accent (the focus ring's colour).
Brand schemaVersion 1 has the colours every legacy app knew.
"""

from __future__ import annotations

from typing import Any

LEGACY_BRAND_ROLES = ("primary", "onPrimary", "secondary", "onSecondary")


def legacy_brand(brand: dict[str, Any]) -> dict[str, Any]:
    """Brand schemaVersion 1, from the published schemaVersion 2."""
    return {
        "schemaVersion": 1,
        "colors": {role: brand["light"][role] for role in LEGACY_BRAND_ROLES}
        | {"accent": brand["light"]["focusRing"]},
        "darkColors": {role: brand["dark"][role] for role in LEGACY_BRAND_ROLES}
        | {"accent": brand["dark"]["focusRing"]},
    }


def project(brand: dict[str, Any], schema: int, *, owner_surfaces: bool) -> dict[str, Any]:
    """`brand` is the published schemaVersion 2; `owner_surfaces` whether the owner set a page
    or card colour (schema 2 says tinted or default from it)."""
    palette = brand["palette"]
    if schema == 4:
        return {"palette": dict(palette), "brand": brand}
    legacy: dict[str, Any] = {
        "primaryColor": palette["primaryColor"],
        "secondaryColor": palette["secondaryColor"],
        "accentColor": brand["light"]["focusRing"],
    }
    if schema == 3:
        legacy["backgroundStyle"] = {
            "type": "custom",
            "pageColor": palette["backgroundColor"],
            "cardColor": palette["cardColor"],
            "darkPageColor": palette["darkBackgroundColor"],
            "darkCardColor": palette["darkCardColor"],
        }
    elif schema == 2:
        legacy["backgroundStyle"] = "default" if owner_surfaces else "tinted"
    if schema in (2, 3):
        legacy["surfaceColor"] = palette["cardColor"]
    return {"palette": legacy, "brand": legacy_brand(brand)}
