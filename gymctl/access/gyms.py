"""Creating, onboarding and deleting a gym. Creation needs a claimable owner grant: a pending
owner invitation (no organization yet) sent by a platform admin to the caller's proven address
(spec A 7, OWNER_INVITATION_REQUIRED)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gymctl.access import codes
from gymctl.access.leaving import end_holdings
from gymctl.bridge.connection import wind_down
from gymctl.errors import DomainError, conflict, forbidden, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import (
    Invitation,
    InvitationStatus,
    Membership,
    MembershipStatus,
    Organization,
    Role,
    User,
)
from gymctl.models.identity import same_address
from gymctl.models.integrity import UniqueViolation, unique_violation

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")


def resolve_organization(session: Session, ref: str) -> Organization:
    """An organization by id or slug, for operators' commands."""
    try:
        found = session.get(Organization, uuid.UUID(ref))
    except ValueError:
        found = session.scalar(select(Organization).where(Organization.slug == ref))
    if found is None or found.deleted_at is not None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, f"no organization {ref}")
    return found


def create_gym(
    session: Session, user: User, *, name: str, slug: str, now: datetime
) -> tuple[Organization, bool]:
    """The gym created on the caller's owner grant, and whether it is new: the same name and
    address asked again by the person whose grant created that gym (a form sent twice, a retry
    after a lost answer) is that creation, answered again with nothing written."""
    grant = None
    if user.email and user.email_verified_at is not None:
        grant = session.scalar(
            select(Invitation)
            .where(
                Invitation.organization_id.is_(None),
                Invitation.role == Role.owner,
                Invitation.status == InvitationStatus.pending,
                Invitation.expires_at > now,
                same_address(Invitation.email, user.email),
            )
            .with_for_update()
            .limit(1)
        )
    if grant is None:
        created = _created_by(session, user, name=name, slug=slug)
        if created is not None:
            return created, False
        raise forbidden(codes.OWNER_INVITATION_REQUIRED, "creating a gym needs an owner invitation")
    if not (name or "").strip():
        raise unprocessable(codes.NAME_REQUIRED, "the gym needs a name")
    if not SLUG.fullmatch(slug or ""):
        raise unprocessable(codes.SLUG_INVALID, "lowercase letters, digits and hyphens")
    if session.scalar(select(Organization.id).where(Organization.slug == slug)) is not None:
        raise _slug_taken()
    organization = Organization(name=name.strip(), slug=slug, created_at=now)
    try:
        # Two creations at once both read the slug free: the second insert breaks the key (a
        # 500 on PostgreSQL) and answers as the check does, its savepoint writing nothing.
        with unique_violation("uq_organizations_slug"), session.begin_nested():
            session.add(organization)
    except UniqueViolation:
        raise _slug_taken() from None
    session.add(
        Membership(
            organization_id=organization.id,
            user_id=user.id,
            role=Role.owner,
            status=MembershipStatus.active,
            created_at=now,
            updated_at=now,
        )
    )
    grant.status = InvitationStatus.accepted
    grant.accepted_at = now
    grant.accepted_user_id = user.id
    grant.organization_id = organization.id
    emit(
        session,
        EventKind.audit,
        "organization.created",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization.id,
        organization_id=organization.id,
        actor_user_id=user.id,
        payload={"slug": slug, "ownerGrantId": str(grant.id)},
    )
    session.flush()
    return organization, True


def _created_by(session: Session, user: User, *, name: str, slug: str) -> Organization | None:
    """The live gym of this name and address that the user's own owner grant created."""
    return session.scalar(
        select(Organization)
        .join(Invitation, Invitation.organization_id == Organization.id)
        .where(
            Organization.slug == slug,
            Organization.name == (name or "").strip(),
            Organization.deleted_at.is_(None),
            Invitation.role == Role.owner,
            Invitation.status == InvitationStatus.accepted,
            Invitation.accepted_user_id == user.id,
        )
        .limit(1)
    )


def _slug_taken() -> DomainError:
    return conflict(codes.SLUG_TAKEN, "that address is taken")


def complete_onboarding(
    session: Session, organization: Organization, *, actor_user_id, now: datetime
) -> Organization:
    return _stamp_once(
        session,
        organization,
        "onboarding_completed_at",
        "organization.onboarding_completed",
        actor_user_id=actor_user_id,
        now=now,
    )


def delete_organization(
    session: Session, organization: Organization, *, actor_user_id, now: datetime
) -> Organization:
    """Soft delete: the gym disappears from every member's list and its links stop answering.
    What it serves ends with it, the first time: every membership's live plans and seats to
    come (leaving.end_holdings: the collector charged on for a gym no one could reach), and its
    pending invitations are revoked (one accepted later made a member of a deleted gym). Its
    bridge sends what that queued there, then stops (bridge.connection.wind_down)."""
    if organization.deleted_at is not None:
        return organization
    _stamp_once(
        session,
        organization,
        "deleted_at",
        "organization.deleted",
        actor_user_id=actor_user_id,
        now=now,
    )
    # Deleted first: a seat given up passes to no one (the waitlist of a deleted gym waits).
    # Every membership's lock before any seat's session (billing's order, in id order): locked
    # one by one as it went, a booking in flight held the next one shared while it waited for
    # a session whose seat the deletion had just given up, and PostgreSQL ended one of them.
    session.execute(
        select(Membership.id)
        .where(Membership.organization_id == organization.id)
        .order_by(Membership.id)
        .with_for_update()
    ).all()
    for membership in session.scalars(
        select(Membership)
        .where(Membership.organization_id == organization.id)
        .order_by(Membership.created_at, Membership.id)
    ).all():
        end_holdings(session, membership, actor_user_id=actor_user_id, now=now)
    session.execute(
        update(Invitation)
        .where(
            Invitation.organization_id == organization.id,
            Invitation.status == InvitationStatus.pending,
        )
        .values(status=InvitationStatus.revoked, revoked_at=now)
    )
    # Its bridge sends the ops queued above, polls nothing, then is disconnected.
    wind_down(session, organization.id, now=now)
    session.flush()
    return organization


def _stamp_once(
    session: Session, organization: Organization, column: str, event: str, *, actor_user_id, now
) -> Organization:
    """Set the organization's `column` to now and audit `event`, the first time only."""
    if getattr(organization, column) is None:
        setattr(organization, column, now)
        emit(
            session,
            EventKind.audit,
            event,
            at=now,
            aggregate_type="organization",
            aggregate_id=organization.id,
            organization_id=organization.id,
            actor_user_id=actor_user_id,
        )
    session.flush()
    return organization
