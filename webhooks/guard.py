"""The API guard, in the order of spec A 5.1.

1 public handlers pass; 2 TEST_AUTH_BYPASS with x-test-user-id (never in production);
3 a Bearer token (Authorization header, else the provider's __session cookie) or 401;
4 verification; 5 user lookup by identityId; 6 request.auth and the error-tracking user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import sentry_sdk
from flask import Flask, current_app, g, request

from gymctl.access.sessions import impersonator_from_claims, location_from_headers, record_session
from gymctl.errors import unauthorized
from gymctl.identity.auth import build_auth
from webhooks import codes
from webhooks.context import client_ip, db, services

F = TypeVar("F", bound=Callable)

TEST_USER_HEADER = "x-test-user-id"
TEST_SESSION_HEADER = "x-test-session-id"
TEST_ROLE_HEADER = "x-test-role"


def public(view: F) -> F:
    """Mark a handler public: the guard lets every request through to it."""
    view.gymctl_public = True  # type: ignore[attr-defined]
    return view


def _is_public() -> bool:
    view = current_app.view_functions.get(request.endpoint or "")
    return view is None or getattr(view, "gymctl_public", False)


def _bearer_token() -> str:
    header = request.headers.get("Authorization", "").strip()
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized(codes.AUTHORIZATION_MALFORMED, "use Authorization: Bearer <token>")
        return token.strip()
    cookie = request.cookies.get("__session")
    if cookie:
        return cookie
    raise unauthorized(codes.AUTHORIZATION_MISSING, "a Bearer session token is required")


def guard() -> None:
    if _is_public():
        return
    svc = services()
    if (
        svc.settings.test_auth_bypass
        and not svc.settings.is_production
        and request.headers.get(TEST_USER_HEADER)
    ):
        g.auth = build_auth(
            db(),
            identity_id=request.headers[TEST_USER_HEADER],
            session_id=request.headers.get(TEST_SESSION_HEADER, "sess_test_bypass"),
            role=request.headers.get(TEST_ROLE_HEADER),
        )
    else:
        token = _bearer_token()
        if svc.verifier is None:
            raise unauthorized(codes.IDENTITY_NOT_CONFIGURED, "no identity key is configured")
        claims = svc.verifier.verify(token)
        g.auth = build_auth(db(), identity_id=claims.sub, session_id=claims.sid)
        if g.auth.user is not None:
            _record_session(g.auth.user.id, claims.sid, claims.raw)
    user = g.auth.user
    sentry_sdk.set_user({"id": str(user.id) if user else g.auth.user_id})


def _record_session(user_id, session_id: str, claims: dict) -> None:
    """For the ownership trail: where and how this person signs in (cheap: at most one write
    per session every five minutes). Committed at once, as the rate limiter's count is
    (webhooks/throttle.py): the trail is the sign-in's, kept whatever the request does; and on
    the embedded default a request whose transaction had written the trail kept the one write
    lock into its work, through a provider's round trip that found nothing else written."""
    city, country = location_from_headers(request.headers)
    record_session(
        db(),
        user_id=user_id,
        session_id=session_id,
        ip=client_ip(),
        user_agent=request.user_agent.string or None,
        city=city,
        country=country,
        impersonated_by=impersonator_from_claims(claims),
        now=services().clock.now(),
    )
    db().commit()


def install(app: Flask) -> None:
    app.before_request(guard)
