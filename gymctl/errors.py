"""The one domain error type: the spec's `code`, its HTTP status and a human message.

The HTTP door renders it as `{"code", "message"}` with `status`; the CLI prints the code and
exits 1. Domain code raises it and never knows which door it came through.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        status: int = 400,
        audited: bool = False,
        **details: Any,
    ) -> None:
        self.code = code
        self.message = message or code.replace("_", " ")
        self.status = status
        # An audited refusal wrote its own audit record before raising: the door commits that
        # (and nothing else was written) instead of rolling it back.
        self.audited = audited
        # Spec A 6.2: a refused branding write is recorded once as api.request_failed.
        self.request_failed_recorded = False
        self.details = details
        super().__init__(f"{code}: {self.message}")

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class ConfigError(RuntimeError):
    """A setting is missing or invalid; raised at start-up, before any work is done. `problems`
    lists every one found, so an operator fixes them in one pass."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


# One helper per status the specs give a refusal; the codes themselves are declared per area
# (gymctl/<area>/codes.py, webhooks/codes.py) and listed in docs/error-codes.md.


def invalid(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=400, **details)


def unauthorized(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=401, **details)


def forbidden(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=403, **details)


def not_found(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=404, **details)


def conflict(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=409, **details)


def gone(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=410, **details)


def too_large(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=413, **details)


def unprocessable(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=422, **details)


def too_many_requests(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=429, **details)


def internal_error(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=500, **details)


def bad_gateway(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=502, **details)


def unavailable(code: str, message: str | None = None, **details: Any) -> DomainError:
    return DomainError(code, message, status=503, **details)


# The helper of each status, for the codes' listing and its test.
HELPERS = {
    helper.__name__: status
    for helper, status in (
        (invalid, 400),
        (unauthorized, 401),
        (forbidden, 403),
        (not_found, 404),
        (conflict, 409),
        (gone, 410),
        (too_large, 413),
        (unprocessable, 422),
        (too_many_requests, 429),
        (internal_error, 500),
        (bad_gateway, 502),
        (unavailable, 503),
    )
}
