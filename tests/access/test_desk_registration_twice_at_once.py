"""Registering one address at the desk twice at once (a double submit, a second desk) makes one
profile and one membership: the second answers as a repeat does (created false). On PostgreSQL
each read no one under the address and each made a profile, and the gym had the person twice."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from gymctl.access.registrations import Registrar, register_member
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, Membership, Organization, Role, User
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait

ADDRESS = "twice.desk@example.test"


def test_a_second_desk_registration_while_the_first_commits_is_a_repeat(committed_pg):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        gym = factories.organization(session, name="Desk Gym")
        staff = factories.user(session, email="desk.staff@example.test")
        factories.membership(session, organization=gym, user=staff, role=Role.admin)
        session.commit()

    def registrar(session) -> Registrar:
        organization = session.get(Organization, gym.id)
        return Registrar(organization, staff.id, ip=None, path="/desk", outreach=None)

    answers = []

    def second():
        with factory() as session:
            try:
                _, created = register_member(
                    session, registrar(session), email=ADDRESS, name="B", origin="desk", now=NOW
                )
                session.commit()
                answers.append(created)
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        _, created = register_member(
            first, registrar(first), email=ADDRESS, name="A", origin="desk", now=NOW
        )
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(engine, rival=thread)
        first.commit()
    thread.join(timeout=30)

    assert (created, answers) == (True, [False])
    with factory() as session:
        people = select(func.count()).where(User.email == ADDRESS)
        assert session.scalar(people) == 1
        members = select(func.count()).where(Membership.organization_id == gym.id)
        assert session.scalar(members) == 2  # the staff member and the person, once
        registered = select(func.count()).where(AuditLog.action == "membership.registered")
        assert session.scalar(registered) == 1
