"""Payload versions requested by installed clients (spec A 9): integers 1 to 4, absent means 1."""

from __future__ import annotations

from gymctl import codes
from gymctl.errors import invalid

SCHEMAS = range(1, 5)


def payload_schema(value: str | None, *, parameter: str) -> int:
    if value is None:
        return 1
    if value not in {str(n) for n in SCHEMAS}:  # ASCII digits only: '²'.isdigit() is True
        raise invalid(
            codes.SCHEMA_UNSUPPORTED,
            f"{parameter} must be an integer from 1 to 4",
            parameter=parameter,
        )
    return int(value)
