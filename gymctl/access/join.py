"""Join links (spec A 2.9, 4, 5.3): eligibility, the public join flow, failed checkouts.

A link answers only while the organization allows joining, the link is active and not revoked.
A join ticket is never issued for an address that already has an account (join.blocked,
account_exists): that person signs in and joins signed-in, where a held invitation answers 403
INVITATION_HELD.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids, ratelimit
from gymctl.access import codes, tickets
from gymctl.access.invitations import (
    Outreach,
    find_account,
    frontend,
    linked_login,
    normalize_email,
)
from gymctl.access.memberships import end_sales_grant
from gymctl.bridge import mirror
from gymctl.db import locked_row
from gymctl.errors import conflict, forbidden, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.identity.users import address_keys
from gymctl.models import (
    JoinLink,
    JoinSubmission,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Plan,
    Role,
    Task,
    User,
)
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.tasks import file_task

JOIN_TICKET_LIFETIME = timedelta(days=2)
PAYMENT_FOLLOW_UP_DUE = timedelta(hours=4)
MEMBERSHIP_KEY = "uq_memberships_organization_id_user_id"  # one membership per gym and person
# What anyone holding a link may trigger, per (link, organization) in ANONYMOUS_WINDOW: a join
# form costs a provider account lookup, a failed checkout files an urgent staff task.
ANONYMOUS_WINDOW = timedelta(minutes=10)
ANONYMOUS_LIMITS = {"request_invite": (20, 60), "checkout_failed": (5, 20)}


def create_join_link(
    session: Session,
    org_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    label: str | None,
    plan_id: uuid.UUID | None,
    now: datetime,
) -> JoinLink:
    if plan_id is not None:
        require_own_plan(session, org_id, plan_id)
    link = JoinLink(
        organization_id=org_id,
        token=ids.token(18),
        label=label,
        plan_id=plan_id,
        created_by_user_id=actor_user_id,
        created_at=now,
    )
    session.add(link)
    session.flush()
    return link


def require_own_plan(session: Session, org_id: uuid.UUID, plan_id: uuid.UUID) -> Plan:
    """A stored plan must be a live plan of this organization; an unknown plan and another
    gym's plan get the same answer (the caller learns nothing about other gyms)."""
    plan = session.get(Plan, plan_id)
    if plan is None or plan.organization_id != org_id or plan.deleted_at is not None:
        raise unprocessable(
            codes.JOIN_LINK_PLAN_INVALID, "planId must name one of this gym's plans"
        )
    return plan


def _link(session: Session, org_id: uuid.UUID, link_id: uuid.UUID) -> JoinLink:
    link = session.get(JoinLink, link_id)
    if link is None or link.organization_id != org_id:
        raise not_found(codes.JOIN_LINK_NOT_FOUND, "no such join link")
    return link


def set_link_active(
    session: Session,
    org_id: uuid.UUID,
    link_id: uuid.UUID,
    active: bool,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> JoinLink:
    """Pause (the link answers 404 meanwhile) or resume a link; revoking is for good."""
    link = _link(session, org_id, link_id)
    if link.revoked_at is not None:
        raise conflict(codes.JOIN_LINK_REVOKED, "a revoked join link cannot be paused or resumed")
    if link.active != active:
        link.active = active
        _audit_link(
            session, link, "join_link.resumed" if active else "join_link.paused", actor_user_id, now
        )
    session.flush()
    return link


def set_join_enabled(
    session: Session,
    organization: Organization,
    enabled: bool,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> Organization:
    """organizations.join_enabled (spec A 2.9): off makes every join link answer 404."""
    if organization.join_enabled != enabled:
        organization.join_enabled = enabled
        emit(
            session,
            EventKind.audit,
            "organization.join_enabled_changed",
            at=now,
            aggregate_type="organization",
            aggregate_id=organization.id,
            organization_id=organization.id,
            actor_user_id=actor_user_id,
            payload={"joinEnabled": enabled},
        )
    session.flush()
    return organization


def describe(link: JoinLink) -> dict[str, Any]:
    return {
        "id": str(link.id),
        "token": link.token,
        "label": link.label,
        "active": link.active,
        "revoked": link.revoked_at is not None,
        "planId": str(link.plan_id) if link.plan_id else None,
        "createdAt": link.created_at.isoformat(),
    }


def list_join_links(session: Session, org_id: uuid.UUID) -> list[dict[str, Any]]:
    links = session.scalars(
        select(JoinLink).where(JoinLink.organization_id == org_id).order_by(JoinLink.created_at)
    )
    return [describe(link) for link in links]


def revoke_join_link(
    session: Session,
    org_id: uuid.UUID,
    link_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> JoinLink:
    link = _link(session, org_id, link_id)
    if link.revoked_at is None:
        link.revoked_at = now
        link.active = False
        _audit_link(session, link, "join_link.revoked", actor_user_id, now)
    session.flush()
    return link


def _audit_link(
    session: Session, link: JoinLink, event: str, actor_user_id: uuid.UUID, now: datetime
) -> None:
    emit(
        session,
        EventKind.audit,
        event,
        at=now,
        aggregate_type="join_link",
        aggregate_id=link.id,
        organization_id=link.organization_id,
        actor_user_id=actor_user_id,
    )


def eligible_link(session: Session, token: str) -> tuple[JoinLink, Organization]:
    """The link behind `token` if it may be used now; 404 for anything else, including a gym
    that switched joining off (spec A 2.9)."""
    row = session.execute(
        select(JoinLink, Organization)
        .join(Organization, Organization.id == JoinLink.organization_id)
        .where(
            JoinLink.token == token,
            JoinLink.active.is_(True),
            JoinLink.revoked_at.is_(None),
            Organization.join_enabled.is_(True),
            Organization.status == OrganizationStatus.active,
            Organization.deleted_at.is_(None),
        )
    ).first()
    if row is None or (row[0].plan_id is not None and not _plan_on_sale(session, row[0])):
        raise not_found(codes.JOIN_LINK_NOT_FOUND, "this join link is not available")
    return row[0], row[1]


def _plan_on_sale(session: Session, link: JoinLink) -> bool:
    """A link whose stored plan was deleted would sell nothing: it answers 404 like a paused
    one (docs/decisions.md, issue 23). Read as it stands (after an outside call, the one this
    session read before may be stale)."""
    plan = session.get(Plan, link.plan_id, populate_existing=True)
    return (
        plan is not None
        and plan.organization_id == link.organization_id
        and (plan.deleted_at is None)
    )


def minisite_join_link(session: Session, organization: Organization) -> JoinLink | None:
    """The link a minisite's call to action may advertise: eligible and without a stored plan
    (a stored plan would override the plan chosen on a pricing card). join_token is never used."""
    if not organization.join_enabled:
        return None
    return session.scalar(
        select(JoinLink)
        .where(
            JoinLink.organization_id == organization.id,
            JoinLink.active.is_(True),
            JoinLink.revoked_at.is_(None),
            JoinLink.plan_id.is_(None),
        )
        .order_by(JoinLink.created_at)
        .limit(1)
    )


def public_view(link: JoinLink, organization: Organization) -> dict[str, Any]:
    return {
        "organization": {
            "id": str(organization.id),
            "name": organization.name,
            "slug": organization.slug,
        },
        "planId": str(link.plan_id) if link.plan_id else None,
    }


def _submission(
    session: Session,
    link: JoinLink,
    *,
    outcome: str,
    email: str | None,
    ip: str | None,
    user_agent: str | None,
    now: datetime,
    user_id: uuid.UUID | None = None,
    data: dict | None = None,
) -> JoinSubmission:
    row = JoinSubmission(
        join_link_id=link.id,
        organization_id=link.organization_id,
        email=email,
        user_id=user_id,
        outcome=outcome,
        ip=ip[:64] if ip else None,
        user_agent=user_agent[:512] if user_agent else None,
        data=data or {},
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def _throttle_anonymous(session: Session, action: str, link: JoinLink, now: datetime) -> None:
    """Counted in the database (it holds across workers) before anything is written; a refusal
    is 429 and keeps only its count."""
    per_link, per_organization = ANONYMOUS_LIMITS[action]
    for key, limit in (
        (f"join:{action}:{link.id}", per_link),
        (f"join:{action}:{link.organization_id}", per_organization),
    ):
        ratelimit.hit(session, key, limit=limit, window=ANONYMOUS_WINDOW, now=now)


def count_request_invite(session: Session, token: str, *, now: datetime) -> None:
    """Count a join-form attempt against its link's and its gym's budgets (429 past either).
    The door commits the count before the form is answered: the counters are one row per
    window, and held through the identity provider's lookup they queued every visitor of the
    gym behind it."""
    link, _ = eligible_link(session, token)
    _throttle_anonymous(session, "request_invite", link, now)


def request_invite(
    session: Session,
    outreach: Outreach,
    token: str,
    *,
    email: str,
    ip: str | None,
    user_agent: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The join form: a sign-up ticket for a new address, or join.blocked for a known one.
    The door counts the attempt first (`count_request_invite`) and commits the count.

    The provider's lookup runs with no transaction open on the embedded default (decisions
    s41), so the link read before it may be stale: the write phase re-reads it locked
    (`_still_eligible`), and a link revoked, paused or switched off meanwhile answers 404
    join_link_not_found as it would have before the call, writing nothing."""
    link, _ = eligible_link(session, token)
    link_id = link.id  # the lookup's release expires the rows read
    email = normalize_email(email)
    known = _has_account(session, outreach, email)
    link, organization = _still_eligible(session, link_id)
    if known:
        _submission(
            session,
            link,
            outcome="blocked_account_exists",
            email=email,
            ip=ip,
            user_agent=user_agent,
            now=now,
        )
        emit(
            session,
            EventKind.audit,
            "join.blocked",
            at=now,
            aggregate_type="join_link",
            aggregate_id=link.id,
            organization_id=organization.id,
            payload={"reason": "account_exists"},
            private={"email": email, "ip": ip},
        )
        raise conflict(
            codes.ACCOUNT_EXISTS,
            "this address has an account: sign in to join",
            audited=True,
            reason="account_exists",
        )
    _submission(
        session, link, outcome="ticket_issued", email=email, ip=ip, user_agent=user_agent, now=now
    )
    ticket = tickets.sign(
        outreach.settings,
        tickets.JOIN,
        str(link.id),
        now=now,
        expires_at=now + JOIN_TICKET_LIFETIME,
        email=email,
        org=str(organization.id),
    )
    query = urlencode({"__identity_ticket": ticket, "status": "join"})
    return {
        "signUpUrl": f"{frontend(outreach.settings)}/sign-up?{query}",
        "expiresAt": (now + JOIN_TICKET_LIFETIME).isoformat(),
    }


def _still_eligible(session: Session, link_id: uuid.UUID) -> tuple[JoinLink, Organization]:
    """The link after an outside call, locked (`db.locked_row`) and checked again as
    `eligible_link` checks it: staff who revoked or paused it while the provider answered
    committed, and a ticket issued now would be one for a link no longer open. The lock holds
    a revoke that comes now until this write phase commits (the revoke is then after it)."""
    link = locked_row(session, JoinLink, link_id)
    if link is None:
        raise not_found(codes.JOIN_LINK_NOT_FOUND, "this join link is not available")
    return eligible_link(session, link.token)


def _has_account(session: Session, outreach: Outreach, email: str) -> bool:
    if linked_login(session, email) is not None:
        return True
    return find_account(session, outreach, email) is not None


def join_signed_in(
    session: Session,
    token: str,
    user: User,
    *,
    ip: str | None,
    user_agent: str | None,
    now: datetime,
) -> tuple[Membership, bool]:
    """A signed-in person joins through a link as a member; (membership, joined now)."""
    link, organization = eligible_link(session, token)
    membership = _membership(session, organization.id, user.id)
    if membership is None:
        membership = _first_membership(session, organization.id, user.id, now=now)
        if membership is None:  # joined twice at once: the first join's row answers
            return _membership(session, organization.id, user.id), False
    elif membership.invitation_held:
        raise forbidden(
            codes.INVITATION_HELD,
            "a staff invitation to this address is held until the gym confirms it",
        )
    elif membership.status is MembershipStatus.active:
        return membership, False
    elif membership.status is MembershipStatus.suspended:
        # A public link never lifts a suspension the gym decided.
        raise forbidden(codes.MEMBERSHIP_SUSPENDED, "this membership is suspended; ask the gym")
    # Whoever comes back through a public link comes back as a member, whatever they were.
    membership.role = Role.member
    membership.status = MembershipStatus.active
    membership.updated_at = now
    end_sales_grant(session, membership, actor_user_id=user.id, now=now)
    _submission(
        session,
        link,
        outcome="joined",
        email=user.email,
        ip=ip,
        user_agent=user_agent,
        now=now,
        user_id=user.id,
    )
    emit(
        session,
        EventKind.audit,
        "membership.joined",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        organization_id=organization.id,
        actor_user_id=user.id,
        payload={"joinLinkId": str(link.id)},
    )
    session.flush()
    mirror.member_created(session, membership, now=now)
    return membership, True


def _membership(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> Membership | None:
    """The person's membership of the gym, locked: a second join at once of a returning
    member waits and reads it active (a repeat), not cancelled (joined again)."""
    return session.scalar(
        select(Membership)
        .where(Membership.organization_id == org_id, Membership.user_id == user_id)
        .with_for_update(of=Membership)
        .execution_options(populate_existing=True)
    )


def _first_membership(
    session: Session, org_id: uuid.UUID, user_id: uuid.UUID, *, now: datetime
) -> Membership | None:
    """The person's first membership of the gym, or None when a join at once (a double tap, the
    app's retry) stored it first: both read none, and the second insert broke the gym's one
    membership per person (a 500) where a repeat answers 200."""
    membership = Membership(
        organization_id=org_id,
        user_id=user_id,
        role=Role.member,
        status=MembershipStatus.active,
        created_at=now,
        updated_at=now,
    )
    try:
        with unique_violation(MEMBERSHIP_KEY), session.begin_nested():
            session.add(membership)
    except UniqueViolation:
        return None
    return membership


def checkout_task_title(email: str | None) -> str:
    """The follow-up's title; erasure files it again without the address (erasure.py)."""
    return f"Join checkout failed{f' for {email}' if email else ''}: follow up on payment"


def checkout_failed(
    session: Session,
    token: str,
    *,
    email: str | None,
    reason: str | None,
    ip: str | None,
    user_agent: str | None,
    now: datetime,
) -> Task:
    """Record the failed join checkout and file (or refresh) one urgent payment follow-up task
    per link and address, so repeated failures do not flood the staff's list."""
    link, organization = eligible_link(session, token)
    _throttle_anonymous(session, "checkout_failed", link, now)
    email = normalize_email(email) if email else None
    _submission(
        session,
        link,
        outcome="checkout_failed",
        email=email,
        ip=ip,
        user_agent=user_agent,
        now=now,
        data={"reason": (reason or "")[:200]},
    )
    # One task per link and address, folded as every lookup folds it (by str.lower() 'İpek@'
    # and 'ipek@', one address to PostgreSQL, filed two); hashed to fit the subject column.
    folded = address_keys(session, [email])[email] if email else "anonymous"
    digest = hashlib.sha256(folded.encode()).hexdigest()[:32]
    subject = f"{link.id}:{digest}"
    return file_task(
        session,
        organization_id=organization.id,
        kind="payment_follow_up",
        subject_type="join_checkout",
        subject_id=subject,
        title=checkout_task_title(email),
        priority="urgent",
        due_at=now + PAYMENT_FOLLOW_UP_DUE,
        now=now,
        detail=reason,
        data={"joinLinkId": str(link.id), "email": email},
    )
