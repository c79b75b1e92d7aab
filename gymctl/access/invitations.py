"""Invitations (spec A 2.4, 3): create, list, revoke, resend, accept, auto-accept, expire.

An invitee without an identity account gets an email whose sign-up link carries the signed token
as `__identity_ticket`. One with an account gets a pending_invitation membership at once; if that
account's email is unproven the membership is held (spec A 5.3) until an operator marks the email
verified: opening the email never releases a hold.

No write lock is held while the identity provider or the mail server answers (decisions s41,
s42): a new invitation is checked, the provider asked, checked again and stored and committed;
its email then goes out, and the first one completes it (the login's pending membership, the
audit). A refused email withdraws it (a resend puts the former token back). A link request (a
gym registered a login's address) is stored with the registration and emailed by the daemons'
`link_requests` sweep once it is committed (the gym's answer never depends on it).
"""

from __future__ import annotations

import hashlib
import logging
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids, ratelimit
from gymctl.access import codes, tickets
from gymctl.access.erased import ERASED_DOMAIN, is_erased_address
from gymctl.access.folding import fold_person
from gymctl.access.grants import require_grant, require_invitation_handling
from gymctl.access.memberships import end_sales_grant, owner_of
from gymctl.bridge import mirror
from gymctl.config import Settings
from gymctl.db import advisory_lock, release_for_outside_call, transaction_wrote
from gymctl.errors import (
    bad_gateway,
    conflict,
    forbidden,
    gone,
    invalid,
    not_found,
    unprocessable,
)
from gymctl.events import EventKind, emit
from gymctl.identity.signup import mirror_verification
from gymctl.identity.users import address_keys, find_or_create, is_same_address
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
from gymctl.providers.identity_admin import Account, IdentityAdmin
from gymctl.providers.mail import Mailer, MailError, OutgoingEmail
from gymctl.text import on_one_line

logger = logging.getLogger("gymctl.access")

DEFAULT_FRONTEND = "http://localhost:3000"
FIRST_VERSION = 1  # of an invitation's token; a resend bumps it
LINK_REQUEST_BATCH = 200  # link requests a sweep sends
LINK_REQUEST_RETRY = timedelta(minutes=5)  # after a try the mail server refused
# Resends (decisions s48): staff resent without any limit, so a script could mail an address as
# often as it liked. A person who lost the email needs one or two. The budget is the address's in
# the gym, an invitation's own email included (`count_email`): revoking and inviting again
# neither refills it nor mails past it.
RESENDS_PER_HOUR = 3
RESENDS_PER_DAY = 10
DAY = timedelta(days=1)
EMAIL_WINDOWS = ((timedelta(hours=1), RESENDS_PER_HOUR + 1), (DAY, RESENDS_PER_DAY + 1))


@dataclass(frozen=True)
class Outreach:
    """The outside parts an invitation talks to."""

    settings: Settings
    mailer: Mailer
    identity_admin: IdentityAdmin


# RFC 5322's specials: outside a quoted local part (which no sign-up form produces, and which we
# do not take) each one ends an address or starts another. "a@x.test,b@y.test" was one address
# here and two recipients in the invitation's To header.
EMAIL_SPECIALS = frozenset('()<>[]:;,\\"@')
MAX_EMAIL = 320  # every column that keeps an address (users.email, invitations.email, ...)


def normalize_email(email: str) -> str:
    """One address, as invites, join forms, sign-ups and imports all read it: local@domain,
    the domain lower-cased; email_invalid otherwise."""
    cleaned = (email or "").strip()
    local, at, domain = cleaned.partition("@")
    # No whitespace and no Unicode "other" character (categories C*) inside: a control one in
    # a mail header answered 500 (the To header refuses what str.splitlines() reads as a line
    # break); a format one (U+202E RIGHT-TO-LEFT OVERRIDE, a zero-width joiner, a BOM) makes an
    # address display as another; a lone surrogate (a non-UTF-8 CLI argument) cannot be stored.
    unsafe = any(
        c.isspace() or unicodedata.category(c).startswith("C") or c in EMAIL_SPECIALS
        for c in local + domain
    )
    # Dot-atoms on both sides: no empty part (a leading, trailing or doubled dot).
    atoms = local.split(".") + domain.split(".")
    # The length as stored: lower-casing may lengthen it ('İ' is 'i' and a combining dot), so a
    # 205-character address became 405 characters in a 320-character column (a 500).
    normalized = f"{local}@{domain.lower()}"
    if not at or "." not in domain or unsafe or not all(atoms) or len(normalized) > MAX_EMAIL:
        raise unprocessable(codes.EMAIL_INVALID, "a valid email address is required")
    return normalized


def frontend(settings: Settings) -> str:
    return (settings.frontend_url or DEFAULT_FRONTEND).rstrip("/")


def _token(
    settings: Settings, invitation_id: uuid.UUID, expires_at: datetime, version: int, now: datetime
) -> str:
    return tickets.sign(
        settings,
        tickets.INVITATION,
        str(invitation_id),
        now=now,
        expires_at=expires_at,
        version=version,
    )


def _links(settings: Settings, invitation: Invitation, now: datetime) -> dict[str, str]:
    token = _token(settings, invitation.id, invitation.expires_at, invitation.token_version, now)
    return _urls(settings, token)


def _urls(settings: Settings, token: str) -> dict[str, str]:
    return {
        "signUp": f"{frontend(settings)}/sign-up?"
        + urlencode({"__identity_ticket": token, "status": "invited"}),
        "accept": f"{frontend(settings)}/invitations/accept?" + urlencode({"token": token}),
    }


def _message(
    settings: Settings, invitation: Invitation, organization: Organization | None, now: datetime
) -> OutgoingEmail:
    """The invitation's email, its link carrying the invitation's newest token."""
    links = _links(settings, invitation, now)
    # On one line: a gym's name holding a line break failed every send (a mail header).
    place = on_one_line(organization.name) if organization else "gymctl (create your gym)"
    link = links["accept"] if invitation.user_id else links["signUp"]
    return OutgoingEmail(
        to=invitation.email,
        subject=f"You're invited to join {place}",
        text=(
            f"You have been invited to {place} as {invitation.role.value}.\n\n"
            f"Open this link to accept:\n{link}\n\n"
            f"It expires on {invitation.expires_at:%Y-%m-%d}."
        ),
        headers={"X-Gymctl-Invitation": str(invitation.id)},
        tag="invitation",
    )


def linked_login(session: Session, email: str) -> User | None:
    """A linked login under this address (the gym's own unlinked rows are not accounts)."""
    return session.scalar(
        select(User)
        .where(same_address(User.email, email), User.identity_id.is_not(None))
        .where(User.deleted_at.is_(None))
        .order_by(User.created_at)
        .limit(1)
    )


@dataclass(frozen=True)
class Asked:
    """What the identity provider answered for a new invitation, asked before it is stored."""

    invitation_id: uuid.UUID
    expires_at: datetime
    account: Account | None
    provider_invitation_id: str | None


def create_invitation(
    session: Session,
    outreach: Outreach,
    *,
    organization: Organization | None,
    actor: Membership | None,
    actor_user_id: uuid.UUID | None,
    email: str,
    role: Role,
    now: datetime,
) -> Invitation:
    """Invite `email` with `role`. With `organization` None it is an owner grant (platform
    admins only: the caller checks), the claimable right to create a gym.

    No write lock is held while the identity provider or the mail server answers (decisions
    s41, s42): the checks read, the provider is asked, the checks run again on fresh rows and
    the invitation is stored and COMMITTED, then its email goes out and the send is recorded
    (the caller commits that). A refused email withdraws the invitation, committed, before
    answering 502 mail_failed: it keeps nothing once the refusal is answered. A crash between
    the commit and the email leaves it pending and unsent (sendCount 0): a resend sends it.

    A caller whose transaction already wrote (a command that seeds, then invites) keeps its
    one unit of work: nothing is committed here, the invitation and its email's record join
    the caller's transaction, and the caller's rollback (a refused email, a later step's
    failure) takes back its own rows with the invitation. Its email then goes out before
    that commit: the price of a unit of work the caller chose to hold open."""
    email = normalize_email(email)
    org_id = organization.id if organization else None
    joined = transaction_wrote(session)  # the invitation joins the caller's unit of work
    check_new(session, organization_id=org_id, actor=actor, email=email, role=role)
    count_email(session, org_id, email, now=now)
    if not joined:
        session.commit()  # the count stands whatever follows (and holds no lock meanwhile)
    asked = ask_provider(session, outreach, email, now=now)
    session.flush()  # a caller's pending writes are kept through the expiry below
    session.expire_all()  # read again, as they are now (PostgreSQL kept the first reads)
    store_new(
        session,
        asked,
        organization_id=org_id,
        actor=actor,
        actor_user_id=actor_user_id,
        email=email,
        role=role,
        now=now,
    )
    if not joined:
        session.commit()  # stored before an email names it
    try:
        return deliver(session, outreach, asked.invitation_id, now=now)
    except MailError as error:
        withdraw(session, asked.invitation_id)
        if not joined:
            session.commit()
        raise bad_gateway(codes.MAIL_FAILED, str(error)) from None


def check_new(
    session: Session,
    *,
    organization_id: uuid.UUID | None,
    actor: Membership | None,
    email: str,
    role: Role,
) -> None:
    """The refusals of a new invitation that the rows decide (`email` normalized)."""
    if actor is not None:
        require_grant(actor.role, role)
    if (
        organization_id is not None
        and role is Role.owner
        and owner_of(session, organization_id) is not None
    ):
        raise conflict(
            codes.OWNER_EXISTS, "the organization has an owner; transfer ownership instead"
        )
    pending = session.scalar(
        select(Invitation.id).where(
            Invitation.organization_id.is_(None)
            if organization_id is None
            else Invitation.organization_id == organization_id,
            same_address(Invitation.email, email),
            Invitation.status == InvitationStatus.pending,
            # A link request is none of the gym's: refusing for it told the gym the address
            # has a login (and the gym can neither see nor resend it).
            Invitation.profile_user_id.is_(None),
        )
    )
    if pending is not None:
        raise conflict(codes.INVITATION_PENDING, "a pending invitation exists; resend it")


def find_account(session: Session, outreach: Outreach, email: str) -> Account | None:
    """The provider's account holding `email` by the one address rule (`address_keys` on
    `session`), asked with no write lock held (decisions s41): on the embedded default the
    read transaction ends before the call and again after the fold (a slot the next call
    takes would otherwise be taken in it, holding the lock through that call)."""
    release_for_outside_call(session)
    account = outreach.identity_admin.find_account(email, partial(address_keys, session))
    release_for_outside_call(session)
    return account


def ask_provider(session: Session, outreach: Outreach, email: str, *, now: datetime) -> Asked:
    """The identity provider, asked with no write lock held: the caller's transaction, which
    only read, ends first (db.release_for_outside_call; its rows expire). An address without
    an account gets the provider's invitation now, under the id its row will have; one whose
    row is then refused or never stored is an invitation no one is sent to (the provider
    mails nothing: notify is off), its redirect naming no stored invitation."""
    account = find_account(session, outreach, email)
    invitation_id = ids.new_id()
    expires_at = now + timedelta(days=outreach.settings.invitation_ttl_days)
    provider_invitation_id = None
    if account is None:
        token = _token(outreach.settings, invitation_id, expires_at, FIRST_VERSION, now)
        provider_invitation_id = outreach.identity_admin.create_invitation(
            session,
            email,
            redirect_url=_urls(outreach.settings, token)["signUp"],
            metadata={"invitationId": str(invitation_id)},
        )
    return Asked(invitation_id, expires_at, account, provider_invitation_id)


def store_new(
    session: Session,
    asked: Asked,
    *,
    organization_id: uuid.UUID | None,
    actor: Membership | None,
    actor_user_id: uuid.UUID | None,
    email: str,
    role: Role,
    now: datetime,
) -> Invitation:
    """The invitation, stored with what the provider answered after every check again (the
    caller expired its rows): a second click, a second admin or a role changed meanwhile is
    refused here. Its pending membership and audit come with its first email (deliver). The
    caller commits before the email goes out."""
    session.connection()  # the write transaction first (db.advisory_lock on SQLite)
    # One gym's pending check and insert, one at a time (on PostgreSQL two could both pass).
    advisory_lock(session, f"invitations:{organization_id or 'owner-grants'}")
    check_new(session, organization_id=organization_id, actor=actor, email=email, role=role)
    invitee = None
    if asked.account is not None:
        account = asked.account
        invitee = (
            linked_login(session, email)
            or find_or_create(session, account.identity_id, now=now, email=account.email)[0]
        )
        # The provider's word proves the address it verified, and only on the row holding it
        # (the login found by the invited address may hold another since); never a join-link
        # login's (spec A 5.3: unproven whatever the provider's flag says, held until an
        # operator's Mark email verified), which a staff invitation proved.
        if is_same_address(session, invitee.email or "", account.email or ""):
            mirror_verification(invitee, account.email_verified, now=now)
        if organization_id is not None:
            _refuse_member(session, organization_id, invitee.id)
    invitation = Invitation(
        id=asked.invitation_id,
        organization_id=organization_id,
        email=email,
        role=role,
        invited_by_user_id=actor_user_id,
        user_id=invitee.id if invitee else None,
        provider_invitation_id=asked.provider_invitation_id,
        token_version=FIRST_VERSION,
        created_at=now,
        expires_at=asked.expires_at,
    )
    session.add(invitation)
    session.flush()
    return invitation


def deliver(
    session: Session,
    outreach: Outreach,
    invitation_id: uuid.UUID,
    *,
    now: datetime,
    erased: Callable[[str], bool] = lambda _email: False,
) -> Invitation:
    """Email the stored invitation (the caller committed its newest token) and record the send.
    The transaction that read it ends before the mail server is asked; the send is recorded
    under the row's lock after. The first send completes the invitation: a login's pending
    membership (spec A 3) and the audit. A MailError leaves everything as it was: the caller
    undoes its own step. An invitation no longer pending, or whose address is `erased` (the
    bulk worker's: the gym erased the person after its commit), is not sent."""
    invitation = session.get(Invitation, invitation_id, populate_existing=True)
    if invitation is None:
        raise not_found(codes.INVITATION_NOT_FOUND, "no such invitation")
    if invitation.status is not InvitationStatus.pending or erased(invitation.email):
        return invitation
    organization = (
        session.get(Organization, invitation.organization_id)
        if invitation.organization_id
        else None
    )
    message = _message(outreach.settings, invitation, organization, now)
    invitee = (invitation.organization_id, invitation.user_id)
    release_for_outside_call(session)  # only read since the caller's commit
    outreach.mailer.send(message)
    if None not in invitee:
        # Erasure's order (memberships, then invitations): the first send writes the invitee's
        # membership, and an erasure holding it waited on this row while the send waited on it.
        session.scalar(
            select(Membership.id)
            .where(Membership.organization_id == invitee[0], Membership.user_id == invitee[1])
            .with_for_update()
        )
    invitation = _locked(session, invitation_id)
    if invitation is None:
        raise not_found(codes.INVITATION_NOT_FOUND, "no such invitation")
    if invitation.send_count == 0 and invitation.profile_user_id is None:
        # A link request was audited when it was stored, and asks for no membership.
        _completed(session, invitation, now=now, erased=erased(invitation.email))
    invitation.send_count += 1
    invitation.last_sent_at = now
    session.flush()
    return invitation


def withdraw(session: Session, invitation_id: uuid.UUID) -> None:
    """Its first email refused, the invitation goes, unless it was sent, accepted or revoked
    meanwhile (then it stands). Nothing else was written for it; the login's users row made
    from the provider's account stays (the login's first request would make it)."""
    invitation = _locked(session, invitation_id)
    if (
        invitation is not None
        and invitation.status is InvitationStatus.pending
        and invitation.send_count == 0
    ):
        session.delete(invitation)
        session.flush()


def _locked(session: Session, invitation_id: uuid.UUID) -> Invitation | None:
    return session.get(Invitation, invitation_id, with_for_update=True, populate_existing=True)


def _locked_in_order(
    session: Session, invitation: Invitation, user_id: uuid.UUID | None
) -> Invitation:
    """The invitation, locked and read afresh before its status decides anything: an accept
    and a revoke at once each read it pending, and the later one wrote over the first (a
    revoked staff role held as an active membership). Erasure's order: the person's membership
    of the gym first, then the invitation."""
    if invitation.organization_id is not None and user_id is not None:
        session.scalar(
            select(Membership)
            .where(
                Membership.organization_id == invitation.organization_id,
                Membership.user_id == user_id,
            )
            .with_for_update(of=Membership)
            .execution_options(populate_existing=True)
        )
    locked = _locked(session, invitation.id)
    if locked is None:
        raise not_found(codes.INVITATION_NOT_FOUND, "no such invitation")
    return locked


def _refuse_member(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> None:
    if _membership(session, org_id, user_id) is not None:
        raise conflict(codes.ALREADY_MEMBER, "this person is already a member")


def _membership(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> Membership | None:
    """The person's active membership of the gym, if any."""
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == org_id,
            Membership.user_id == user_id,
            Membership.status == MembershipStatus.active,
        )
    )


def _completed(session: Session, invitation: Invitation, *, now: datetime, erased: bool) -> None:
    """What an invitation's first email completes: a login invited to a gym has a
    pending_invitation membership (unless they became a member meanwhile), and the creation
    is audited."""
    invitee = session.get(User, invitation.user_id) if invitation.user_id else None
    if (
        invitee is not None
        and invitation.organization_id is not None
        and invitation.status is InvitationStatus.pending
        and not erased
        and _membership(session, invitation.organization_id, invitee.id) is None
    ):
        _pending_membership(session, invitation, invitee, now=now)
    emit(
        session,
        EventKind.audit,
        "invitation.created",
        at=now,
        aggregate_type="invitation",
        aggregate_id=invitation.id,
        organization_id=invitation.organization_id,
        actor_user_id=invitation.invited_by_user_id,
        payload={"role": invitation.role.value, "existingAccount": invitation.user_id is not None},
    )


def request_link(
    session: Session,
    outreach: Outreach,
    *,
    organization: Organization,
    login: User,
    profile: User,
    role: Role,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Invitation:
    """A gym registered the address of a proven login at its desk: the login is not attached
    (the person has not consented, and the gym may not learn it exists). The person is asked
    instead; accepting links the gym's `profile` to the login. Nothing here is visible to the
    gym: no membership of the login, no listed invitation, and no answer that depends on the
    email. The request is stored with the registration, unsent: the daemons' sweep emails it
    once the registration is committed (`deliver_link_requests`)."""
    invitation = Invitation(
        organization_id=organization.id,
        email=login.email or profile.email or "",
        role=role,
        invited_by_user_id=actor_user_id,
        user_id=login.id,
        profile_user_id=profile.id,
        created_at=now,
        expires_at=now + timedelta(days=outreach.settings.invitation_ttl_days),
    )
    session.add(invitation)
    session.flush()
    emit(
        session,
        EventKind.audit,
        "invitation.link_requested",
        at=now,
        aggregate_type="invitation",
        aggregate_id=invitation.id,
        organization_id=organization.id,
        actor_user_id=actor_user_id,
        payload={"role": role.value},
    )
    return invitation


def deliver_link_requests(
    factory: sessionmaker[Session],
    outreach: Outreach,
    *,
    now: datetime,
    limit: int = LINK_REQUEST_BATCH,
) -> dict[str, int]:
    """The `link_requests` sweep: email the link requests not sent yet, never tried first,
    then the longest waiting. Each is claimed in a transaction of its own (its try's time in
    `last_sent_at`, committed: a second sweep leaves it), then sent with no transaction open
    and its send recorded after (`deliver`). One the mail server refused is tried again
    LINK_REQUEST_RETRY after its try, behind the newer ones; a stop between an email and its
    record sends it again then (at least once). No door sends one: the gym's answer, its
    timing included, never depends on whether the address has a login."""
    due = or_(
        Invitation.last_sent_at.is_(None), Invitation.last_sent_at <= now - LINK_REQUEST_RETRY
    )
    waiting = (
        Invitation.profile_user_id.is_not(None),
        Invitation.status == InvitationStatus.pending,
        Invitation.send_count == 0,
        Invitation.expires_at > now,
        Invitation.email.not_like(f"%{ERASED_DOMAIN}"),  # the gym erased the person
        due,
    )
    with factory() as session:
        picked = list(
            session.scalars(
                select(Invitation.id)
                .where(*waiting)
                .order_by(
                    Invitation.last_sent_at.is_not(None),
                    Invitation.last_sent_at,
                    Invitation.created_at,
                    Invitation.id,
                )
                .limit(limit)
            )
        )
    done = {"sent": 0, "failed": 0}
    for invitation_id in picked:
        with factory() as session:
            claim = update(Invitation).where(Invitation.id == invitation_id, *waiting)
            if not session.execute(claim.values(last_sent_at=now)).rowcount:
                continue  # sent, tried, accepted or erased since it was picked
            session.commit()
            try:
                sent = deliver(session, outreach, invitation_id, now=now, erased=is_erased_address)
                session.commit()
            except MailError as error:
                logger.warning("link request %s: the mail server refused: %s", invitation_id, error)
                done["failed"] += 1
                continue
        done["sent"] += sent.send_count > 0
    return done


def _pending_membership(
    session: Session, invitation: Invitation, invitee: User, *, now: datetime
) -> Membership:
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == invitation.organization_id,
            Membership.user_id == invitee.id,
        )
    )
    if membership is not None and membership.status is MembershipStatus.active:
        raise conflict(codes.ALREADY_MEMBER, "this person is already a member")
    if membership is None:
        membership = Membership(
            organization_id=invitation.organization_id,
            user_id=invitee.id,
            created_at=now,
        )
        session.add(membership)
    membership.role = invitation.role
    membership.status = MembershipStatus.pending_invitation
    membership.updated_at = now
    membership.invitation_held = invitee.email_verified_at is None
    session.flush()
    if membership.invitation_held:
        emit(
            session,
            EventKind.audit,
            "membership.invitation_held",
            at=now,
            aggregate_type="user",
            aggregate_id=invitee.id,
            organization_id=invitation.organization_id,
            payload={"invitationId": str(invitation.id), "reason": "email_unproven"},
        )
    return membership


def list_invitations(session: Session, org_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(Invitation)
        .where(Invitation.organization_id == org_id, Invitation.profile_user_id.is_(None))
        .order_by(Invitation.created_at.desc())
    )
    return [describe(invitation) for invitation in rows]


def describe(invitation: Invitation) -> dict[str, Any]:
    return {
        "id": str(invitation.id),
        "email": invitation.email,
        "role": invitation.role.value,
        "status": invitation.status.value,
        "existingAccount": invitation.user_id is not None,
        "sendCount": invitation.send_count,
        "lastSentAt": invitation.last_sent_at.isoformat() if invitation.last_sent_at else None,
        "expiresAt": invitation.expires_at.isoformat(),
        "createdAt": invitation.created_at.isoformat(),
    }


def _invitation(session: Session, org_id: uuid.UUID, invitation_id: uuid.UUID) -> Invitation:
    """One of the gym's invitations, as listed: a link request is not one (the gym may not
    learn the login exists; a resend mailed it and answered `existingAccount`), so its id
    answers as an unknown one."""
    invitation = session.get(Invitation, invitation_id)
    if (
        invitation is None
        or invitation.organization_id != org_id
        or invitation.profile_user_id is not None
    ):
        raise not_found(codes.INVITATION_NOT_FOUND, "no such invitation")
    return invitation


def _require_pending(invitation: Invitation) -> None:
    if invitation.status is not InvitationStatus.pending:
        raise conflict(codes.INVITATION_NOT_PENDING, f"the invitation is {invitation.status.value}")


def revoke_invitation(
    session: Session, actor: Membership, invitation_id: uuid.UUID, *, now: datetime
) -> Invitation:
    invitation = _invitation(session, actor.organization_id, invitation_id)
    require_invitation_handling(actor.role, invitation.role)
    invitation = _locked_in_order(session, invitation, invitation.user_id)
    _require_pending(invitation)
    invitation.status = InvitationStatus.revoked
    invitation.revoked_at = now
    _end_pending_membership(session, invitation, now=now)
    emit(
        session,
        EventKind.audit,
        "invitation.revoked",
        at=now,
        aggregate_type="invitation",
        aggregate_id=invitation.id,
        organization_id=actor.organization_id,
        actor_user_id=actor.user_id,
    )
    session.flush()
    return invitation


def resend_invitation(
    session: Session,
    outreach: Outreach,
    actor: Membership,
    invitation_id: uuid.UUID,
    *,
    now: datetime,
) -> Invitation:
    """A fresh token (the older email's link stops working) and a fresh expiry. The new token's
    version is COMMITTED before its email carries it, and the email is sent with no write lock
    held (decisions s41, s42). A refused email puts the former version and expiry back,
    committed, before answering 502 mail_failed: the older link works again once the refusal
    is answered. Resending an invitation whose first email never went out sends it."""
    invitation = _invitation(session, actor.organization_id, invitation_id)
    require_invitation_handling(actor.role, invitation.role)
    invitation = _locked(session, invitation_id)  # two resends at once bump one after the other
    _require_pending(invitation)
    count_email(session, invitation.organization_id, invitation.email, now=now)
    former = (invitation.token_version, invitation.expires_at)
    invitation.token_version += 1
    invitation.expires_at = now + timedelta(days=outreach.settings.invitation_ttl_days)
    session.commit()  # the version the email carries is stored first
    try:
        return deliver(session, outreach, invitation_id, now=now)
    except MailError as error:
        _restore(session, invitation_id, former)
        session.commit()
        raise bad_gateway(codes.MAIL_FAILED, str(error)) from None


def count_email(
    session: Session, organization_id: uuid.UUID | None, email: str, *, now: datetime
) -> None:
    """Count an invitation email (a new invitation's or a resend) against the address's hour
    and day in the gym (the one rate limiter: a refused try still spends its budget, and the
    door commits that alone); 429 rate_limited with retryAfter past either, before anything is
    changed or sent. Keyed by the address as every lookup folds it (`address_keys`), hashed to
    fit the key column: per invitation, a revoke and a new invitation got a fresh budget."""
    folded = address_keys(session, [email])[email]
    address = hashlib.sha256(folded.encode()).hexdigest()
    for window, limit in EMAIL_WINDOWS:
        key = f"invitations.email:{organization_id or 'owner-grants'}:{address}"
        ratelimit.hit(
            session, f"{key}:{int(window.total_seconds())}", limit=limit, window=window, now=now
        )


def _restore(session: Session, invitation_id: uuid.UUID, former: tuple[int, datetime]) -> None:
    """The version and expiry a refused resend replaced, unless another resend came since."""
    invitation = _locked(session, invitation_id)
    version, expires_at = former
    if invitation is not None and invitation.token_version == version + 1:
        invitation.token_version, invitation.expires_at = version, expires_at
        session.flush()


def _end_pending_membership(session: Session, invitation: Invitation, *, now: datetime) -> None:
    if invitation.user_id is None or invitation.organization_id is None:
        return
    if invitation.profile_user_id is not None:
        return  # a link request made no membership of the login (another invitation may have)
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == invitation.organization_id,
            Membership.user_id == invitation.user_id,
            Membership.status == MembershipStatus.pending_invitation,
        )
    )
    if membership is not None:
        membership.status = MembershipStatus.cancelled
        membership.invitation_held = False
        membership.updated_at = now


def _raises(session: Session, membership: Membership, invitation: Invitation) -> bool:
    """The invitation grants more than the active membership holds (one never lowers it), and
    never a second owner (one per organization: spec A 2.7)."""
    if invitation.role is Role.owner and owner_of(session, membership.organization_id):
        return False
    return invitation.role.rank > membership.role.rank


def _activate(session: Session, invitation: Invitation, user: User, *, now: datetime) -> None:
    invitation.status = InvitationStatus.accepted
    invitation.accepted_at = now
    invitation.accepted_user_id = user.id
    if invitation.user_id not in (None, user.id):
        # Another login took it (the invited one moved to another address, the address's new
        # holder accepted): the invited login's pending membership lived with the invitation
        # (spec A 3), and no revoke or expiry reaches an accepted one.
        _end_pending_membership(session, invitation, now=now)
    if invitation.profile_user_id is not None:
        _link_profile(session, invitation, user, now=now)
    if invitation.organization_id is not None:
        membership = session.scalar(
            select(Membership).where(
                Membership.organization_id == invitation.organization_id,
                Membership.user_id == user.id,
            )
        )
        if membership is None:
            membership = Membership(
                organization_id=invitation.organization_id,
                user_id=user.id,
                role=invitation.role,
                created_at=now,
            )
            session.add(membership)
        if membership.status is not MembershipStatus.active or _raises(
            session, membership, invitation
        ):
            # Accepting gives the role the staff granted: one who joined through the gym's
            # public link meanwhile (a member) stayed a member with the invitation accepted.
            membership.role = invitation.role
        membership.status = MembershipStatus.active
        membership.invitation_held = False
        membership.updated_at = now
        end_sales_grant(session, membership, actor_user_id=None, now=now)
        mirror.member_created(session, membership, now=now)
    emit(
        session,
        EventKind.audit,
        "invitation.accepted",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        organization_id=invitation.organization_id,
        actor_user_id=user.id,
        payload={"invitationId": str(invitation.id)},
    )
    session.flush()


def _link_profile(session: Session, invitation: Invitation, user: User, *, now: datetime) -> None:
    """The person consented: the gym's profile folds into their login (folding.fold_person).
    The profile's membership (with what the gym collected on it) becomes the login's, unless
    the login is already an active member there; the profile is retired."""
    profile = session.get(User, invitation.profile_user_id)
    if profile is None or profile.deleted_at is not None or profile.identity_id is not None:
        return
    fold_person(session, profile, user, now=now)
    profile.deleted_at = now
    profile.updated_at = now
    emit(
        session,
        EventKind.audit,
        "user.linked",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        organization_id=invitation.organization_id,
        actor_user_id=user.id,
        payload={"profileRowId": str(profile.id), "byConsent": True},
    )
    session.flush()


def accept_invitation(
    session: Session, settings: Settings, user: User, token: str, *, now: datetime
) -> Invitation:
    """The signed-in invitee accepts in the app. The token must be the newest one sent, the
    address must be the caller's, and a held invitation stays held (spec A 5.3)."""
    ticket = tickets.verify(settings, tickets.INVITATION, token, now=now)
    try:
        invitation = session.get(Invitation, uuid.UUID(ticket.subject))
    except ValueError:
        invitation = None
    if invitation is None:
        raise not_found(codes.INVITATION_NOT_FOUND, "no such invitation")
    invitation = _locked_in_order(session, invitation, user.id)
    if invitation.token_version != ticket.version:
        raise invalid(codes.TICKET_INVALID, "a newer invitation email replaced this link")
    _require_pending(invitation)
    if invitation.expires_at <= now:
        raise gone(codes.TICKET_EXPIRED, "the invitation has expired")
    # As every lookup compares (is_same_address): by Python's str.lower() the app accepted on
    # SQLite an invitation that sign-up, folding only ASCII, did not find.
    if not is_same_address(session, user.email or "", invitation.email):
        raise forbidden(codes.INVITATION_OTHER_ADDRESS, "this invitation is for another address")
    if user.email_verified_at is None:
        # Opening the invitation email never releases a hold (spec A 5.3).
        raise forbidden(codes.INVITATION_HELD, "confirm your email address with the gym first")
    if invitation.organization_id is None:
        # An owner grant is claimed by creating the gym (gyms.create_gym), not here: accepting
        # it consumed it with no gym, and gym creation then answered OWNER_INVITATION_REQUIRED.
        return invitation
    _activate(session, invitation, user, now=now)
    return invitation


def _hold(session: Session, invitation: Invitation, user: User, *, now: datetime) -> None:
    if invitation.organization_id is None:
        return
    invitation.user_id = invitation.user_id or user.id
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == invitation.organization_id,
            Membership.user_id == user.id,
        )
    )
    if membership is None or not membership.invitation_held:
        _pending_membership(session, invitation, user, now=now)


def accept_on_sign_up(session: Session, user: User, *, now: datetime) -> int:
    """user.created: accept the pending invitations sent to the new login's address. Only a
    proven address accepts; an unproven one holds them instead (spec A 3, 5.3). A link request
    (a gym's profile of the person, awaiting the login's consent) is not an invitation to
    accept by signing up: only the person's accepting it links the profile."""
    if not user.email:
        return 0
    pending = session.scalars(
        select(Invitation)
        .where(
            same_address(Invitation.email, user.email),
            Invitation.status == InvitationStatus.pending,
            Invitation.expires_at > now,
            Invitation.organization_id.is_not(None),
            Invitation.profile_user_id.is_(None),
        )
        .with_for_update(of=Invitation)  # a revoke meanwhile is seen (_locked_in_order)
        .execution_options(populate_existing=True)
    ).all()
    for invitation in pending:
        if user.email_verified_at is None:
            _hold(session, invitation, user, now=now)
        else:
            _activate(session, invitation, user, now=now)
    return len(pending)


def release_held(session: Session, user: User, *, now: datetime) -> int:
    """After an operator marked the email verified: the held invitations become memberships.
    Only a held one: the gym's link request naming the login waits for the person's consent,
    and one past its expiry is the expiry sweep's to end, as accepting it would answer 410."""
    held = session.execute(
        select(Membership, Invitation)
        .join(
            Invitation,
            (Invitation.organization_id == Membership.organization_id)
            & (Invitation.user_id == Membership.user_id),
        )
        .where(
            Membership.user_id == user.id,
            Membership.invitation_held.is_(True),
            Membership.status == MembershipStatus.pending_invitation,
            Invitation.status == InvitationStatus.pending,
            Invitation.profile_user_id.is_(None),
            Invitation.expires_at > now,
            # The address proven is the one invited: a login that changed its address at the
            # provider proved the new one, not the one the hold is on (spec A 5.3).
            same_address(Invitation.email, user.email or ""),
        )
    ).all()
    for _membership, invitation in held:
        _activate(session, invitation, user, now=now)
    return len(held)


def expire_invitations(session: Session, *, now: datetime) -> dict[str, int]:
    """Daemon sweep: pending invitations past expires_at become expired; their pending
    memberships end. A second run finds nothing."""
    due = session.scalars(
        select(Invitation)
        .where(Invitation.status == InvitationStatus.pending, Invitation.expires_at <= now)
        .with_for_update(skip_locked=True)
        .limit(1000)
    ).all()
    for invitation in due:
        invitation.status = InvitationStatus.expired
        _end_pending_membership(session, invitation, now=now)
        emit(
            session,
            EventKind.domain,
            "invitation.expired",
            at=now,
            aggregate_type="invitation",
            aggregate_id=invitation.id,
            organization_id=invitation.organization_id,
        )
    session.flush()
    return {"expired": len(due)}
