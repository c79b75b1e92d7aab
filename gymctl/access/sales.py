"""Sales grants (spec A 2.5): a staff-only capability beside the role, never instead of it.

Only owner and admin grant (the matrix's sales module); only an active coach receives one; a
member membership never holds one, and a leftover grant from an earlier staff role gives no
access. Owner and admin are implicit team managers. Granting changes neither the role nor billing
or member administration.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access import codes
from gymctl.access.memberships import membership_of, read_locked
from gymctl.errors import not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import Membership, MembershipStatus, Role, SalesGrant
from gymctl.models.integrity import UniqueViolation, unique_violation

SCOPES = ("own", "team")
LIVE_GRANT_KEY = "uq_sales_grants_live_membership"  # one live grant per membership


@dataclass(frozen=True)
class SalesAccess:
    scope: str
    manager: bool


def grant_sales(
    session: Session,
    actor: Membership,
    target_user_id: uuid.UUID,
    *,
    scope: str,
    manager: bool,
    now: datetime,
) -> SalesGrant:
    if scope not in SCOPES:
        raise unprocessable(codes.SALES_SCOPE_INVALID, f"scope must be one of {', '.join(SCOPES)}")
    target = membership_of(session, actor.organization_id, target_user_id)
    # Locked and read afresh: a demotion or a removal committing between this read and the
    # insert found no grant to end, and left one live on a member (back as a coach later, the
    # person had sales access no one gave the new role). Now it waits for the grant, or the
    # grant sees it and is refused.
    read_locked(session, target)
    if target.role is Role.member:
        raise unprocessable(
            codes.SALES_GRANT_MEMBER_REFUSED,
            "a member (customer) membership can never hold sales access",
        )
    if target.role is not Role.coach or target.status is not MembershipStatus.active:
        raise unprocessable(
            codes.SALES_GRANT_INELIGIBLE,
            "only an active coach receives a sales grant (owner and admin already manage sales)",
        )
    grant = _live_grant(session, target.id) or _first_grant(
        session, actor, target, scope=scope, manager=manager, now=now
    )
    grant.scope, grant.manager, grant.granted_by_user_id = scope, manager, actor.user_id
    emit(
        session,
        EventKind.audit,
        "sales.granted",
        at=now,
        aggregate_type="user",
        aggregate_id=target.user_id,
        organization_id=actor.organization_id,
        actor_user_id=actor.user_id,
        payload={"scope": scope, "manager": manager},
    )
    session.flush()
    return grant


def revoke_sales(
    session: Session, actor: Membership, grant_id: uuid.UUID, *, now: datetime
) -> SalesGrant:
    grant = session.get(SalesGrant, grant_id)
    if grant is None or grant.organization_id != actor.organization_id:
        raise not_found(codes.SALES_GRANT_NOT_FOUND, "no such sales grant")
    if grant.revoked_at is None:
        grant.revoked_at = now
        emit(
            session,
            EventKind.audit,
            "sales.revoked",
            at=now,
            aggregate_type="sales_grant",
            aggregate_id=grant.id,
            organization_id=actor.organization_id,
            actor_user_id=actor.user_id,
        )
    session.flush()
    return grant


def _first_grant(
    session: Session,
    actor: Membership,
    target: Membership,
    *,
    scope: str,
    manager: bool,
    now: datetime,
) -> SalesGrant:
    """The coach's live grant, inserted; or, when a grant at once (a double tap, a second
    admin) stored one first, that one (both read none, and the second insert broke the one
    live grant per membership: a 500). The caller writes the scope over it: the later wins."""
    grant = SalesGrant(
        organization_id=actor.organization_id,
        membership_id=target.id,
        scope=scope,
        manager=manager,
        granted_by_user_id=actor.user_id,
        created_at=now,
    )
    try:
        with unique_violation(LIVE_GRANT_KEY), session.begin_nested():
            session.add(grant)
    except UniqueViolation:
        return session.scalars(
            select(SalesGrant)
            .where(SalesGrant.membership_id == target.id, SalesGrant.revoked_at.is_(None))
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one()
    return grant


def _live_grant(session: Session, membership_id: uuid.UUID) -> SalesGrant | None:
    return session.scalar(
        select(SalesGrant).where(
            SalesGrant.membership_id == membership_id, SalesGrant.revoked_at.is_(None)
        )
    )


def sales_access(session: Session, membership: Membership) -> SalesAccess | None:
    """What sales access a membership has now, or None."""
    if membership.status is not MembershipStatus.active:
        return None
    if membership.role in (Role.owner, Role.admin):
        return SalesAccess(scope="team", manager=True)
    if membership.role is not Role.coach:
        return None  # a leftover grant from an earlier staff role gives nothing
    grant = _live_grant(session, membership.id)
    return SalesAccess(scope=grant.scope, manager=grant.manager) if grant else None
