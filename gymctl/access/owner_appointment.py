"""A platform admin appoints the owner of a gym that has none (spec A 2.7: one owner per
organization, removable only by a platform admin). Once the owner was removed
(`DELETE /admin/organizations/:orgId/members/:userId`) or their login deleted (the identity
provider's user.deleted keeps an owner's membership: access.identity_events), nothing else could
make anyone owner: a transfer (memberships.change_role) needs the owner as its caller, an owner
invitation needs the owner's grant, and an owner grant only creates a new gym. Every owner-only
act of the gym (deleting it, onboarding, erasure, the payment integration) was out of reach.

Both doors (`PUT /admin/organizations/:orgId/owner`, `gymctl members appoint-owner`) call
`appoint_owner`. A gym with a live owner is refused (409 owner_exists): moving ownership away
from a live owner stays the owner's own transfer. An owner with no login (a profile the desk
made, handed the gym by a transfer before s55 refused it) is no owner anyone can act as: the
appointment replaces it too."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, lazyload

from gymctl.access import codes
from gymctl.access.memberships import (
    end_membership,
    membership_of,
    refuse_owner_without_login,
    set_role,
)
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Membership, MembershipStatus, Organization, Role, User


@dataclass(frozen=True)
class Appointment:
    membership: Membership
    changed: bool  # False: the person was the owner already (a repeat), nothing was written
    # The owner replaced: a deleted login's (its membership ended now) or a profile's with no
    # login (kept as admin)
    former_owner_user_id: uuid.UUID | None


def locked_organization(session: Session, org_id: uuid.UUID) -> Organization:
    """The gym's row under FOR NO KEY UPDATE, read as it is now: the owner slot. Two
    appointments at once both read "no owner" and each made its person owner; the second now
    waits here and reads the first's owner. First in billing's fixed order (organization,
    membership, subscription: billing.resolution.lock_organization takes the same lock), and
    inserts that reference the gym are not blocked. A deletion (which writes the row) commits
    before or after, never between the read and the write. On the embedded default the
    transaction holds the database's one write lock already (no FOR UPDATE there)."""
    organization = session.scalar(
        select(Organization)
        .where(Organization.id == org_id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )
    if organization is None or organization.deleted_at is not None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no such organization")
    return organization


def _lock_memberships(session: Session, ids: set[uuid.UUID]) -> None:
    """The rows locked in id order and read again (change_role's order), without their
    organization, which the mapping joins in: FOR UPDATE refuses an outer join."""
    session.scalars(
        select(Membership)
        .where(Membership.id.in_(ids))
        .order_by(Membership.id)
        .options(lazyload(Membership.organization))
        .with_for_update(of=Membership)
        .execution_options(populate_existing=True)
    ).all()


def _live_user(session: Session, user_id: uuid.UUID) -> bool:
    user = session.get(User, user_id, populate_existing=True)
    return user is not None and user.deleted_at is None


def _signs_in(session: Session, user_id: uuid.UUID) -> bool:
    """A live row with a login: someone can act as this owner."""
    return _live_user(session, user_id) and session.get(User, user_id).identity_id is not None


def appoint_owner(
    session: Session,
    organization: Organization | uuid.UUID,
    user_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Appointment:
    """Make the person's active membership of a gym without an owner anyone can act as its owner.

    Refusals, each before anything is written: a deleted gym (404 organization_not_found); a
    person with no membership of this gym (404 member_not_found); a membership that is not
    active (invited or pending an invitation: they have not accepted; suspended; ended) or whose
    login is deleted (409 member_not_active); an owner with a live login who is someone else
    (409 owner_exists); a person who never signed in (409 owner_needs_login). The person already
    the owner is a repeat: answered as it is (changed False).

    An owner whose login the identity provider deleted is no owner anyone can act as: that
    membership ends (memberships.end_membership, as user.deleted ends every other one) and is
    audited as removed by the platform admin. Nor is an owner with no login (a desk profile): a
    member of the gym, it stays one as admin (what a transfer leaves the former owner), audited
    `membership.role_changed` with reason `owner_without_login`. The appointment is what a role
    change writes: the sales grant ends (owner is an implicit team manager), classes are
    released if the role may not coach (never for owner), and `membership.role_changed` is
    audited with the actor (`ownerAppointed`, `platformAdmin`: the ownership trail lists it)."""
    org_id = organization.id if isinstance(organization, Organization) else organization
    locked_organization(session, org_id)
    target = membership_of(session, org_id, user_id)
    owners = session.scalars(
        select(Membership).where(
            Membership.organization_id == org_id,
            Membership.role == Role.owner,
            Membership.status == MembershipStatus.active,
        )
    ).all()
    _lock_memberships(session, {target.id, *(owner.id for owner in owners)})
    owners = [o for o in owners if o.role is Role.owner and o.status is MembershipStatus.active]
    acting = [o for o in owners if _signs_in(session, o.user_id)]
    if target in acting:
        return Appointment(target, changed=False, former_owner_user_id=None)
    if acting:
        raise conflict(
            codes.OWNER_EXISTS, "the gym has an owner; only the owner transfers ownership"
        )
    if target.status is not MembershipStatus.active or not _live_user(session, target.user_id):
        raise conflict(codes.MEMBER_NOT_ACTIVE, "only an active member can be appointed owner")
    refuse_owner_without_login(session, target.user_id)
    former = None
    for gone in owners:  # at most one (one owner per organization)
        former = gone.user_id
        if _live_user(session, gone.user_id):  # a profile with no login
            set_role(
                session,
                gone,
                Role.admin,
                actor_user_id=actor_user_id,
                now=now,
                audit={"platformAdmin": True, "reason": "owner_without_login"},
            )
            continue
        ended = end_membership(session, gone, actor_user_id=actor_user_id, now=now)
        emit(
            session,
            EventKind.audit,
            "membership.removed",
            at=now,
            aggregate_type="user",
            aggregate_id=gone.user_id,
            organization_id=org_id,
            actor_user_id=actor_user_id,
            payload={
                "role": gone.role.value,
                "platformAdmin": True,
                "reason": "owner_login_deleted",
                **ended,
            },
        )
    set_role(
        session,
        target,
        Role.owner,
        actor_user_id=actor_user_id,
        now=now,
        audit={
            "ownershipTransferred": False,
            "ownerAppointed": True,
            "platformAdmin": True,
            "formerOwnerUserId": str(former) if former else None,
        },
    )
    session.flush()
    return Appointment(target, changed=True, former_owner_user_id=former)
