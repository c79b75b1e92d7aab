"""Mark email verified run twice at once (two operators, or a double-clicked admin button)
confirms the address once (spec A 5.3). On PostgreSQL each read the row unproven; the second
waited for the first's write, then answered changed true too and wrote a second
user.email_verified row into the ownership trail, with its own time and operator."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select

from gymctl.access.ownership import mark_email_verified
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, User
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_second_mark_while_the_first_commits_is_a_repeat(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        person = factories.user(session, identity_id="user_sam", email="sam@example.test")
        session.commit()
    answers = []

    def second():
        with factory() as session:
            try:
                changed = mark_email_verified(
                    session,
                    session.get(User, person.id),
                    actor_user_id=None,
                    actor="cli:second",
                    now=NOW + timedelta(seconds=1),
                )
                session.commit()
                answers.append(changed)
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        changed = mark_email_verified(
            first, first.get(User, person.id), actor_user_id=None, actor="cli:first", now=NOW
        )
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=thread)
        first.commit()
    thread.join(timeout=30)

    assert (changed, answers) == (True, [False])
    with factory() as session:
        marks = select(func.count()).where(AuditLog.action == "user.email_verified")
        assert session.scalar(marks) == 1
        row = session.get(User, person.id)
        assert (row.email_verified_at, row.email_verified_by) == (NOW, "cli:first")
