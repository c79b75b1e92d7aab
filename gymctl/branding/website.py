"""The website's content, schema 2: what a gym's minisite says. Each save is a new immutable
revision; the draft points at one, publishing points the live site at it (spec A 3)."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymctl.branding import codes
from gymctl.errors import invalid

CONTENT_SCHEMA = 2
# A content file read from the command line stops here (HTTP refuses a body past the same
# mebibyte with 413): a valid content takes a few kilobytes.
MAX_CONTENT_BYTES = 1024 * 1024
TEXT = r"^[^\u0000]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class PricingCard(_Strict):
    name: str = Field(min_length=1, max_length=80, pattern=TEXT)
    price_cents: int = Field(alias="priceCents", ge=0, le=100_000_000)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    interval: Literal["month", "year", "week", "once"] = "month"
    description: str | None = Field(None, max_length=400, pattern=TEXT)
    plan_id: uuid.UUID | None = Field(None, alias="planId")


class Contact(_Strict):
    email: str | None = Field(None, max_length=320, pattern=r"^[^@\s\u0000]+@[^@\s\u0000]+$")
    phone: str | None = Field(None, max_length=40, pattern=r"^[0-9+() .-]+$")
    address: str | None = Field(None, max_length=300, pattern=TEXT)


class WebsiteContent(_Strict):
    headline: str = Field(min_length=1, max_length=120, pattern=TEXT)
    tagline: str | None = Field(None, max_length=200, pattern=TEXT)
    about: str | None = Field(None, max_length=4000, pattern=TEXT)
    pricing: list[PricingCard] = Field(default_factory=list, max_length=12)
    contact: Contact = Field(default_factory=Contact)


def parse_content(data: Any) -> dict[str, Any]:
    """Validated content in its stored JSON form; 400 website_content_invalid naming the
    fields otherwise."""
    try:
        content = WebsiteContent.model_validate(data)
    except ValidationError as error:
        problems = [
            {"field": ".".join(str(p) for p in e["loc"]), "problem": e["type"]}
            for e in error.errors()
        ]
        raise invalid(
            codes.WEBSITE_CONTENT_INVALID, "the website content does not match", fields=problems
        ) from None
    return content.model_dump(mode="json", by_alias=True, exclude_none=True)


def price_label(card: dict[str, Any]) -> str:
    """`49.00 EUR / month` (integer cents, never floats)."""
    whole, cents = divmod(card["priceCents"], 100)
    interval = card.get("interval", "month")
    suffix = "" if interval == "once" else f" / {interval}"
    return f"{whole}.{cents:02d} {card['currency']}{suffix}"
