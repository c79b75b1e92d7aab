"""The identity provider's webhook events with access's rules: a new login accepts the
invitations sent to its address (spec A 3, 5.3); a deleted login's memberships end, with their
plans and seats (leaving.end_holdings): hidden from every roster, the person was still charged
and no one could cancel. Composed here, above identity and access, so that identity never
imports access; both doors (the webhook, the demo) call this."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access.invitations import accept_on_sign_up
from gymctl.access.memberships import end_membership
from gymctl.config import Settings
from gymctl.identity import users
from gymctl.identity.auth import user_by_identity
from gymctl.models import Membership, MembershipStatus, Role


def user_created(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    user, outcome = users.user_created(session, data, now=now, settings=settings)
    if outcome != users.IGNORED:  # a deleted login accepts nothing
        accept_on_sign_up(session, user, now=now)
    return outcome


def user_deleted(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    outcome = users.user_deleted(session, data, now=now, settings=settings)
    user = user_by_identity(session, data["id"]) if outcome == "deleted" else None
    if user is not None:
        # An owner's stays: a gym is never left without one (a platform admin moves it).
        for membership in session.scalars(
            select(Membership).where(
                Membership.user_id == user.id,
                Membership.status != MembershipStatus.cancelled,
                Membership.role != Role.owner,
            )
        ).all():
            end_membership(session, membership, actor_user_id=None, now=now)
    return outcome


HANDLERS: dict[str, users.Handler] = {
    **users.HANDLERS,
    "user.created": user_created,
    "user.deleted": user_deleted,
}


def apply_identity_event(
    session: Session, delivery_id: str, event: Any, *, now: datetime, settings: Settings
) -> str:
    """Apply one verified delivery once (gymctl.identity.users.apply_identity_event)."""
    return users.apply_identity_event(
        session, delivery_id, event, handlers=HANDLERS, now=now, settings=settings
    )
