"""Request bodies: the one JSON reader of the API and the body limit of each route class.

Python's json parser, pydantic and any check after them recurse: a body a few hundred levels
deep is a RecursionError (a 500), 100 000 levels of `[` crash the parser. So the nesting depth
is measured on the raw bytes first, without recursion, and the parsed value is walked with an
explicit stack. A malformed body is a 400 with a code and nothing is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from gymctl.db import storable_text
from gymctl.errors import invalid
from gymctl.jsondepth import MAX_DEPTH, depth
from webhooks import codes

F = TypeVar("F", bound=Callable)

# Per route class; uploads set their own (spec A 8 asset bytes, thumbnails 5 MB, the roster CSV).
PUBLIC_BODY_BYTES = 64 * 1024  # anonymous routes: join forms, a failed checkout
WEBHOOK_BODY_BYTES = 256 * 1024  # provider events
MEMBER_BODY_BYTES = 1024 * 1024  # signed-in JSON routes


def body_limit(limit: int) -> Callable[[F], F]:
    """Give a route its own body limit (bytes) instead of its class's."""

    def mark(view: F) -> F:
        view.gymctl_body_limit = limit  # type: ignore[attr-defined]
        return view

    return mark


def reads_its_own_body(view: F) -> F:
    """The route sets its own limit before it reads its body and answers a body past it with
    its own code (an upload: spec A 7 brand_asset_size, a thumbnail's 5 MB), reading it as a
    stream (werkzeug refuses a chunked one past `max_content_length` as it streams in). So a
    chunked body is not read ahead at the route class's limit: a logo of a few MB sent
    chunked was refused 413 at the signed-in JSON routes' 1 MiB."""
    view.gymctl_reads_own_body = True  # type: ignore[attr-defined]
    return view


def apply_body_limit() -> None:
    """Before each request: the route's limit, enforced while the body streams in (413)."""
    view = current_app.view_functions.get(request.endpoint or "")
    limit = getattr(view, "gymctl_body_limit", None)
    if limit is None:
        public = view is None or getattr(view, "gymctl_public", False)  # as the guard reads it
        limit = PUBLIC_BODY_BYTES if public else MEMBER_BODY_BYTES
    request.max_content_length = limit
    if (
        request.content_length is None
        and "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        and not getattr(view, "gymctl_reads_own_body", False)
    ):
        _read_chunked(limit)


def _read_chunked(limit: int) -> None:
    """A chunked body has no length up front, and werkzeug stops reading one at the limit
    without a word: the route parsed its head (a 20 MB body answered "not JSON"). So it is
    read here whole, up to one byte past the limit, and one past it is a 413 as a declared
    length is. Bad chunk framing surfaces here too (gunicorn's ParseException: 400)."""
    request.max_content_length = limit + 1
    try:
        data = request.get_data(cache=True)
    finally:
        request.max_content_length = limit
    if len(data) > limit:
        raise RequestEntityTooLarge()


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
