"""A lead converted while the gym erases the person does not bring them back (decisions s52: "A
lead erasure closed is not converted again"). A hunt in s54 found the conversion reading its
lead unlocked, then waiting for the gym's registrations lock (another desk registration in
flight): the erasure committed meanwhile, and the conversion went on with the address and name
it had read, registering the erased person again. Now the lead is locked first and erasure
locks the person's leads before their membership: the erasure waits for the conversion, then
ends what it registered (PostgreSQL: the embedded default runs one writer at a time)."""

from __future__ import annotations

import threading

from sqlalchemy import select

from gymctl.access.erasure import erase_personal_data
from gymctl.access.registrations import Registrar, convert_lead, create_lead
from gymctl.db import advisory_lock, get_engine, session_factory
from gymctl.models import Lead, Membership, MembershipStatus, Organization, Role, User
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait

ADDRESS = "erase.me@example.test"


def test_a_lead_converted_while_the_person_is_erased_does_not_bring_them_back(committed_pg):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        gym = factories.organization(session, name="Lead Gym")
        owner = factories.user(session, email="owner.lead@example.test")
        factories.membership(session, organization=gym, user=owner, role=Role.owner)
        person = factories.user(session, identity_id=None, email=ADDRESS, name="Erase Me")
        factories.membership(session, organization=gym, user=person)
        lead = create_lead(session, gym.id, name="Erase Me", email=ADDRESS, now=NOW)
        session.commit()
        gym_id, owner_id, person_id, lead_id = gym.id, owner.id, person.id, lead.id
    answers: list[str] = []

    def conversion() -> None:
        with factory() as session:
            registrar = Registrar(
                session.get(Organization, gym_id), owner_id, ip=None, path="/lead", outreach=None
            )
            convert_lead(session, registrar, lead_id, now=NOW)
            session.commit()
            answers.append("converted")

    def erasure() -> None:
        with factory() as session:
            erase_personal_data(
                session, session.get(Organization, gym_id), person_id, actor_user_id=owner_id,
                now=NOW,
            )  # fmt: skip
            session.commit()
            answers.append("erased")

    with factory() as desk:  # another registration of the gym, in flight
        advisory_lock(desk, f"registrations:{gym_id}")
        converting = threading.Thread(target=conversion)
        converting.start()
        wait_for_a_lock_wait(engine)  # the conversion, for the registrations lock
        erasing = threading.Thread(target=erasure)
        erasing.start()
        wait_for_a_lock_wait(engine, count=2)  # the erasure, for the lead the conversion holds
        desk.rollback()
    converting.join(timeout=30)
    erasing.join(timeout=30)

    assert answers == ["converted", "erased"]
    with factory() as session:
        back = session.execute(
            select(User.email, Membership.status)
            .join(Membership, Membership.user_id == User.id)
            .where(
                Membership.organization_id == gym_id,
                Membership.status != MembershipStatus.cancelled,
            )
            .where(User.email == ADDRESS)
        ).all()
        assert back == []
        assert session.get(Lead, lead_id).email != ADDRESS
