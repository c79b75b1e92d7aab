"""A gym with one person per role, each able to call the API with a real token."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import Base, Membership, Organization, Role, User
from tests import factories
from tests.conftest import NOW


@dataclass
class Person:
    user: User
    membership: Membership | None
    headers: dict[str, str]


@dataclass
class Gym:
    organization: Organization
    people: dict[Role, Person]

    @property
    def id(self):
        return self.organization.id

    def __getitem__(self, role: Role) -> Person:
        return self.people[role]


def signed_in(idp, session, *, identity_id, email, verified=True, **fields) -> Person:
    user = factories.user(
        session,
        identity_id=identity_id,
        email=email,
        email_verified_at=NOW if verified else None,
        **fields,
    )
    token = idp.token(identity_id, now=NOW)
    return Person(user, None, {"Authorization": f"Bearer {token}"})


@pytest.fixture
def gym(session, idp) -> Gym:
    organization = factories.organization(session, name="Iron Temple")
    people = {}
    for role in Role:
        person = signed_in(
            idp, session, identity_id=f"user_{role.value}", email=f"{role.value}@iron.example"
        )
        person.membership = factories.membership(
            session, user=person.user, organization=organization, role=role
        )
        people[role] = person
    session.commit()
    return Gym(organization, people)


@pytest.fixture
def outsider(session, idp) -> Person:
    person = signed_in(idp, session, identity_id="user_outsider", email="outsider@else.example")
    session.commit()
    return person


NOT_STATE = {"user_sessions", "job_runs", "rate_windows"}  # bookkeeping, not what a refusal
# may not touch (a refused attempt still spends its rate-limit budget)


def snapshot(session: Session) -> dict[str, list[str]]:
    """Every row of every table: equal snapshots mean nothing was written or altered."""
    session.expire_all()
    return {
        table.name: sorted(repr(tuple(row)) for row in session.execute(select(table)))
        for table in Base.metadata.sorted_tables
        if table.name not in NOT_STATE
    }


@pytest.fixture
def platform_admin(session, idp) -> Person:
    """A platform admin: platformRole admin in the provider's private metadata."""
    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={"platformRole": "admin"})
    person = signed_in(idp, session, identity_id="user_ops", email="ops@gymctl.example")
    session.commit()
    return person
