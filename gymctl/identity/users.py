"""Local user rows mirrored from the identity provider (spec A 2.1, 6.1)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gymctl.bridge import mirror
from gymctl.errors import DomainError
from gymctl.events import EventKind, emit
from gymctl.identity.auth import user_by_identity
from gymctl.models import IdentityWebhookDelivery, User

log = logging.getLogger("gymctl.identity")


def find_or_create(
    session: Session,
    identity_id: str,
    *,
    now: datetime,
    email: str | None = None,
    image_url: str | None = None,
    link_email: bool = False,
) -> tuple[User, bool]:
    """The row of a login, creating it when missing; (user, created).

    With `link_email` (the provider says the address is verified) an unlinked gym-created row
    under that address is linked instead of creating a second person. An unproven address never
    links (spec A 5.3). Concurrent callers for one login end with one row: the unique
    identity_id decides, and the loser reads the winner's row.
    """
    existing = user_by_identity(session, identity_id)
    if existing is not None:
        return existing, False
    if link_email and email:
        unlinked = session.scalar(
            select(User)
            .where(func.lower(User.email) == email.lower(), User.identity_id.is_(None))
            .where(User.deleted_at.is_(None))
            .order_by(User.created_at)
            .limit(1)
        )
        if unlinked is not None:
            unlinked.identity_id = identity_id
            unlinked.image_url = image_url or unlinked.image_url
            unlinked.updated_at = now
            session.flush()
            return unlinked, False
    user = User(
        identity_id=identity_id, email=email, image_url=image_url, created_at=now, updated_at=now
    )
    try:
        with session.begin_nested():
            session.add(user)
    except IntegrityError:
        winner = user_by_identity(session, identity_id)
        if winner is None:
            raise
        return winner, False
    return user, True


def _primary_email(data: dict[str, Any]) -> tuple[str | None, bool]:
    """(address, verified) of the provider user's primary email."""
    addresses = [a for a in data.get("email_addresses") or [] if isinstance(a, dict)]
    primary_id = data.get("primary_email_address_id")
    chosen = next((a for a in addresses if a.get("id") == primary_id), None)
    chosen = chosen or (addresses[0] if addresses else None)
    if chosen is None:
        return None, False
    verification = chosen.get("verification") or {}
    return chosen.get("email_address"), verification.get("status") == "verified"


def _subject(data: dict[str, Any]) -> str:
    subject = data.get("id")
    if not isinstance(subject, str) or not subject:
        raise DomainError("webhook_payload_invalid", "the event has no user id", status=400)
    return subject


def user_created(session: Session, data: dict[str, Any], *, now: datetime) -> str:
    email, verified = _primary_email(data)
    user, created = find_or_create(
        session,
        _subject(data),
        now=now,
        email=email,
        image_url=data.get("image_url"),
        link_email=verified,
    )
    if not created:
        user.email = email or user.email
        user.image_url = data.get("image_url") or user.image_url
        user.updated_at = now
    _mirror_verification(user, verified, now=now)
    emit(
        session,
        EventKind.analytics,
        "user_signed_up",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        payload={"linked": not created},
    )
    from gymctl.access.invitations import accept_on_sign_up  # access builds on identity

    accept_on_sign_up(session, user, now=now)
    return "created" if created else "linked"


def _mirror_verification(user: User, verified: bool, *, now: datetime) -> None:
    """The provider's word proves an address; it never un-proves one an operator confirmed."""
    if verified and user.email_verified_at is None:
        user.email_verified_at = now
        user.email_verified_by = "provider"


def user_updated(session: Session, data: dict[str, Any], *, now: datetime) -> str:
    email, verified = _primary_email(data)
    user, created = find_or_create(
        session, _subject(data), now=now, email=email, image_url=data.get("image_url")
    )
    if (user.email or "").lower() != (email or "").lower():
        user.email_verified_at = None  # a new address is unproven until the provider says so
        user.email_verified_by = None
    _mirror_verification(user, verified, now=now)
    user.email = email
    user.image_url = data.get("image_url")
    user.updated_at = now
    mirror.member_updated(session, user, now=now)
    return "created" if created else "mirrored"


def user_deleted(session: Session, data: dict[str, Any], *, now: datetime) -> str:
    """Soft-delete without calling the provider again (it is the one that deleted the login)."""
    user = user_by_identity(session, _subject(data))
    if user is None:
        return "ignored"
    if user.deleted_at is None:
        user.deleted_at = now
        user.updated_at = now
        emit(
            session,
            EventKind.domain,
            "user.deleted",
            at=now,
            aggregate_type="user",
            aggregate_id=user.id,
        )
    return "deleted"


HANDLERS = {
    "user.created": user_created,
    "user.updated": user_updated,
    "user.deleted": user_deleted,
}


def _kept_strings(event: dict[str, Any]) -> list[Any]:
    """The values of an event that can reach a column: the type and the user's own fields."""
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    kept = [event["type"], data.get("id"), data.get("image_url")]
    kept.append(data.get("primary_email_address_id"))
    for address in data.get("email_addresses") or []:
        if isinstance(address, dict):
            kept += [address.get("id"), address.get("email_address")]
    return kept


def apply_identity_event(session: Session, delivery_id: str, event: Any, *, now: datetime) -> str:
    """Apply one verified delivery once: a replayed delivery id is acknowledged, not re-applied.

    Returns the outcome (created, linked, mirrored, deleted, ignored, duplicate).
    """
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise DomainError("webhook_payload_invalid", "the body is not a provider event", status=400)
    if any(isinstance(value, str) and "\x00" in value for value in _kept_strings(event)):
        # PostgreSQL text cannot hold NUL, and no provider sends one in the fields we keep.
        raise DomainError("webhook_payload_invalid", "the event contains a NUL character")
    event_type = event["type"]
    handler = HANDLERS.get(event_type)
    data = event.get("data")
    if handler is not None and not isinstance(data, dict):
        raise DomainError("webhook_payload_invalid", "the event has no data object", status=400)
    if session.get(IdentityWebhookDelivery, delivery_id) is not None:
        return "duplicate"
    # The delivery row goes in first: a concurrent delivery of the same id waits on its key and
    # then finds it taken; if this transaction fails, the row goes with it and a retry applies.
    delivery = IdentityWebhookDelivery(
        id=delivery_id, event_type=event_type[:64], received_at=now, outcome="applying"
    )
    try:
        with session.begin_nested():
            session.add(delivery)
    except IntegrityError:
        return "duplicate"
    outcome = handler(session, data, now=now) if handler else "ignored"
    delivery.outcome = outcome
    log.info("identity event %s applied: %s", event_type, outcome)
    return outcome
