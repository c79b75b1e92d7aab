"""Joining through a link twice at once (a double tap, the mobile app's retry) joins once: the
second answers as a repeat does (200, joined false), never a 500. On PostgreSQL each request
read no membership and both inserted one; the second broke the one-membership-per-gym key."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from gymctl.access import join
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, Membership, User
from tests import factories
from tests.access.test_join import make_link
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_second_join_while_the_first_commits_is_a_repeat(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.organization(session, name="Twice Gym")
        token = make_link(session, gym).token
        person = factories.user(session, identity_id="user_twice", email="twice@example.test")
        session.commit()
    answers = []

    def second():
        with factory() as session:
            try:
                _, joined = join.join_signed_in(
                    session, token, session.get(User, person.id), ip=None, user_agent=None, now=NOW
                )
                session.commit()
                answers.append(joined)
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        _, joined = join.join_signed_in(
            first, token, first.get(User, person.id), ip=None, user_agent=None, now=NOW
        )
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        first.commit()
    thread.join(timeout=30)

    assert (joined, answers) == (True, [False])
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Membership)) == 1
        joins = select(func.count()).where(AuditLog.action == "membership.joined")
        assert session.scalar(joins) == 1
