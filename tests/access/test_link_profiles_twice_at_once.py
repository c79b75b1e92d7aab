"""Two /users/me at once (the web app and the mobile app) of a login whose address an operator
just confirmed link the gym's profile once (spec A 5.3). On PostgreSQL each read the profile
unlinked; the second folded the login again and audited a second user.linked in the ownership
trail."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from gymctl.access.ownership import settle_ownership
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, Membership, MembershipStatus, User
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_second_settle_while_the_first_commits_answers_the_linked_row(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.organization(session)
        profile = factories.user(session, identity_id=None, email="pat@example.test")
        factories.membership(session, user=profile, organization=gym)
        login = factories.user(
            session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
        )
        session.commit()
    answers = []

    def second():
        with factory() as session:
            try:
                linked = settle_ownership(session, session.get(User, login.id), now=NOW)
                session.commit()
                answers.append(linked.id)
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        linked = settle_ownership(first, first.get(User, login.id), now=NOW)
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=thread)
        first.commit()
    thread.join(timeout=30)

    assert (linked.id, answers) == (profile.id, [profile.id])
    with factory() as session:
        links = select(func.count()).where(AuditLog.action == "user.linked")
        assert session.scalar(links) == 1
        assert session.get(User, profile.id).identity_id == "user_pat"
        active = select(Membership.user_id).where(Membership.status == MembershipStatus.active)
        assert session.scalars(active).all() == [profile.id]
