"""Memberships: resolving the caller's, the roster, role changes and removal (spec A 2.3, 2.7,
2.8). The single-owner rules live here: an organization has at most one owner, ownership
moves from a live owner only by their transfer, and only a platform admin removes an owner (and
appoints one for a gym left without: access.owner_appointment)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, lazyload

from gymctl.access import codes, erased
from gymctl.access.grants import require_grant, require_role_change
from gymctl.access.leaving import end_holdings, lock_leaving
from gymctl.bookings import schedule
from gymctl.errors import conflict, forbidden, not_found
from gymctl.events import EventKind, emit
from gymctl.models import (
    Invitation,
    InvitationStatus,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
    SalesGrant,
    User,
)
from gymctl.models.identity import same_address


def resolve_membership(session: Session, org_id: uuid.UUID, user: User | None) -> Membership:
    """The caller's active membership in a live organization; 404 otherwise (the caller may not
    learn whether the organization exists)."""
    if user is not None and user.deleted_at is None:
        membership = session.scalar(
            select(Membership)
            .join(Organization)
            .where(
                Membership.organization_id == org_id,
                Membership.user_id == user.id,
                Membership.status == MembershipStatus.active,
                Organization.deleted_at.is_(None),
                Organization.status == OrganizationStatus.active,
            )
        )
        if membership is not None:
            return membership
    raise not_found(codes.ORGANIZATION_NOT_FOUND, "no active membership in that organization")


def membership_of(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> Membership:
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == org_id, Membership.user_id == user_id
        )
    )
    if membership is None:
        raise not_found(codes.MEMBER_NOT_FOUND, "no such member in this organization")
    return membership


def read_locked(session: Session, membership: Membership) -> None:
    """The membership's row locked and read again, as the commit it waited for left it (without
    its organization, which the mapping joins in: FOR UPDATE refuses an outer join)."""
    session.scalar(
        select(Membership)
        .where(Membership.id == membership.id)
        .options(lazyload(Membership.organization))
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def live_membership_of(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> Membership:
    """The member's membership, to collect something new on it (their national id, a plan sold
    at the desk): locked and read as it is now, so a removal or an erasure committing meanwhile
    is seen. One that ended (cancelled: removed, erased, the login or the gym deleted) is 409
    member_not_active, as a role change and the desk's charge answer: the gym no longer serves
    the person, an erased member's membership would hold a national id again beside "Erased
    member", and a plan sold to them would renew or fall into debt on someone gone. Live
    memberships (active, invited, pending_invitation, suspended) are written as before."""
    membership = membership_of(session, org_id, user_id)
    read_locked(session, membership)
    if membership.status is MembershipStatus.cancelled:
        raise conflict(codes.MEMBER_NOT_ACTIVE, "the membership ended; nothing is collected on it")
    return membership


def owner_of(session: Session, org_id: uuid.UUID) -> Membership | None:
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == org_id,
            Membership.role == Role.owner,
            Membership.status == MembershipStatus.active,
        )
    )


def roster(session: Session, org_id: uuid.UUID) -> list[dict[str, Any]]:
    """The member roster: who (as this gym shows them: erased.py), role, status, and whether
    the login is still Unproven."""
    rows = session.execute(
        select(Membership, User)
        .join(User, User.id == Membership.user_id)
        .where(Membership.organization_id == org_id, User.deleted_at.is_(None))
        .order_by(Membership.created_at, Membership.id)
    ).all()
    gone = erased.erased_user_ids(session, org_id, (membership for membership, _ in rows))
    return [
        {
            "userId": str(user.id),
            **erased.shown(user, erased=user.id in gone),
            "role": membership.role.value,
            "status": membership.status.value,
            "login": "linked" if user.identity_id else "unproven",
            "invitationHeld": membership.invitation_held,
        }
        for membership, user in rows
    ]


def active_member_count(session: Session, org_id: uuid.UUID) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(Membership)
            .where(
                Membership.organization_id == org_id,
                Membership.role == Role.member,
                Membership.status == MembershipStatus.active,
            )
        )
        or 0
    )


def change_role(
    session: Session, actor: Membership, target_user_id: uuid.UUID, new_role: Role, *, now: datetime
) -> Membership:
    """Change a member's role. Giving the owner role transfers ownership: the caller (the owner)
    becomes an admin in the same transaction, so there is always exactly one owner. A role
    that may not coach (member) leaves the classes to come they coach without a coach, as
    leaving does (schedule.release_coach): a class is coached by active staff."""
    target = membership_of(session, actor.organization_id, target_user_id)
    if target.id == actor.id:
        raise forbidden(codes.ROLE_CHANGE_SELF, "you cannot change your own role")
    # Both rows locked (in id order) and read as they are now: two transfers at once each read
    # the caller as the owner, and the gym had two owners (spec A 2.7: one per organization).
    session.scalars(
        select(Membership)
        .where(Membership.id.in_((actor.id, target.id)))
        .order_by(Membership.id)
        .with_for_update(of=Membership)
        .execution_options(populate_existing=True)
    ).all()
    if actor.status is not MembershipStatus.active:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no active membership in that organization")
    require_role_change(actor.role, target.role, new_role)
    if target.status is not MembershipStatus.active:
        raise conflict(codes.MEMBER_NOT_ACTIVE, "only an active member's role can change")
    if new_role is Role.owner:
        refuse_owner_without_login(session, target.user_id)
        actor.role = Role.admin
        actor.updated_at = now
    set_role(
        session,
        target,
        new_role,
        actor_user_id=actor.user_id,
        now=now,
        audit={"ownershipTransferred": new_role is Role.owner},
    )
    session.flush()
    return target


def refuse_owner_without_login(session: Session, user_id: uuid.UUID) -> None:
    """409 owner_needs_login for a person who has never signed in (a profile the desk made): as
    owner, no one could act for the gym (the former owner, now an admin, cannot transfer it
    back, and a platform admin's appointment finds an owner in place), until that person signs
    up with the profile's address, which they may never do."""
    user = session.get(User, user_id)
    if user is None or user.identity_id is None:
        raise conflict(
            codes.OWNER_NEEDS_LOGIN,
            "ownership goes to a person who signs in: this profile has no login yet (invite "
            "them, and make them owner once they have accepted)",
        )


def set_role(
    session: Session,
    target: Membership,
    new_role: Role,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    audit: dict[str, Any],
) -> None:
    """What a role change writes, once it is allowed and its rows are locked: the role, the
    sales grant ended (owner and admin manage sales anyway; a grant is a coach's), the classes
    released when the new role may not coach, and the audit `membership.role_changed` (its
    data with `audit`)."""
    previous = target.role
    target.role = new_role
    target.updated_at = now
    end_sales_grant(session, target, actor_user_id=actor_user_id, now=now)
    uncoached = schedule.release_coach(session, target.organization_id, target.user_id, now=now)
    emit(
        session,
        EventKind.audit,
        "membership.role_changed",
        at=now,
        aggregate_type="user",
        aggregate_id=target.user_id,
        organization_id=target.organization_id,
        actor_user_id=actor_user_id,
        payload={
            "from": previous.value,
            "to": new_role.value,
            **audit,
            "sessionsUncoached": uncoached,
        },
    )


def remove_member(
    session: Session,
    org_id: uuid.UUID,
    target_user_id: uuid.UUID,
    *,
    actor: Membership | None,
    actor_user_id: uuid.UUID,
    platform_admin: bool = False,
    now: datetime,
) -> Membership:
    """End a membership (status cancelled). The owner is removable only by a platform admin.
    One that ended already (removed, erased, the login deleted) is a repeat: after the same
    refusals, it answers as it is and nothing is written (no second membership.removed, no
    second end queued to the bridge). Its row is locked and read again first (with the rows
    lock_leaving takes, in its order), so a removal that waited on another sees it ended."""
    target = membership_of(session, org_id, target_user_id)
    lock_leaving(session, target, now=now)
    read_locked(session, target)
    if target.role is Role.owner and not platform_admin:
        raise forbidden(codes.OWNER_PROTECTED, "only a platform admin can remove the owner")
    if actor is not None and not platform_admin:
        if target.id == actor.id:
            raise forbidden(codes.REMOVE_SELF, "leave the organization from your own settings")
        require_grant(actor.role, target.role)
    if target.status is MembershipStatus.cancelled:
        return target
    ended = end_membership(session, target, actor_user_id=actor_user_id, now=now)
    emit(
        session,
        EventKind.audit,
        "membership.removed",
        at=now,
        aggregate_type="user",
        aggregate_id=target.user_id,
        organization_id=org_id,
        actor_user_id=actor_user_id,
        payload={"role": target.role.value, "platformAdmin": platform_admin, **ended},
    )
    session.flush()
    return target


def end_membership(
    session: Session, membership: Membership, *, actor_user_id: uuid.UUID | None, now: datetime
) -> dict[str, int]:
    """The membership ends (cancelled), with its sales grant, its live plans and its seats to
    come (leaving.end_holdings) and the gym's invitations still pending for the person; the
    counts of those. Every membership its seats touch is locked first (lock_leaving). One
    already ended (an erasure's repeat) keeps the instant it ended as its updated_at."""
    lock_leaving(session, membership, now=now)
    if membership.status is not MembershipStatus.cancelled:
        membership.status = MembershipStatus.cancelled
        membership.updated_at = now
    end_sales_grant(session, membership, actor_user_id=actor_user_id, now=now)
    ended = end_holdings(session, membership, actor_user_id=actor_user_id, now=now)
    return {**ended, "invitationsRevoked": revoke_pending_invitations(session, membership, now=now)}


def revoke_pending_invitations(session: Session, membership: Membership, *, now: datetime) -> int:
    """The gym's invitations still pending for the membership's person are revoked with it: the
    one that made a pending_invitation membership, accepted later, made the removed person a
    member again. Taken after the membership's row lock (end_holdings), in erasure's order
    (memberships, then invitations). A link request naming the person as the login is about
    the gym's other profile of them, whose own membership stays as it is."""
    person = session.get(User, membership.user_id)
    match = [
        (Invitation.user_id == membership.user_id) & Invitation.profile_user_id.is_(None),
        Invitation.profile_user_id == membership.user_id,
    ]
    if person is not None and person.email:
        # Sent before the address had a login: it names the person by address only.
        match.append(Invitation.user_id.is_(None) & same_address(Invitation.email, person.email))
    return session.execute(
        update(Invitation)
        .where(
            Invitation.organization_id == membership.organization_id,
            Invitation.status == InvitationStatus.pending,
            or_(*match),
        )
        .values(status=InvitationStatus.revoked, revoked_at=now)
        .execution_options(synchronize_session="fetch")
    ).rowcount


def end_sales_grant(
    session: Session, membership: Membership, *, actor_user_id: uuid.UUID | None, now: datetime
) -> None:
    """Spec A 2.5: a sales grant is held by an active coach only, so it ends with the staff
    role (or the membership); coming back as a coach later does not revive it."""
    if membership.role is Role.coach and membership.status is not MembershipStatus.cancelled:
        return
    session.flush()
    grant = session.scalar(
        select(SalesGrant).where(
            SalesGrant.membership_id == membership.id, SalesGrant.revoked_at.is_(None)
        )
    )
    if grant is None:
        return
    grant.revoked_at = now
    emit(
        session,
        EventKind.audit,
        "sales.ended",
        at=now,
        aggregate_type="sales_grant",
        aggregate_id=grant.id,
        organization_id=membership.organization_id,
        actor_user_id=actor_user_id,
        payload={"role": membership.role.value, "status": membership.status.value},
    )
