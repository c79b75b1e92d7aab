"""The one JSON error envelope: `{"code", "message"}` with the spec's status."""

from __future__ import annotations

import logging

from flask import Flask, g, jsonify
from werkzeug.exceptions import HTTPException

from gymctl.errors import DomainError

log = logging.getLogger("gymctl.api")


def _code(error: HTTPException) -> str:
    return (error.name or "error").lower().replace(" ", "_")


def register(app: Flask) -> None:
    @app.errorhandler(DomainError)
    def domain_error(error: DomainError):
        log.info("refused %s (%s)", error.code, error.status)
        g.commit_refusal = error.audited
        return jsonify(error.to_json()), error.status

    # Unexpected exceptions reach Flask's own handling first (and error tracking through its
    # got_request_exception signal), then arrive here as a 500 InternalServerError.
    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        if error.code and error.code >= 500:
            original = getattr(error, "original_exception", None)
            if original is not None:
                log.error("unhandled error", exc_info=original)
            return jsonify(code="internal_error", message="internal server error"), error.code
        response = jsonify(code=_code(error), message=error.description)
        # Keep what the error says beyond its body, e.g. the Allow header of a 405 (RFC 9110).
        for name, value in error.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response, error.code
