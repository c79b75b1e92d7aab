"""Request bodies are validated by pydantic models; a bad body is 400 invalid_body with the
offending fields, and nothing is written. The body is read by the one JSON reader
(webhooks.bodies.read_json), which has already refused depth, NaN and NUL characters."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar, get_args

from flask import request
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from gymctl.errors import invalid, unprocessable
from webhooks import codes
from webhooks.bodies import read_json

M = TypeVar("M", bound=BaseModel)

# What the domain accepts, written into the document (the check stays the domain's, with its own
# 422 code): an address as gymctl.access.invitations.normalize_email reads one, a UUIDv4 as
# gymctl.billing.idempotency.require_uuid4 wants it. The address's pattern is the safe core of
# what normalize_email takes: dot-atoms of RFC 5322's atom characters and the Latin letters
# (U+00C0 to U+024F hold no control, format or unassigned character, which it refuses); it
# takes other scripts too, undocumented, so every address the document allows is accepted.
# The domain's atoms leave out U+0130 (İ), which lower-casing lengthens: a 320-character address
# holding one in its domain was document-valid and refused (email_invalid, too long as stored).
# The whitespace around it is what the model strips (WHITESPACE): `\s` is another set in each
# dialect (ECMAScript's holds U+FEFF, which nothing strips: the address was refused).
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\u00c0-\u024f-]+"
_DOMAIN_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\u00c0-\u012f\u0131-\u024f-]+"
UUID4_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
# What Body's str_strip_whitespace strips before a length or a pattern is checked (pydantic-core
# trims Unicode's White_Space), as a regex class: the document's patterns read the raw string.
WHITESPACE = r"\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# What Python's str.strip() takes off besides (str.isspace(): the information separators
# U+001C to U+001F too), for a value the domain strips again after the model.
PY_WHITESPACE = rf"{WHITESPACE}\u001c-\u001f"
_ADDRESS = rf"{_ATOM}(\.{_ATOM})*@{_DOMAIN_ATOM}(\.{_DOMAIN_ATOM})+"
EMAIL_PATTERN = rf"^[{WHITESPACE}]*{_ADDRESS}[{WHITESPACE}]*$"
# What gymctl.text.one_line refuses: a control character (Cc) or a line or paragraph separator.
_BREAKS = r"\u0000-\u001f\u007f-\u009f\u2028\u2029"


def one_line_pattern(strip: str = WHITESPACE) -> str:
    """A string that, once `strip` is taken off both ends, holds a character and is one line as
    gymctl.text.one_line reads it. What is stripped may hold a break (it is gone before the
    check); what is left may not, anywhere: `  Yoga\n` is taken, `Yo\nga` refused."""
    return rf"^[{strip}]*[^{_BREAKS}]*[^{_BREAKS}{strip}][^{_BREAKS}]*[{strip}]*$"


def one_line(max_length: int, *, strip: str = WHITESPACE) -> WithJsonSchema:
    """A name the domain refuses (its own code) unless it is one line: the document says so.
    `strip`: PY_WHITESPACE where the domain strips the value again (str.strip())."""
    return WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": max_length,
            "pattern": one_line_pattern(strip),
        }
    )


# A token sent as an HTTP header (a bridge api-key): printable ASCII, a header carries no other.
HEADER_TOKEN_PATTERN = rf"^[{WHITESPACE}]*[!-~]+[{WHITESPACE}]*$"
Email = Annotated[
    str,
    Field(max_length=320),
    WithJsonSchema({"type": "string", "maxLength": 320, "pattern": EMAIL_PATTERN}),
]
Uuid4 = Annotated[uuid.UUID, WithJsonSchema({"type": "string", "pattern": UUID4_PATTERN})]


def one_of(values) -> WithJsonSchema:
    """A string the domain checks against `values` (its 422 names them): the document says so."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)

    @field_validator("*", mode="after")
    @classmethod
    def _instants_have_a_utc_time(cls, value: object, info: ValidationInfo) -> object:
        """An instant at the edge of the calendar with an offset (0001-01-01T00:00:00+14:00)
        parses, but has no UTC time: Python's conversion overflows. Refused here (400, naming
        the field), for every body and query model, before a route converts it."""
        if isinstance(value, datetime) and value.tzinfo is not None:
            try:
                value.astimezone(UTC)
            except OverflowError:
                raise ValueError(f"{info.field_name} has no UTC time (out of range)") from None
        return value


_HEX = "[0-9a-fA-F]"
_UUID_TEXT = re.compile(rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}")


def uuid_text(text: str) -> uuid.UUID | None:
    """A query's `format: uuid` in its canonical text, else None. uuid.UUID reads far more:
    int(hex, 16) takes any Unicode decimal digit ("\u0661" * 32 was 11111111-1111-...), and
    braces, a "urn:uuid:" prefix and hyphens anywhere are dropped first."""
    return uuid.UUID(text) if _UUID_TEXT.fullmatch(text) else None


def explicit_utc(at: datetime) -> datetime:
    """A body's instant in UTC; one with no offset is no instant: 422 timestamp_not_utc (the
    billing routes' answer; a route that passed it on unchecked answered 500)."""
    if at.tzinfo is None:
        raise unprocessable(codes.TIMESTAMP_NOT_UTC, "give an explicit UTC time (Z or +00:00)")
    return at.astimezone(UTC)


def parse(model: type[M]) -> M:
    """The body as `model`, validated strictly as JSON: a number where the document says
    integer, true or false where it says boolean ("12", 0 and 1 were taken for them: a
    `{"joinEnabled": 0}` turned joining off). No body is no fields; `null` is not an object."""
    raw = request.get_data(cache=True)
    if raw and not request.is_json:
        raise invalid(codes.INVALID_BODY, "the body is not JSON (send application/json)")
    data = read_json()  # depth, NaN, NUL and lone surrogates refused first
    if data is None and raw.strip():
        raise invalid(codes.INVALID_BODY, "the body is null: send a JSON object")
    try:
        if data is None:
            return model.model_validate({})
        parsed = model.model_validate_json(raw, strict=True)
    except ValidationError as error:
        raise invalid(
            codes.INVALID_BODY, "the body does not match", fields=_fields(error)
        ) from None
    not_dates = _instants_not_written_as_dates(model, data)
    if not_dates:
        fields = [{"field": name, "problem": "datetime_parsing"} for name in not_dates]
        raise invalid(codes.INVALID_BODY, "the body does not match", fields=fields)
    return parsed


# An instant as the document's `format: date-time` writes one: it starts with its date.
_INSTANT_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _instants_not_written_as_dates(model: type[BaseModel], data: Any) -> list[str]:
    """The body's instants given as anything but ISO 8601 text. pydantic reads a string of
    digits as seconds since 1970, strict mode too: a notice's `"effectiveAt": "1900000000"` was
    given for 2030, a date no one wrote. Read from the decoded body (a validator of the model
    would see the value as Python text, which strict mode refuses for every instant)."""
    if not isinstance(data, dict):
        return []
    return [
        key
        for name, field in model.model_fields.items()
        if field.annotation is datetime or datetime in get_args(field.annotation)
        # A field with its own reader (a day alone, the forecast's until) reads its text itself.
        if not any(isinstance(rule, BeforeValidator) for rule in field.metadata)
        for key in dict.fromkeys((field.alias or name, name))
        if isinstance(data.get(key), str) and not _INSTANT_TEXT.match(data[key].strip())
    ]


def parse_query(model: type[M]) -> M:
    """The query string as `model` (its values are text: read as the model's types, not
    strictly); a value it does not take, or a parameter it does not know, is a 400 naming it.
    An empty value is an absent one (a form's unset filter sends `?status=`)."""
    try:
        return model.model_validate({k: v for k, v in request.args.items() if v != ""})
    except ValidationError as error:
        raise invalid(
            codes.INVALID_QUERY, "the query does not match", fields=_fields(error)
        ) from None


def _fields(error: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in e["loc"]), "problem": e["type"]} for e in error.errors()
    ]
