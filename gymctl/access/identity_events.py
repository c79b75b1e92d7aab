"""The identity provider's webhook events with access's rules: a new login accepts the
invitations sent to its address (spec A 3, 5.3); a deleted login's memberships end, with their
plans and seats (leaving.end_holdings): hidden from every roster, the person was still charged
and no one could cancel. Composed here, above identity and access, so that identity never
imports access; both doors (the webhook, the demo) call this."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gymctl.access.invitations import accept_on_sign_up
from gymctl.access.memberships import end_membership
from gymctl.config import Settings
from gymctl.db import advisory_lock
from gymctl.events import EventKind, emit
from gymctl.identity import users
from gymctl.identity.auth import user_by_identity
from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role, User


def _older(user: User | None, updated_at: int | None) -> bool:
    """The row already holds this snapshot or a newer one (deliveries are not ordered: one that
    failed is retried after those that followed it)."""
    return (
        user is not None
        and updated_at is not None
        and user.identity_synced_at is not None
        and updated_at <= user.identity_synced_at
    )


def _locked(session: Session, identity_id: str) -> User | None:
    """The login's row, read under the login's lock (to the end of the transaction): two
    deliveries of one login under different ids are applied one after the other, each seeing
    what the other committed, also when there is no row yet to lock."""
    advisory_lock(session, f"identity-login:{identity_id}")
    return session.scalar(
        select(User)
        .where(User.identity_id == identity_id)
        .execution_options(populate_existing=True)
    )


def _synced(user: User | None, updated_at: int | None) -> None:
    if user is not None and updated_at is not None:
        user.identity_synced_at = max(updated_at, user.identity_synced_at or 0)


def user_created(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    """Once per login: the same event under a new delivery id (a provider's resend, a replay
    from its dashboard) is ignored. One older than what user.updated already wrote keeps the
    row's fields and only signs the login up (s48)."""
    updated_at = users.updated_at_of(data)
    existing = _locked(session, data["id"])
    if existing is not None and existing.signed_up_at is not None:
        return users.IGNORED
    if _older(existing, updated_at) and existing.deleted_at is None:
        existing.signed_up_at = now
        emit(
            session,
            EventKind.analytics,
            "user_signed_up",
            at=now,
            aggregate_type="user",
            aggregate_id=existing.id,
            payload={"linked": True},
        )
        accept_on_sign_up(session, existing, now=now)
        return "linked"
    user, outcome = users.user_created(session, data, now=now, settings=settings)
    if outcome != users.IGNORED:  # a deleted login accepts nothing
        user.signed_up_at = now
        _synced(user, updated_at)
        accept_on_sign_up(session, user, now=now)
    return outcome


def user_updated(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    """A user object older than the one the row holds writes nothing (s48)."""
    updated_at = users.updated_at_of(data)
    if _older(_locked(session, data["id"]), updated_at):
        return users.IGNORED
    outcome = users.user_updated(session, data, now=now, settings=settings)
    if outcome != users.IGNORED:  # a deleted login's row is left as it was
        _synced(user_by_identity(session, data["id"]), updated_at)
    return outcome


def user_deleted(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    """Under the login's lock, as its creation and updates: a user.created waiting on the
    row the deletion writes went on with what it read before, and signed the deleted login up
    (its address back, a pending staff invitation accepted)."""
    _locked(session, data["id"])
    outcome = users.user_deleted(session, data, now=now, settings=settings)
    user = user_by_identity(session, data["id"]) if outcome == "deleted" else None
    if user is not None:
        # An owner's stays: a gym is never left without one (a platform admin appoints
        # another, which ends it: owner_appointment.appoint_owner).
        for membership in session.scalars(
            select(Membership).where(
                Membership.user_id == user.id,
                Membership.status != MembershipStatus.cancelled,
                Membership.role != Role.owner,
            )
        ).all():
            end_membership(session, membership, actor_user_id=None, now=now)
        # The link requests that name the login (a gym asking to link its profile of the
        # person): a deleted login never accepts one, nor is one emailed to it.
        session.execute(
            update(Invitation)
            .where(Invitation.user_id == user.id, Invitation.status == InvitationStatus.pending)
            .values(status=InvitationStatus.revoked, revoked_at=now)
        )
    return outcome


HANDLERS: dict[str, users.Handler] = {
    **users.HANDLERS,
    "user.created": user_created,
    "user.updated": user_updated,
    "user.deleted": user_deleted,
}


def apply_identity_event(
    session: Session, delivery_id: str, event: Any, *, now: datetime, settings: Settings
) -> str:
    """Apply one verified delivery once (gymctl.identity.users.apply_identity_event)."""
    return users.apply_identity_event(
        session, delivery_id, event, handlers=HANDLERS, now=now, settings=settings
    )
