"""A membership that ended takes no national id (s52). `PUT .../members/:userId/national-id`
wrote onto any membership of the gym, a cancelled one included: after an erasure staff stored a
new national id on the erased member's membership, and the compliance PDF then showed "Erased
member" beside it. It now answers 409 member_not_active, as the desk's charge and a role change
of an ended membership do, and writes nothing; a PUT waiting on an erasure reads it ended."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from gymctl.access import erasure, memberships
from gymctl.access.erased import ERASED_NAME
from gymctl.db import get_engine, session_factory
from gymctl.models import Membership, Organization, Role
from tests import factories
from tests.access import test_national_id as national
from tests.access.conftest import snapshot
from tests.access.test_compliance_pdf import pdf_url, text_of
from tests.access.test_national_id import put
from tests.conftest import NOW, wait_for_a_lock_wait

keyed_settings = national.keyed_settings  # fixtures: settings with NATIONAL_ID_ENCRYPTION_KEY
keyed_client = national.keyed_client


def _end(client, gym, user_id, how: str):
    owner = gym[Role.owner].headers
    if how == "erased":
        answer = client.post(f"/organizations/{gym.id}/members/{user_id}/erasure", headers=owner)
    else:
        answer = client.delete(f"/organizations/{gym.id}/members/{user_id}", headers=owner)
    assert answer.status_code == 200, answer.json


@pytest.mark.embedded  # the demo gym reaches removal, erasure and the PDF: both engines
@pytest.mark.parametrize("how", ["removed", "erased"])
def test_an_ended_membership_takes_no_national_id(keyed_client, session, gym, how):
    person = gym[Role.member].user
    assert put(keyed_client, gym, Role.owner, person.id).status_code == 200
    _end(keyed_client, gym, person.id, how)
    before = snapshot(session)

    for by in (Role.owner, Role.admin):
        again = put(keyed_client, gym, by, person.id, national_id="NEW-0000-1111")
        assert (again.status_code, again.json["code"]) == (409, "member_not_active")
        assert "NEW-0000-1111" not in again.get_data(as_text=True)

    assert snapshot(session) == before
    if how == "erased":
        pdf = keyed_client.get(pdf_url(gym, person.id), headers=gym[Role.owner].headers)
        text = text_of(pdf.data)
        assert ERASED_NAME in text
        assert "not collected" in text
        assert "NEW-0000-1111" not in text


def test_a_national_id_waiting_on_an_erasure_finds_the_membership_ended(committed_pg):
    """The PUT read the membership active, then waited on the erasure's row lock: it wrote its
    ciphertext onto the row the erasure had just cleared and cancelled."""
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.member))
        session.commit()
    person = gym[Role.member].user
    answers: list[str] = []

    def put_while_erasing():
        with factory() as session:
            try:
                member = memberships.live_membership_of(session, gym.id, person.id)
                member.national_id_ciphertext = "v1.k1.written-after-erasure"
                session.commit()
                answers.append("stored")
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as first:
        erasure.erase_personal_data(
            first,
            first.get(Organization, gym.id),
            person.id,
            actor_user_id=gym[Role.owner].user.id,
            now=NOW,
        )
        first.flush()
        rival = threading.Thread(target=put_while_erasing)
        rival.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=rival)
        first.commit()
    rival.join(timeout=30)

    assert answers == ["member_not_active"]
    with factory() as session:
        held = session.scalar(
            select(Membership).where(
                Membership.organization_id == gym.id, Membership.user_id == person.id
            )
        )
        assert held.national_id_ciphertext is None
