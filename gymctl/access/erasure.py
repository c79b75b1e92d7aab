"""Personal-data erasure (spec A 2.8: owner-only, outside the matrix).

The owner erases what this organization holds about one person:
- erased here: the membership ends (cancelled, never reactivated by itself) with the national id
  this gym stored on it, its sales grant, its live plans and its seats to come
  (leaving.end_holdings), and the person's name and address in the bridge's queue
  (mirror.member_erased: unsent copies withdrawn, every payload scrubbed);
  this gym's join-form submissions and failed-checkout rows of the person (address, IP, browser),
  its leads and invitations under the person's address (name and address replaced), the address
  wherever this gym's bulk invites, roster imports and join-checkout follow-up tasks list it,
  the private fields of this gym's audit rows about the person or naming the address, and the
  free text of the person's cancellation notices and of staff's contact notes about them; the
  gym's views then show the member as erased (erased.py), whatever the person's own row keeps;
- the person's own row (name, address, avatar) only when no other organization
  holds the person and no live login is theirs: a login belongs to the person (one the
  identity provider deleted belongs to no one), and another gym's membership is that gym's
  to erase;
- kept for money records: subscriptions (ended), payments, invoices, credit notes and debts,
  which stay linked to the person's id (amounts, dates, references; no address is copied into
  them).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, lazyload

from gymctl.access import codes
from gymctl.access.erased import ERASED_DOMAIN, ERASURE_ACTION, is_erased
from gymctl.access.join import checkout_task_title
from gymctl.access.leaving import lock_leaving
from gymctl.access.memberships import end_membership, membership_of
from gymctl.bridge import entity_map, mirror
from gymctl.errors import conflict
from gymctl.events import EventKind, emit
from gymctl.identity.users import address_keys
from gymctl.models import (
    AuditLog,
    CancellationNotice,
    Invitation,
    InvitationBatch,
    JoinSubmission,
    Lead,
    MemberImport,
    MemberImportRow,
    Membership,
    MembershipStatus,
    Organization,
    RetentionCase,
    RetentionContact,
    Role,
    RosterEntry,
    Task,
    User,
    UserSession,
)
from gymctl.models.bridge import EntityType
from gymctl.models.identity import same_address
from gymctl.models.releases import PushRegistration

ERASED = "erased"
_PRIVATE_AUDIT_FIELDS = ("email", "ip")


def _erased_address(user_id: uuid.UUID) -> str:
    """Stands in for an address in NOT NULL columns; unique per person, reaches nobody."""
    return f"erased-{user_id.hex}{ERASED_DOMAIN}"


def erase_personal_data(
    session: Session,
    organization: Organization,
    target_user_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> dict[str, Any]:
    """Erase the person's personal data from `organization`; returns what was done: the rows
    this request erased (counts; `userRowErased` says whether the person's row is erased).

    A repeat (the membership still ended by an earlier erasure here) erases again what reached
    the gym since (decisions s52) and is audited only when it erased something: one that found
    nothing left answers its zeros and writes no second `personal_data.erased` row."""
    membership = membership_of(session, organization.id, target_user_id)
    if membership.role is Role.owner:
        raise conflict(codes.ERASURE_OWNER, "the owner's own data cannot be erased from their gym")
    person = session.get(User, target_user_id)
    # The lists read in Python (a bulk invite's) compare by address_keys, the columns by
    # same_address: one rule (str.lower() missed 'ipek@' for 'İpek@' and took 'i\u0307pek@').
    address = (person.email or "").strip()
    # The gym's queued work first: a worker holds a bulk invite (or an import) locked while it
    # invites an address (or registers rows), writing invitations, users and memberships, so
    # erasure waits for that step's commit rather than scrub around it or lock in the other
    # order; each worker holds one job, so batches then imports makes no cycle.
    bulk_invites = _bulk_invites(session, organization.id, person, address)
    import_rows = _import_rows(session, organization.id, person, address)
    # The person's leads before their membership (a lead's conversion locks its lead, then
    # registers): a conversion in flight is waited for, and its member is then ended here.
    session.execute(
        select(Lead.id).where(_leads_of(organization.id, person, address)).with_for_update()
    ).all()
    # Every membership the member's seats touch, in one id order, before its own is read
    # again: locked first alone, the members waiting in its classes came after it (in
    # end_membership), and two members each waiting for the other's seat deadlocked.
    lock_leaving(session, membership, now=now)
    # Read again under its lock, as that address's commit left it (without its organization,
    # which the mapping joins in: FOR UPDATE refuses an outer join).
    session.scalar(
        select(Membership)
        .where(Membership.id == membership.id)
        .options(lazyload(Membership.organization))
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    repeat = membership.status is MembershipStatus.cancelled and is_erased(session, membership)
    membership.invitation_held = False
    membership.national_id_ciphertext = None  # this gym's copy; another gym's stays with it
    done = {
        **end_membership(session, membership, actor_user_id=actor_user_id, now=now),
        "bridgeOpsWithdrawn": mirror.member_erased(session, membership, now=now),
        "joinSubmissions": _submissions(session, organization.id, person, address),
        "leads": _leads(session, organization.id, person, address),
        "invitations": _invitations(session, organization.id, person, address),
        "bulkInvites": bulk_invites,
        "importRows": import_rows,
        "tasks": _tasks(session, organization.id, person, address),
        "auditRows": _audit_rows(session, organization.id, person, address),
        "retentionTexts": _retention_texts(session, organization.id, person),
        "rosterEntries": _roster(session, organization.id, membership, address),
        "pushRegistrations": _push_registrations(session, organization.id, person, now=now),
        "userRowErased": False,
    }
    row_changed = False
    if not _held_elsewhere(session, organization.id, person):
        row_changed = _erase_row(session, person, now=now)
        done["userRowErased"] = True
    done["retiredRowsErased"] = _retired_rows(
        session, organization.id, person, all_of_them=done["userRowErased"], now=now
    )
    if repeat and not row_changed and not any(n for k, n in done.items() if k != "userRowErased"):
        return done
    emit(
        session,
        EventKind.audit,
        ERASURE_ACTION,
        at=now,
        aggregate_type="user",
        aggregate_id=person.id,
        organization_id=organization.id,
        actor_user_id=actor_user_id,
        payload=done,
    )
    session.flush()
    return done


def _submissions(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    match = [JoinSubmission.user_id == person.id]
    if address:
        match.append(same_address(JoinSubmission.email, address))
    return session.execute(
        update(JoinSubmission)
        .where(JoinSubmission.organization_id == org_id, or_(*match))
        .values(email=None, user_id=None, ip=None, user_agent=None, data={})
    ).rowcount


def _leads_of(org_id: uuid.UUID, person: User, address: str):
    """The gym's leads of the person: converted to them, or under their address."""
    match = [Lead.converted_user_id == person.id]
    if address:
        match.append(same_address(Lead.email, address))
    return (Lead.organization_id == org_id) & or_(*match)


def _leads(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    erased = _erased_address(person.id)
    return session.execute(
        update(Lead)
        .where(
            _leads_of(org_id, person, address),
            or_(Lead.name != ERASED, Lead.email != erased, Lead.status != "closed"),
        )
        .values(name=ERASED, email=erased, status="closed")
    ).rowcount


def _invitations(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    # The gym's profile's link request names the person by profile too, whatever its address.
    match = [Invitation.user_id == person.id, Invitation.profile_user_id == person.id]
    if address:
        match.append(same_address(Invitation.email, address))
    erased = _erased_address(person.id)
    return session.execute(
        update(Invitation)
        .where(Invitation.organization_id == org_id, or_(*match), Invitation.email != erased)
        .values(email=erased)
    ).rowcount


def _bulk_invites(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    """The gym's bulk invites that list the address (as given, or in another case or spacing):
    replaced in the list and in its outcome."""
    if not address:
        return 0
    erased = _erased_address(person.id)
    batches = session.scalars(
        select(InvitationBatch)
        .where(InvitationBatch.organization_id == org_id)
        .order_by(InvitationBatch.id)  # one order for every locker: no deadlock between them
        .with_for_update()
    ).all()
    listed = {email for batch in batches for email in batch.emails}
    listed |= {result["email"] for batch in batches for result in batch.results}
    keys = address_keys(session, [address, *listed])

    def named(email: str) -> bool:
        return keys[email] == keys[address]

    changed = 0
    for batch in batches:
        if not any(named(email) for email in batch.emails):
            continue
        batch.emails = [erased if named(email) else email for email in batch.emails]
        batch.results = [
            {**result, "email": erased} if named(result["email"]) else result
            for result in batch.results
        ]
        changed += 1
    return changed


def _import_rows(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    """The rows of the gym's roster imports under the address: address and name replaced (a
    queued one is then not registered)."""
    imports = select(MemberImport.id).where(MemberImport.organization_id == org_id)
    session.execute(imports.order_by(MemberImport.id).with_for_update()).all()
    if not address:
        return 0
    return session.execute(
        update(MemberImportRow)
        .where(
            MemberImportRow.import_id.in_(imports),
            same_address(func.trim(MemberImportRow.email), address),
        )
        .values(email=_erased_address(person.id), name=ERASED)
    ).rowcount


def _tasks(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    """The gym's join-checkout follow-ups filed for the address (in their title and data)."""
    if not address:
        return 0
    rows = session.scalars(
        select(Task).where(
            Task.organization_id == org_id,
            Task.subject_type == "join_checkout",
            same_address(Task.data["email"].as_string(), address),
        )
    ).all()
    for row in rows:
        row.title = checkout_task_title(None)
        row.detail = None  # the reason the join form sent, its own words
        row.data = {**row.data, "email": _erased_address(person.id)}
    return len(rows)


def _roster(session: Session, org_id: uuid.UUID, membership: Membership, address: str) -> int:
    """The bridge's stored copy of the external user standing for the person (the roster
    import's names and address; the owner's inbox shows them): the linked one, or one under
    the address. What the external system holds is its own to erase."""
    match = []
    linked = entity_map.find(session, org_id, EntityType.member, membership.id)
    if linked is not None:
        match.append(RosterEntry.external_id == linked.external_id)
    if address:
        match.append(same_address(RosterEntry.email, address))
    if not match:
        return 0
    named = or_(
        RosterEntry.first_name.is_not(None),
        RosterEntry.last_name.is_not(None),
        RosterEntry.email.is_not(None),
    )
    return session.execute(
        update(RosterEntry)
        .where(RosterEntry.organization_id == org_id, or_(*match), named)
        .values(first_name=None, last_name=None, email=None)
    ).rowcount


def _push_registrations(session: Session, org_id: uuid.UUID, person: User, *, now: datetime) -> int:
    """The person's devices registered for the gym's pushes: revoked and the token forgotten
    (personal data; the person, no longer a member, could not revoke it: that route needs a
    membership). Its digest becomes one of nothing the device holds, so a new registration of
    the device is a row of its own."""
    rows = session.scalars(
        select(PushRegistration).where(
            PushRegistration.organization_id == org_id,
            PushRegistration.user_id == person.id,
            PushRegistration.token != ERASED,  # forgotten by an earlier erasure
        )
    ).all()
    for row in rows:
        if row.revoked_at is None:
            row.revoked_at, row.revoked_reason = now, "erased"
        row.token = ERASED
        row.token_sha256 = hashlib.sha256(f"erased:{row.id}".encode()).hexdigest()
    return len(rows)


def _audit_rows(session: Session, org_id: uuid.UUID, person: User, address: str) -> int:
    """This gym's audit rows about the person, or naming the address (a blocked join, a
    refused registration), keep what happened, not the private fields (addresses, IPs)."""
    about = (AuditLog.target_type == "user") & (AuditLog.target_id == str(person.id))
    if address:
        about = about | same_address(AuditLog.data["email"].as_string(), address)
    rows = session.scalars(select(AuditLog).where(AuditLog.organization_id == org_id, about)).all()
    scrubbed = 0
    for row in rows:
        if any(k in (row.data or {}) for k in _PRIVATE_AUDIT_FIELDS):
            row.data = {k: v for k, v in row.data.items() if k not in _PRIVATE_AUDIT_FIELDS}
            scrubbed += 1
    return scrubbed


def _retention_texts(session: Session, org_id: uuid.UUID, person: User) -> int:
    """The person's own words on their cancellation notices and staff's notes of contacts about
    them: free text, which may say anything (a phone number, a health detail). The reason code,
    the channel and the dates stay: a case's outcome reads them."""
    notices = session.execute(
        update(CancellationNotice)
        .where(
            CancellationNotice.organization_id == org_id,
            CancellationNotice.user_id == person.id,
            CancellationNotice.reason_text.is_not(None),
        )
        .values(reason_text=None)
        .execution_options(synchronize_session="fetch")
    ).rowcount
    cases = select(RetentionCase.id).where(
        RetentionCase.organization_id == org_id, RetentionCase.user_id == person.id
    )
    contacts = session.execute(
        update(RetentionContact)
        .where(RetentionContact.case_id.in_(cases), RetentionContact.note.is_not(None))
        .values(note=None)
        .execution_options(synchronize_session="fetch")
    ).rowcount
    return notices + contacts


def _held_elsewhere(session: Session, org_id: uuid.UUID, person: User) -> bool:
    """Another live gym holds the person, or a live login is theirs. A login the identity
    provider deleted (user.deleted) is no one's: its row kept the name and address for good,
    seen by no gym (rosters leave deleted rows out) and reached by no sign-in. A deleted gym's
    memberships stay as they were, and no one can erase from it any more: counted, they kept the
    row for good."""
    if person.identity_id is not None and person.deleted_at is None:
        return True
    other = session.scalar(
        select(func.count())
        .select_from(Membership)
        .join(Organization, Organization.id == Membership.organization_id)
        .where(
            Membership.user_id == person.id,
            Membership.organization_id != org_id,
            Membership.status != MembershipStatus.cancelled,
            Organization.deleted_at.is_(None),
        )
    )
    return bool(other)


def _retired_rows(
    session: Session, org_id: uuid.UUID, person: User, *, all_of_them: bool, now: datetime
) -> int:
    """The rows a link retired into the person (users.folded_into_id): this gym's membership
    kept there (ended, with the national id it collected) loses the id, and a row this gym made
    (its desk's profile, the name it typed) is erased, every one when the person's own row
    was. Left alone, the link kept on them what erasure took from the row that goes on. How
    many rows this request erased (an earlier erasure's are not counted again)."""
    retired = session.scalars(select(User).where(User.folded_into_id == person.id)).all()
    if not retired:
        return 0
    addresses = {row.id: (row.email or "").strip() for row in retired}
    kept_there = session.scalars(
        select(Membership)
        .where(Membership.organization_id == org_id, Membership.user_id.in_(list(addresses)))
        .options(lazyload(Membership.organization))  # FOR UPDATE refuses the outer join
        .order_by(Membership.id)
        .with_for_update()
    ).all()
    for membership in kept_there:  # as the person's own: its id, its bridge ops, its roster copy
        membership.national_id_ciphertext = None
        membership.invitation_held = False
        mirror.member_erased(session, membership, now=now)
        _roster(session, org_id, membership, addresses[membership.user_id])
    erased = 0
    for row in retired:
        if (all_of_them or row.signup_organization_id == org_id) and _erase_row(
            session, row, now=now
        ):
            erased += 1
    return erased


def _erase_row(session: Session, person: User, *, now: datetime) -> bool:
    """The row no one else holds: its name, address and avatar, and where its sign-ins came
    from (the IP, browser and city of each session; their times stay, the ownership trail's).
    False when an earlier erasure left nothing of it to erase (the row is then not written)."""
    sessions = session.execute(
        update(UserSession)
        .where(
            UserSession.user_id == person.id,
            or_(
                UserSession.ip.is_not(None),
                UserSession.user_agent.is_not(None),
                UserSession.city.is_not(None),
                UserSession.country.is_not(None),
            ),
        )
        .values(ip=None, user_agent=None, city=None, country=None)
    ).rowcount
    kept = (
        person.email,
        person.name,
        person.image_url,
        person.email_verified_at,
        person.email_verified_by,
    )
    if not sessions and person.deleted_at is not None and all(v is None for v in kept):
        return False
    person.email = None
    person.name = None
    person.image_url = None
    person.email_verified_at = None
    person.email_verified_by = None
    person.deleted_at = person.deleted_at or now
    person.updated_at = now
    return True
