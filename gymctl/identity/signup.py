"""What a provider user object says about its sign-up (spec A 5.3, 6.1): the primary address,
whether it counts as proven, and the join link it came from.

A sign-up through a join ticket handed to the browser is unproven whatever the provider's flag
says: the ticket let the browser skip the proof. The web app passes the ticket as
`unsafe_metadata.joinTicket` (client-writable, so only our signature is believed); a ticket that
is present but not ours still makes the address unproven, it just names no gym.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gymctl.access import tickets
from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.models import User

JOIN_ORIGIN = "join_link"


@dataclass(frozen=True)
class SignUp:
    email: str | None
    provider_verified: bool
    join_ticket: bool  # a join ticket came with the sign-up (valid or not)
    organization_id: uuid.UUID | None = None
    join_link_id: uuid.UUID | None = None

    @property
    def proven(self) -> bool:
        return self.provider_verified and not self.join_ticket


def primary_email(data: dict[str, Any]) -> tuple[str | None, bool]:
    """(address, verified) of the provider user's primary email."""
    addresses = [a for a in data.get("email_addresses") or [] if isinstance(a, dict)]
    primary_id = data.get("primary_email_address_id")
    chosen = next((a for a in addresses if a.get("id") == primary_id), None)
    chosen = chosen or (addresses[0] if addresses else None)
    if chosen is None:
        return None, False
    verification = chosen.get("verification") or {}
    # Surrounding whitespace is no part of an address: kept padded, the row was found by no
    # lookup of its address (every door stores and asks for the address stripped).
    address = chosen.get("email_address")
    address = (address.strip() or None) if isinstance(address, str) else address
    return address, verification.get("status") == "verified"


def read_sign_up(settings: Settings, data: dict[str, Any], *, now: datetime) -> SignUp:
    email, verified = primary_email(data)
    metadata = data.get("unsafe_metadata")
    ticket = metadata.get("joinTicket") if isinstance(metadata, dict) else None
    if ticket is None:
        return SignUp(email, verified, join_ticket=False)
    try:
        # Provenance, not permission: an expired ticket still says where the login came from.
        claims = tickets.verify(settings, tickets.JOIN, str(ticket), now=now, check_expiry=False)
        link_id, org_id = uuid.UUID(claims.subject), uuid.UUID(str(claims.claims["org"]))
    except (DomainError, KeyError, ValueError):
        return SignUp(email, verified, join_ticket=True)
    return SignUp(email, verified, True, organization_id=org_id, join_link_id=link_id)


def record_sign_up(user: User, sign_up: SignUp, *, now: datetime) -> None:
    """Write the origin once (a gym-created or already-traced row keeps its own) and mirror a
    proven address."""
    if sign_up.join_ticket and user.signup_origin == "self" and user.signup_join_link_id is None:
        user.signup_origin = JOIN_ORIGIN
        user.signup_organization_id = sign_up.organization_id
        user.signup_join_link_id = sign_up.join_link_id
        user.updated_at = now
    if sign_up.proven:
        mirror_verification(user, True, now=now)


def mirror_verification(user: User, verified: bool, *, now: datetime) -> None:
    """The provider's word proves an address; it never un-proves one an operator confirmed, and
    it never proves a join-ticket login's address (only an operator does, spec A 5.3)."""
    if user.signup_origin == JOIN_ORIGIN:
        return
    if verified and user.email_verified_at is None:
        user.email_verified_at = now
        user.email_verified_by = "provider"
