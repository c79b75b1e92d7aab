"""The tier cap (spec A 8: "Import | refused up front when it would exceed the tier's
active-member cap") with a roster queued over HTTP, the CLI's import (`gymctl members import`,
member_imports.import_here) and the desk's registrations of the same gym. A hunt in s54 found
the CLI's import counting none of the rows the gym's queued imports had yet to register (it
passed the cap alone, and the queued import, accepted up front, stopped half done), and an
import's chunk counting the gym's members before it held the gym's registrations lock
(members another transaction was registering were missed, and both went in)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from gymctl.access import member_imports
from gymctl.access.registrations import Registrar, register_member
from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models import Membership, MembershipStatus, Organization, Role
from gymctl.models.organizations import Tier
from tests import factories
from tests.access.test_member_imports import read, roster, upload, work
from tests.conftest import NOW, wait_for_a_lock_wait

pytestmark = pytest.mark.embedded


def _cli_registrar(session, gym_id, staff_user_id) -> Registrar:
    return Registrar(
        organization=session.get(Organization, gym_id),
        staff_user_id=staff_user_id,
        ip=None,
        path="cli: gymctl members import",
        outreach=None,
    )


def _active_members(session, gym_id) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count()).where(
            Membership.organization_id == gym_id,
            Membership.role == Role.member,
            Membership.status == MembershipStatus.active,
        )
    )


def test_the_cli_import_counts_the_rows_a_queued_import_has_yet_to_register(
    app, client, gym, session, session_factory
):
    """An HTTP import queued, then the CLI's import of the same gym: the CLI's counts the queued
    rows and is refused up front, and the queued import finishes whole."""
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter  # 150; the fixture's gym has one active member
    session.commit()
    queued = upload(client, gym, roster(*(f"a{n}@example.test" for n in range(100))))
    assert queued.status_code == 202

    rows = [{"email": f"b{n}@example.test", "name": ""} for n in range(100)]
    registrar = _cli_registrar(session, gym.id, gym[Role.owner].user.id)
    refused = None
    try:  # 1 + 100 waiting + 100 > 150
        member_imports.import_here(
            session_factory, registrar, gym[Role.owner].membership.id, rows, now=lambda: NOW
        )
    except DomainError as error:
        refused = error.code

    work(app, session_factory)
    job = read(client, gym, queued.json["id"]).json
    assert (refused, job["status"], job["done"]) == ("member_cap_exceeded", "finished", 100)
    assert _active_members(session, gym.id) == 101


def test_a_chunk_counts_the_members_registered_while_it_waited_for_the_lock(committed_pg):
    """A desk registering 20 members (the gym's registrations lock held, not yet committed)
    while the daemon takes an import's chunk of 40 on a gym of 100 active members (cap 150):
    the chunk waits for the lock, then counts 120 + 40 and stops there (member_cap_exceeded),
    where it counted 100 before the lock and took the gym to 160."""
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        gym = factories.organization(session, name="Capped Gym", tier=Tier.starter)
        owner = factories.user(session, email="owner.capped@example.test")
        staff = factories.membership(session, organization=gym, user=owner, role=Role.owner)
        for n in range(100):
            person = factories.user(session, identity_id=None, email=f"m{n}@example.test")
            factories.membership(session, user=person, organization=gym)
        session.commit()
        gym_id, owner_id, staff_id = gym.id, owner.id, staff.id
    with factory() as session:
        job = member_imports.queue_import(
            session,
            _cli_registrar(session, gym_id, owner_id),
            session.get(Membership, staff_id),
            [{"email": f"q{n}@example.test", "name": ""} for n in range(40)],
            now=NOW,
        )
        session.commit()
        job_id = job.id
    results = {}

    def daemon():
        results["pass"] = member_imports.work_imports(factory, None, now=NOW, monotonic=lambda: 0.0)

    with factory() as desk:
        registrar = _cli_registrar(desk, gym_id, owner_id)
        for n in range(20):
            register_member(desk, registrar, email=f"d{n}@example.test", name=None,
                            origin="desk", now=NOW)  # fmt: skip
        thread = threading.Thread(target=daemon)
        thread.start()
        wait_for_a_lock_wait(engine, rival=thread)
        desk.commit()
    thread.join(timeout=60)

    with factory() as session:
        queued = session.get(member_imports.MemberImport, job_id)
        assert (queued.status, queued.done, queued.error_code) == (
            "failed",
            0,
            "member_cap_exceeded",
        )
        assert _active_members(session, gym_id) == 120
