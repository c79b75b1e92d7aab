"""The one JSON error envelope: `{"code", "message"}` with the spec's status."""

from __future__ import annotations

import logging
import traceback

from flask import Flask, g, jsonify, request
from gunicorn.http.errors import NoMoreData, ParseException
from sqlalchemy.exc import DBAPIError, OperationalError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from gymctl.errors import DomainError
from webhooks import codes

log = logging.getLogger("gymctl.api")


def _code(error: HTTPException) -> str:
    return (error.name or "error").lower().replace(" ", "_")


def log_unhandled(error: BaseException) -> None:
    """A database error's message can quote a member's data (PostgreSQL echoes the bad value;
    the engine's hide_parameters only drops the parameter list), so it is logged by its class,
    SQLSTATE and stack frames, never its text."""
    if isinstance(error, DBAPIError):
        log.error(
            "unhandled database error %s: %s (sqlstate %s)\n%s",
            type(error).__name__,
            type(error.orig).__name__,
            getattr(error.orig, "sqlstate", None),
            "".join(traceback.format_tb(error.__traceback__)),
        )
    else:
        log.error("unhandled error", exc_info=error)


def register(app: Flask) -> None:
    @app.errorhandler(DomainError)
    def domain_error(error: DomainError):
        log.info("refused %s (%s)", error.code, error.status)
        g.commit_refusal = error.audited
        response = jsonify(error.to_json())
        if error.status == 429:
            # RFC 9110 10.2.3: a client backs off on the header, not on a body field.
            response.headers["Retry-After"] = str(error.details.get("retryAfter") or 60)
        return response, error.status

    @app.errorhandler(RequestEntityTooLarge)
    def body_too_large(_error: RequestEntityTooLarge):
        limit = request.max_content_length
        return jsonify(
            code=codes.BODY_TOO_LARGE, message=f"the body is over this route's {limit} bytes"
        ), 413

    @app.errorhandler(ParseException)
    @app.errorhandler(NoMoreData)
    def body_unreadable(error: Exception):
        """gunicorn reads a chunked body as the route asks for it: a chunk size that is not
        hex, a chunk without its terminator or a body cut short is the client's mistake."""
        log.info("unreadable body: %s", type(error).__name__)
        return jsonify(
            code=codes.INVALID_BODY, message="the body's chunked framing is malformed"
        ), 400

    # Unexpected exceptions reach Flask's own handling first (logged by log_unhandled, and error
    # tracking through its got_request_exception signal), then arrive here as a 500.
    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        if _database_busy(getattr(error, "original_exception", None)):
            # Rolled back whole, nothing changed: the client may send it again.
            response = jsonify(
                code=codes.DATABASE_BUSY,
                message="the database could not take this request now; send it again",
            )
            response.headers["Retry-After"] = "1"
            return response, 503
        if error.code and error.code >= 500:
            return jsonify(code=codes.INTERNAL_ERROR, message="internal server error"), error.code
        response = jsonify(code=_code(error), message=error.description)
        # Keep what the error says beyond its body, e.g. the Allow header of a 405 (RFC 9110).
        for name, value in error.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response, error.code


# PostgreSQL's refusals of the moment: a deadlock it broke, a serialization conflict, a lock not
# given within lock_timeout. The embedded default's is SQLite's "database is locked" after its
# busy timeout.
BUSY_SQLSTATES = ("40P01", "40001", "55P03")


def _database_busy(error: BaseException | None) -> bool:
    if not isinstance(error, OperationalError):
        return False
    sqlstate = getattr(error.orig, "sqlstate", None)
    return sqlstate in BUSY_SQLSTATES or str(error.orig) == "database is locked"
