"""Small row factories with meaningful traits; each flushes and returns the row. `make_gym` is
the one gym of every test area: an organization with a person per role asked for."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.models import (
    LegalConsent,
    LegalDocument,
    LegalDocumentType,
    Membership,
    MembershipStatus,
    Organization,
    Role,
    User,
)
from tests.conftest import NOW

_seq = itertools.count(1)


def user(
    session: Session,
    *,
    identity_id: str | None = "auto",
    email: str | None = None,
    deleted_at: datetime | None = None,
    **fields,
) -> User:
    n = next(_seq)
    row = User(
        identity_id=f"user_test{n}" if identity_id == "auto" else identity_id,
        email=email if email is not None else f"person{n}@example.test",
        deleted_at=deleted_at,
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def organization(session: Session, *, name: str | None = None, **fields) -> Organization:
    n = next(_seq)
    row = Organization(name=name or f"Gym {n}", slug=f"gym-{n}", **fields)
    session.add(row)
    session.flush()
    return row


def membership(
    session: Session,
    *,
    user: User,
    organization: Organization,
    role: Role = Role.member,
    status: MembershipStatus = MembershipStatus.active,
    **fields,
) -> Membership:
    row = Membership(
        user_id=user.id, organization_id=organization.id, role=role, status=status, **fields
    )
    session.add(row)
    session.flush()
    return row


def legal_document(
    session: Session, *, type: LegalDocumentType, published_at: datetime, version: str = "1"
) -> LegalDocument:
    row = LegalDocument(
        type=type,
        version=version,
        locale="en",
        url=f"https://legal.example.test/{type}/{version}",
        published_at=published_at,
    )
    session.add(row)
    session.flush()
    return row


def consent(
    session: Session, *, user: User, document: LegalDocument, accepted_at: datetime
) -> LegalConsent:
    row = LegalConsent(user_id=user.id, document_id=document.id, accepted_at=accepted_at)
    session.add(row)
    session.flush()
    return row


@dataclass
class Person:
    user: User
    membership: Membership | None
    headers: dict[str, str] = field(default_factory=dict)  # a bearer token once signed in


@dataclass
class Gym:
    """An organization and its people by role; `owner`/`member` (users) and their memberships
    name the two that billing rows need."""

    organization: Organization
    people: dict[Role, Person]

    @property
    def id(self):
        return self.organization.id

    def __getitem__(self, role: Role) -> Person:
        return self.people[role]

    @classmethod
    def of(cls, membership: Membership) -> Gym:
        """The gym of one membership with that person alone, for rows made for them."""
        return cls(membership.organization, {membership.role: Person(membership.user, membership)})

    @property
    def owner(self) -> User:
        return self.people[Role.owner].user

    @property
    def owner_membership(self) -> Membership:
        return self.people[Role.owner].membership

    @property
    def member(self) -> User:
        return self.people[Role.member].user

    @property
    def membership(self) -> Membership:
        """The member's."""
        return self.people[Role.member].membership


def signed_in(idp, session: Session, *, identity_id, email, verified=True, **fields) -> Person:
    """A user who is an account of the stand-in identity provider `idp`, with a real token."""
    row = user(
        session,
        identity_id=identity_id,
        email=email,
        email_verified_at=NOW if verified else None,
        **fields,
    )
    token = idp.token(identity_id, now=NOW)
    return Person(row, None, {"Authorization": f"Bearer {token}"})


def make_gym(
    session: Session,
    *,
    roles: Iterable[Role] = (Role.owner, Role.member),
    idp=None,
    card_provider_since: datetime | None = None,
    **organization_fields,
) -> Gym:
    """A gym with one person of each of `roles` (by default an owner and a member). Traits:
    `idp` (each person an account of that identity provider, `user_<role>` /
    `<role>@iron.example`, able to call the API with `gym[role].headers`), and
    `card_provider_since` (the gym's card-provider terminal live since then)."""
    organization_row = organization(session, **organization_fields)
    if idp is None:
        people = {role: Person(user(session), None) for role in roles}
    else:
        people = {
            role: signed_in(
                idp, session, identity_id=f"user_{role.value}", email=f"{role.value}@iron.example"
            )
            for role in roles
        }
    for role, person in people.items():
        person.membership = membership(
            session, user=person.user, organization=organization_row, role=role
        )
    gym = Gym(organization_row, people)
    if card_provider_since is not None:
        from tests.billing.cards import connect_card_provider  # it builds on this module

        connect_card_provider(session, gym, since=card_provider_since)
    return gym


def emit_committed(url: str, count: int) -> list[int]:
    """`count` domain events committed to the database at `url`: their outbox ids, in order."""
    import uuid
    from datetime import UTC

    from gymctl.db import get_engine, session_factory, session_scope
    from gymctl.events import EventKind, emit

    at = datetime.now(UTC)
    with session_scope(session_factory(get_engine(url))) as session:
        events = [
            emit(session, EventKind.domain, "gym.opened", at=at, aggregate_type="gym",
                 aggregate_id=str(uuid.uuid4()), payload={"n": n})
            for n in range(count)
        ]  # fmt: skip
        session.flush()
        return [event.id for event in events]
