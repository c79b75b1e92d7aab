"""The three ways a gym creates members (spec A 5.3): desk registration by staff, conversion of a
lead, and a CSV import. Rows are created without an identity (Unproven until the person signs
in); an address that belongs to an unproven login is refused with STAFF_REGISTRATION_UNVERIFIED,
so a gym can never attach its records to a login whose owner is unknown.

Tenant isolation: a gym only ever gets its own profile row. A proven login under the address
(someone's account, perhaps another gym's member) is never attached, changed or revealed: the gym
registers its own profile exactly as for an unknown address, and the person is asked by email to
link it (an invitation they accept). Another gym's unlinked profile is not reused either (its name
and data are that gym's)."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.access import codes, staff_queue
from gymctl.access.erased import is_erased_address
from gymctl.access.invitations import Outreach, normalize_email, request_link
from gymctl.access.memberships import active_member_count, end_sales_grant
from gymctl.bridge import mirror
from gymctl.db import advisory_lock
from gymctl.errors import DomainError, conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.identity.users import address_keys
from gymctl.models import (
    ACTIVE_MEMBER_CAP,
    Lead,
    MemberImport,
    MemberImportRow,
    Membership,
    MembershipStatus,
    Organization,
    Role,
    User,
)
from gymctl.models.identity import same_address


@dataclass(frozen=True)
class Registrar:
    """Who registers, from where (what the refusal audit records), and how a person with a
    login is asked to link."""

    organization: Organization
    staff_user_id: uuid.UUID
    ip: str | None
    path: str
    outreach: Outreach


def _refuse_unverified(
    session: Session, registrar: Registrar, email: str, *, role: Role, now: datetime
) -> DomainError:
    emit(
        session,
        EventKind.audit,
        "membership.registration_refused",
        at=now,
        aggregate_type="organization",
        aggregate_id=registrar.organization.id,
        organization_id=registrar.organization.id,
        actor_user_id=registrar.staff_user_id,
        payload={
            "staffUserId": str(registrar.staff_user_id),
            "organizationId": str(registrar.organization.id),
            "path": registrar.path,
            "attemptedRole": role.value,
            "reason": "email_unproven",
        },
        private={"email": email, "ip": registrar.ip},
    )
    return unprocessable(
        codes.STAFF_REGISTRATION_UNVERIFIED,
        "this address belongs to a login whose email is not proven",
        audited=True,
    )


def _people(session: Session, email: str) -> list[User]:
    return list(
        session.scalars(
            select(User)
            .where(same_address(User.email, email), User.deleted_at.is_(None))
            .order_by(User.created_at, User.id)
        )
    )


def _unproven_login(people: list[User]) -> bool:
    return any(p.identity_id is not None and p.email_verified_at is None for p in people)


def register_member(
    session: Session,
    registrar: Registrar,
    *,
    email: str,
    name: str | None,
    origin: str,
    now: datetime,
    role: Role = Role.member,
) -> tuple[User, bool]:
    """Make `email` an active member of the gym; (the gym's row for the person, created
    membership). The refusal is audited in its own right, so callers commit it even though the
    request fails."""
    email = normalize_email(email)
    org_id = registrar.organization.id
    # The gym's look for the person and its insert, one at a time: two at once (a double submit,
    # a second desk) each read no one, and each made a profile (no unique key on addresses).
    hold_registrations(session, org_id)
    people = _people(session, email)
    if _unproven_login(people):
        raise _refuse_unverified(session, registrar, email, role=role, now=now)
    member = _active_member_here(session, org_id, people)
    if member is not None:
        return member, False
    # The gym's own earlier profile under the address, else a new one: never another's row.
    person = next(
        (p for p in people if p.identity_id is None and p.signup_organization_id == org_id), None
    )
    if person is None:
        person = User(
            email=email,
            name=name,
            signup_origin=origin,
            signup_organization_id=org_id,
            created_by_user_id=registrar.staff_user_id,
            created_at=now,
            updated_at=now,
        )
        session.add(person)
        session.flush()
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == org_id, Membership.user_id == person.id
        )
    )
    if membership is None:
        membership = Membership(organization_id=org_id, user_id=person.id, created_at=now)
        session.add(membership)
    membership.role = role
    membership.status = MembershipStatus.active
    membership.updated_at = now
    end_sales_grant(session, membership, actor_user_id=registrar.staff_user_id, now=now)
    emit(
        session,
        EventKind.audit,
        "membership.registered",
        at=now,
        aggregate_type="user",
        aggregate_id=person.id,
        organization_id=org_id,
        actor_user_id=registrar.staff_user_id,
        payload={"origin": origin},
    )
    session.flush()
    login = next((p for p in people if p.identity_id is not None), None)
    if login is not None:
        request_link(
            session,
            registrar.outreach,
            organization=registrar.organization,
            login=login,
            profile=person,
            role=role,
            actor_user_id=registrar.staff_user_id,
            now=now,
        )
    mirror.member_created(session, membership, now=now)
    return person, True


def _active_member_here(session: Session, org_id: uuid.UUID, people: list[User]) -> User | None:
    """The person's row that is already an active member of this gym (the gym knows it)."""
    if not people:
        return None
    return session.scalar(
        select(User)
        .join(Membership, Membership.user_id == User.id)
        .where(
            Membership.organization_id == org_id,
            Membership.status == MembershipStatus.active,
            User.id.in_([p.id for p in people]),
        )
        .limit(1)
    )


def create_lead(
    session: Session, org_id: uuid.UUID, *, name: str, email: str, now: datetime
) -> Lead:
    if not (name or "").strip():
        raise unprocessable(codes.NAME_REQUIRED, "a lead needs a name")
    lead = Lead(
        organization_id=org_id, name=name.strip(), email=normalize_email(email), created_at=now
    )
    session.add(lead)
    session.flush()
    return lead


def convert_lead(
    session: Session, registrar: Registrar, lead_id: uuid.UUID, *, now: datetime
) -> User:
    # The lead's row first, read as it is now (the lock order: leads, then memberships, as
    # erasure takes them): an erasure that committed meanwhile is seen (its stand-in address),
    # and one that comes later waits for this conversion, then ends what it registered. Read
    # unlocked, a conversion waiting for the gym's registrations lock went on with the address
    # and name erasure had scrubbed, and registered the erased person again.
    lead = session.scalar(
        select(Lead)
        .where(Lead.id == lead_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if (
        lead is None
        or lead.organization_id != registrar.organization.id
        # Erasure closed it and put a stand-in for the person's address and name: converted,
        # it registered a member named "erased" under an address reaching no one, sent on to
        # the gym's external system (imports and bulk invites skip such an address too).
        or is_erased_address(lead.email)
    ):
        raise not_found(codes.LEAD_NOT_FOUND, "no such lead")
    if lead.status == "converted":
        raise conflict(codes.LEAD_CONVERTED, "this lead is already a member")
    person, _created = register_member(
        session, registrar, email=lead.email, name=lead.name, origin="lead", now=now
    )
    lead.status = "converted"
    lead.converted_user_id = person.id
    session.flush()
    return person


CREATED = "created"
EXISTING = "existing"
UNVERIFIED = "unverified"
OUTCOMES = (CREATED, EXISTING, UNVERIFIED)  # a row's, with ImportResults' list of each
NAME_CHARS = User.__table__.c.name.type.length  # a longer name would not fit the user's row
MAX_ROSTER_BYTES = 5 * 1024 * 1024  # a roster: tens of thousands of rows


@dataclass
class ImportResults:
    """What an import did, by row outcome, each list in CSV order."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    invalid: list[dict[str, Any]] = field(default_factory=list)

    def add(self, outcome: str, email: str) -> None:
        getattr(self, outcome).append(email)

    def as_dict(self) -> dict[str, Any]:
        return {
            "members": {
                "created": self.created,
                "existing": self.existing,
                "unverified": self.unverified,
                "invalid": self.invalid,
            }
        }


@dataclass(frozen=True)
class ImportPlan:
    """The rows to import, (address, name) in CSV order, and the rows refused by themselves."""

    rows: list[tuple[str, str]]
    invalid: list[dict[str, Any]]


def parse_members_csv(content: bytes) -> list[dict[str, str]]:
    """Rows of a members CSV (UTF-8) with an `email` column and optional `name` (header names
    are case-insensitive). Lines may end in LF, CRLF or a lone CR (old Mac exports); a file the
    csv module cannot read (a field past its size limit) is import_invalid, as HTTP and the CLI
    both read it. Past MAX_ROSTER_BYTES it is refused unread (HTTP answers 413 before)."""
    if len(content) > MAX_ROSTER_BYTES:
        raise unprocessable(
            codes.IMPORT_INVALID, f"the CSV is over {MAX_ROSTER_BYTES} bytes: split it"
        )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise unprocessable(codes.IMPORT_INVALID, "the CSV must be UTF-8") from None
    # newline="": the csv module's own line handling, which knows all three endings and a
    # quoted field's line breaks.
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""))
    try:
        header = next(reader, [])
        columns = {name.strip().lower(): index for index, name in enumerate(header)}
        if "email" not in columns:
            raise unprocessable(codes.IMPORT_INVALID, "the CSV needs an email column")
        rows = []
        ended = reader.line_num
        for fields in reader:
            # The line the record starts on, as a spreadsheet numbers it: blank lines count (a
            # refusal's row after one pointed at the line before it).
            line, ended = ended + 1, reader.line_num
            if not fields:
                continue
            rows.append({"email": _field(fields, columns, "email"),
                         "name": _field(fields, columns, "name"), "line": line})  # fmt: skip
        return rows
    except csv.Error as error:
        raise unprocessable(codes.IMPORT_INVALID, f"the CSV is unreadable: {error}") from None


def _field(fields: list[str], columns: dict[str, int], name: str) -> str:
    index = columns.get(name)
    return fields[index].strip() if index is not None and index < len(fields) else ""


def plan_import(
    session: Session,
    organization: Organization,
    rows: Iterable[dict[str, str]],
    *,
    waiting: Iterable[str] = (),
) -> ImportPlan:
    """The refusals before anything is created: each row's own (a NUL, an invalid or repeated
    address, a name longer than a user's), and the whole import's when the rows that would
    become new active members, with the addresses still `waiting` in the gym's queued imports,
    exceed the tier's cap."""
    planned: list[tuple[str, str]] = []
    invalid: list[dict[str, Any]] = []
    readable: list[tuple[int, str, str]] = []
    for position, row in enumerate(rows, start=2):
        number = row.get("line") or position  # the file's line (parse_members_csv), else the count
        if "\x00" in row["email"] or "\x00" in (row.get("name") or ""):
            invalid.append({"row": number, "reason": "nul_character"})
            continue
        try:
            readable.append((number, normalize_email(row["email"]), row.get("name") or ""))
        except DomainError:
            invalid.append({"row": number, "reason": "email_invalid"})
    # A repeated address as every lookup reads it (address_keys): by str.lower() two rows of
    # one address went through (the second then found the first's person), or two were refused.
    keys = address_keys(session, (email for _, email, _ in readable))
    seen: set[str] = set()
    for number, email, name in readable:
        if keys[email] in seen:
            invalid.append({"row": number, "reason": "duplicate"})
            continue
        if len(name) > NAME_CHARS:
            invalid.append({"row": number, "reason": "name_too_long"})
            continue
        seen.add(keys[email])
        planned.append((email, name))
    invalid.sort(key=lambda refusal: refusal["row"])
    check_cap(session, organization, [*(email for email, _ in planned), *waiting])
    return ImportPlan(planned, invalid)


def check_cap(session: Session, organization: Organization, emails: list[str]) -> None:
    """Refuse (member_cap_exceeded) when these addresses would take the gym past its tier's cap
    of active members: those neither active here already nor an unproven login's (refused)."""
    cap = ACTIVE_MEMBER_CAP[organization.tier]
    if cap is None:
        return
    newcomers = _newcomers(session, organization.id, emails)
    if active_member_count(session, organization.id) + newcomers > cap:
        raise unprocessable(
            codes.MEMBER_CAP_EXCEEDED,
            f"the {organization.tier.value} tier allows {cap} active members",
            cap=cap,
            wouldAdd=newcomers,
        )


def _newcomers(session: Session, org_id: uuid.UUID, emails: list[str]) -> int:
    """Set-based, 500 addresses a statement: a roster asks a handful of questions, not two a
    row."""
    lowered = sorted(set(address_keys(session, emails).values()))
    left_out: set[str] = set()
    address = func.lower(User.email)
    for start in range(0, len(lowered), 500):
        chunk = lowered[start : start + 500]
        left_out.update(
            session.scalars(
                select(address).where(
                    address.in_(chunk),
                    User.deleted_at.is_(None),
                    User.identity_id.is_not(None),
                    User.email_verified_at.is_(None),
                )
            )
        )
        left_out.update(
            session.scalars(
                select(address)
                .join(Membership, Membership.user_id == User.id)
                .where(
                    address.in_(chunk),
                    Membership.organization_id == org_id,
                    Membership.status == MembershipStatus.active,
                )
            )
        )
    return sum(1 for email in lowered if email not in left_out)


def import_row(
    session: Session, registrar: Registrar, email: str, name: str, *, now: datetime
) -> str:
    """One planned row: refused (and the refusal audited) when the address is an unproven
    login's, else registered; its outcome."""
    if _unproven_login(_people(session, email)):
        _refuse_unverified(session, registrar, email, role=Role.member, now=now)
        return UNVERIFIED
    _person, created = register_member(
        session, registrar, email=email, name=name or None, origin="import", now=now
    )
    return CREATED if created else EXISTING


def imports_in_flight(session: Session, organization_id: uuid.UUID) -> tuple[list, list[str]]:
    """The gym's queued imports (ids) and the addresses they have yet to register, read under
    the gym's import lock, which the caller then holds to its transaction's end: two imports
    asked together (over HTTP, or one there and one at the CLI) each passed the cap alone,
    then one stopped half done, or both."""
    advisory_lock(session, f"member_imports:{organization_id}")
    unfinished = list(
        session.scalars(
            select(MemberImport.id).where(
                MemberImport.organization_id == organization_id,
                MemberImport.status == staff_queue.QUEUED,
            )
        )
    )
    if not unfinished:
        return unfinished, []
    rows = session.scalars(
        select(MemberImportRow.email).where(
            MemberImportRow.import_id.in_(unfinished), MemberImportRow.outcome.is_(None)
        )
    )
    return unfinished, [email for email in rows if not is_erased_address(email)]  # never made


def hold_registrations(session: Session, organization_id: uuid.UUID) -> None:
    """The gym's registrations lock (`register_member` takes it for each address) held before
    the cap is counted: a count that ran while another import's uncommitted members held it
    missed them, and both went in (180 active members on a 150 tier)."""
    session.connection()  # the write transaction first (db.advisory_lock on SQLite)
    advisory_lock(session, f"registrations:{organization_id}")
