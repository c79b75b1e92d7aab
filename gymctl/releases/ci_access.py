"""The CI provider's OIDC token, as the protected release workflow presents it (spec A 5.5).

RS256 only, checked against the provider's key set (GYMCTL_RELEASE_CI_JWKS_URL, fetched and cached
like the identity provider's: gymctl.identity.tokens.KeySet) and its issuer
(GYMCTL_RELEASE_CI_ISSUER). Then every claim the operation was dispatched with must match
exactly: repository, repository_id, workflow, workflow_ref, ref, event_name, environment
(branded-app-internal) and the audience. The exact workflow and ref are bound by `workflow_ref`:
`job_workflow_ref` names only a reusable workflow, which any caller may run, so it proves nothing
and is never read.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import jwt

from gymctl.clock import Clock
from gymctl.config import Settings
from gymctl.errors import DomainError, conflict, unauthorized, unavailable
from gymctl.identity.tokens import KeySet, KeySetUnavailable, _parse_header
from gymctl.providers import http_client
from gymctl.releases import codes

ALGORITHM = "RS256"
LEEWAY = timedelta(seconds=5)
ENVIRONMENT = "branded-app-internal"
BOUND_CLAIMS = (
    "repository",
    "repository_id",
    "workflow",
    "workflow_ref",
    "ref",
    "event_name",
    "environment",
)


def expected_claims(settings: Settings) -> dict[str, str]:
    """What a dispatched operation's token must carry (bound onto the operation)."""
    expected = {
        "repository": settings.release_ci_repository,
        "repository_id": settings.release_ci_repository_id,
        "workflow": settings.release_ci_workflow,
        "workflow_ref": settings.release_ci_workflow_ref,
        "ref": settings.release_ci_ref,
        "event_name": settings.release_ci_event,
        "environment": ENVIRONMENT,
        "aud": settings.release_ci_audience,
    }
    missing = sorted(name for name, value in expected.items() if not value)
    if missing:
        raise conflict(
            codes.RELEASE_CI_NOT_CONFIGURED,
            "the release workflow's identity is not configured (GYMCTL_RELEASE_CI_*)",
            missing=missing,
        )
    return {name: str(value) for name, value in expected.items()}


class CiTokenVerifier:
    def __init__(self, *, issuer: str, key_set: KeySet, clock: Clock) -> None:
        self._issuer = issuer
        self._key_set = key_set
        self._clock = clock

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims once signature, issuer and time hold; 401 otherwise."""
        try:
            header = _parse_header(token)
        except DomainError:
            raise unauthorized(codes.CI_TOKEN_INVALID, "the CI token is not a JWT") from None
        if header.get("alg") != ALGORITHM:
            raise unauthorized(codes.CI_TOKEN_INVALID, "CI tokens must be signed with RS256")
        try:
            key = self._key_set.get(header.get("kid"))
        except KeySetUnavailable:
            raise unavailable(
                codes.CI_KEYS_UNAVAILABLE, "the CI provider's key set cannot be fetched"
            ) from None
        if key is None:
            raise unauthorized(codes.CI_TOKEN_INVALID, "the CI token's key is not in the key set")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                options={
                    "require": ["exp", "iat", "iss", "aud"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
        except jwt.PyJWTError:
            raise unauthorized(codes.CI_TOKEN_INVALID, "the CI token is invalid") from None
        if claims.get("iss") != self._issuer:
            raise unauthorized(codes.CI_TOKEN_INVALID, "the CI token has another issuer")
        try:
            exp, iat = int(claims["exp"]), int(claims["iat"])
            nbf = int(claims["nbf"]) if "nbf" in claims else None
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 parses to infinity
            raise unauthorized(codes.CI_TOKEN_INVALID, "exp, iat and nbf must be numbers") from None
        now, leeway = self._clock.now().timestamp(), LEEWAY.total_seconds()
        if now >= exp + leeway:
            raise unauthorized(codes.CI_TOKEN_EXPIRED, "the CI token has expired")
        if iat > now + leeway or (nbf is not None and nbf > now + leeway):
            raise unauthorized(codes.CI_TOKEN_INVALID, "the CI token is not valid yet")
        return claims


def mismatched(claims: dict[str, Any], expected: dict[str, str]) -> list[str]:
    """The bound claims the token does not carry exactly (names only, never values)."""
    wrong = [name for name in BOUND_CLAIMS if str(claims.get(name, "")) != expected[name]]
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if expected["aud"] not in audiences:
        wrong.append("aud")
    return wrong


@functools.cache
def _cached(issuer: str, jwks_url: str, clock: Clock) -> CiTokenVerifier:
    key_set = KeySet(jwks_url, None, clock, http_client.new_client())
    return CiTokenVerifier(issuer=issuer, key_set=key_set, clock=clock)


def ci_verifier(settings: Settings, clock: Clock) -> CiTokenVerifier:
    """One verifier (and key-set cache) per process, issuer and key-set URL."""
    return _cached(settings.release_ci_issuer, settings.release_ci_jwks_url, clock)
