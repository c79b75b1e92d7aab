"""A slug two owners claim at once is taken for the second: 409 slug_taken, as for a slug taken
earlier, and nothing of the second creation is written (its grant stays claimable). On
PostgreSQL both read the slug free and the second insert broke the unique key (a 500)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.access.gyms import create_gym
from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models import (
    AuditLog,
    Invitation,
    InvitationStatus,
    Membership,
    Organization,
    Role,
    User,
)
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait

SLUG = "granite-gym"


def _future_owner(session, n: int) -> tuple[User, Invitation]:
    """A person with a proven address and a claimable owner grant sent to it."""
    email = f"owner{n}@example.test"
    person = factories.user(session, email=email, email_verified_at=NOW)
    grant = Invitation(
        organization_id=None,
        email=email,
        role=Role.owner,
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(grant)
    session.flush()
    return person, grant


def _count(session, model) -> int:
    return session.scalar(select(func.count()).select_from(model))


def test_a_slug_claimed_by_a_second_owner_while_the_first_commits_is_taken(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        (first_owner, _), (second_owner, second_grant) = (
            _future_owner(session, 1),
            _future_owner(session, 2),
        )
        session.commit()
    answers = []

    def second():
        with factory() as session:
            try:
                create_gym(
                    session, session.get(User, second_owner.id), name="Two", slug=SLUG, now=NOW
                )
                session.commit()
                answers.append("created")
            except DomainError as refused:
                answers.append((refused.status, refused.code))
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        create_gym(first, first.get(User, first_owner.id), name="One", slug=SLUG, now=NOW)
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))  # the second insert waits on the key
        first.commit()
    thread.join(timeout=30)

    assert answers == [(409, "slug_taken")]
    with factory() as session:
        assert _count(session, Organization) == 1
        assert _count(session, Membership) == 1
        created = select(func.count()).where(AuditLog.action == "organization.created")
        assert session.scalar(created) == 1
        grant = session.get(Invitation, second_grant.id)
        assert (grant.status, grant.organization_id) == (InvitationStatus.pending, None)


@pytest.mark.embedded
def test_a_slug_taken_after_the_check_read_it_free_is_slug_taken(engine, session, monkeypatch):
    """The check read the slug free just before a rival's gym was committed: the insert's
    unique key answers as the check does, on both engines (SQLite names the column)."""
    factories.organization(session).slug = SLUG
    session.flush()
    person, grant = _future_owner(session, 1)
    real = session.scalar

    def slug_check_misses(statement, *args, **kwargs):
        if "organizations.slug" in str(statement):
            monkeypatch.setattr(session, "scalar", real)
            return None
        return real(statement, *args, **kwargs)

    monkeypatch.setattr(session, "scalar", slug_check_misses)

    with pytest.raises(DomainError) as refused:
        create_gym(session, person, name="Two", slug=SLUG, now=NOW)

    assert (refused.value.status, refused.value.code) == (409, "slug_taken")
    assert (_count(session, Organization), _count(session, Membership)) == (1, 0)
    assert (grant.status, grant.organization_id) == (InvitationStatus.pending, None)
