"""The owner's palette, schema 4 (spec A 2.10), and its identity for pending detection.

The owner sets primaryColor and may set any other colour; a colour left out is derived when the
brand is published (gymctl.branding.derive). The draft keeps what the owner typed, case included;
identity compares colours case-insensitively (spec A 2.10: palette identity).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from gymctl.branding import codes
from gymctl.branding.colour import is_hex
from gymctl.errors import invalid

SCHEMA = 4
# JSON name -> attribute, in the order of the spec's table.
FIELDS = {
    "primaryColor": "primary",
    "secondaryColor": "secondary",
    "buttonColor": "button",
    "cardColor": "card",
    "backgroundColor": "background",
    "darkCardColor": "dark_card",
    "darkBackgroundColor": "dark_background",
}
SURFACES = ("card", "background", "dark_card", "dark_background")


@dataclass(frozen=True)
class Palette:
    primary: str
    secondary: str | None = None
    button: str | None = None
    card: str | None = None
    background: str | None = None
    dark_card: str | None = None
    dark_background: str | None = None

    @classmethod
    def parse(cls, data: Any) -> Palette:
        """Validate the owner's input: an object of `#RRGGBB` colours (null or absent: derive),
        primaryColor required. Each refusal names the field."""
        if not isinstance(data, dict):
            raise invalid(codes.PALETTE_INVALID, "the palette must be a JSON object")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise invalid(
                codes.PALETTE_FIELD_UNKNOWN,
                f"unknown palette fields: {unknown}",
                fields=[{"field": name, "problem": "extra_forbidden"} for name in unknown],
            )
        if data.get("primaryColor") is None:
            raise invalid(
                codes.PALETTE_PRIMARY_REQUIRED,
                "primaryColor is required",
                fields=[{"field": "primaryColor", "problem": "missing"}],
            )
        values = {}
        for name, attribute in FIELDS.items():
            value = data.get(name)
            if value is not None and not is_hex(value):
                raise invalid(
                    codes.PALETTE_COLOR_INVALID,
                    f"{name} must be a #RRGGBB colour",
                    fields=[{"field": name, "problem": "colour_hex"}],
                )
            values[attribute] = value
        return cls(**values)

    def as_json(self) -> dict[str, str]:
        """The colours the owner set, by their JSON names (absent ones left out)."""
        return {
            name: getattr(self, attribute)
            for name, attribute in FIELDS.items()
            if getattr(self, attribute) is not None
        }

    def owner_surfaces(self) -> bool:
        """Did the owner set a page or card colour (light or dark)?"""
        return any(getattr(self, name) is not None for name in SURFACES)

    def identity(self) -> tuple[str | None, ...]:
        return tuple(
            None if getattr(self, f.name) is None else getattr(self, f.name).lower()
            for f in fields(self)
        )


def brand_identity(
    palette: dict[str, str] | None, name: str | None, logos: dict[str, str] | None
) -> tuple:
    """Spec A 2.10: colours (case-insensitive), name and logos decide whether a draft differs."""
    colours = Palette.parse(palette).identity() if palette else None
    return colours, name, tuple(sorted((logos or {}).items()))
