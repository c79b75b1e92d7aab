"""Request bodies: the one JSON reader of the API and the body limit of each route class.

Python's json parser, pydantic and any check after them recurse: a body a few hundred levels
deep is a RecursionError (a 500), 100 000 levels of `[` crash the parser. So the nesting depth
is measured on the raw bytes first, without recursion, and the parsed value is walked with an
explicit stack. A malformed body is a 400 with a code and nothing is written.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any, TypeVar

from flask import current_app, request

from gymctl.db import storable_text
from gymctl.errors import invalid
from webhooks import codes

F = TypeVar("F", bound=Callable)

MAX_DEPTH = 32  # our deepest body (a branding draft) is 5 levels
# Per route class; uploads set their own (spec A 8 asset bytes, thumbnails 5 MB, the roster CSV).
PUBLIC_BODY_BYTES = 64 * 1024  # anonymous routes: join forms, a failed checkout
WEBHOOK_BODY_BYTES = 256 * 1024  # provider events
MEMBER_BODY_BYTES = 1024 * 1024  # signed-in JSON routes

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def body_limit(limit: int) -> Callable[[F], F]:
    """Give a route its own body limit (bytes) instead of its class's."""

    def mark(view: F) -> F:
        view.gymctl_body_limit = limit  # type: ignore[attr-defined]
        return view

    return mark


def apply_body_limit() -> None:
    """Before each request: the route's limit, enforced while the body streams in (413)."""
    view = current_app.view_functions.get(request.endpoint or "")
    limit = getattr(view, "gymctl_body_limit", None)
    if limit is None:
        public = view is None or getattr(view, "gymctl_public", False)  # as the guard reads it
        limit = PUBLIC_BODY_BYTES if public else MEMBER_BODY_BYTES
    request.max_content_length = limit


def depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects, brackets inside strings not counted. Works
    on UTF-8 bytes: no byte of a multi-byte character is an ASCII bracket or quote."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _unstorable_text(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not storable_text(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def read_json(
    raw: bytes | None = None, *, code: str = codes.INVALID_BODY, every_text: bool = True
) -> Any:
    """The request's JSON body (or `raw`); None when empty. DomainError `code` (400) when it is
    not UTF-8 JSON, deeper than MAX_DEPTH, holds NaN, Infinity or an out-of-range number, or
    (with `every_text`) any text PostgreSQL cannot store. A provider's event passes
    every_text=False: it carries fields we never keep, and its model checks the ones we do."""
    raw = request.get_data(cache=True) if raw is None else raw
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(code, "the body is not UTF-8") from None
    if depth(raw) > MAX_DEPTH:
        raise invalid(code, f"the body nests deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        raise invalid(code, "the body is not JSON") from None
    if every_text and _unstorable_text(value):
        raise invalid(code, "text may not contain NUL characters or lone surrogates")
    return value
