"""Signed tickets: invitation tokens and join tickets, HS256 JWTs under INVITE_SECRET.

Each is bound to its purpose (audience), carries an expiry, and names the row it opens; single use
is enforced by that row's state (an accepted invitation cannot be accepted again) and, for
invitations, by a version that a resend bumps, so an older email's link stops working.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jwt

from gymctl.access import codes
from gymctl.config import ConfigError, Settings
from gymctl.errors import gone, internal_error, invalid

INVITATION = "gymctl:invitation"
JOIN = "gymctl:join"


@dataclass(frozen=True)
class Ticket:
    subject: str
    version: int
    claims: dict[str, Any]


def invite_secret(settings: Settings) -> str:
    """INVITE_SECRET; outside production a per-home secret is made once so a checkout runs."""
    try:
        return settings.home_secret("INVITE_SECRET", settings.invite_secret).decode()
    except ConfigError:
        raise internal_error(codes.INVITE_SECRET_MISSING, "INVITE_SECRET is not set") from None


def sign(
    settings: Settings,
    purpose: str,
    subject: str,
    *,
    now: datetime,
    expires_at: datetime,
    version: int = 1,
    **claims: Any,
) -> str:
    payload = {
        "aud": purpose,
        "sub": subject,
        "ver": version,
        "iat": int(now.timestamp()),
        "exp": int(expires_at.timestamp()),
        **claims,
    }
    return jwt.encode(payload, invite_secret(settings), algorithm="HS256")


def verify(
    settings: Settings, purpose: str, token: str, *, now: datetime, check_expiry: bool = True
) -> Ticket:
    """The ticket's subject and version; 400 ticket_invalid or 410 ticket_expired otherwise
    (`check_expiry` off: reading where a login came from, not letting anyone in)."""
    try:
        claims = jwt.decode(
            token,
            invite_secret(settings),
            algorithms=["HS256"],
            audience=purpose,
            # Time is checked below against the injectable clock, not the wall clock.
            options={
                "require": ["aud", "sub", "exp", "ver"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.PyJWTError:
        raise invalid(codes.TICKET_INVALID, "the link is not valid") from None
    if check_expiry and int(claims["exp"]) <= now.timestamp():
        raise gone(codes.TICKET_EXPIRED, "the link has expired")
    return Ticket(subject=str(claims["sub"]), version=int(claims["ver"]), claims=claims)
