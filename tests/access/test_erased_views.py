"""An erased member stays erased in the erasing gym's views (docs/decisions.md): the
person's users row belongs to their login and to the other gyms holding them, so erasure keeps
it; the gym's roster and member PDF show "Erased member" and no address instead, while another
gym and the person's own /users/me still show them."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.erased import ERASED_NAME
from gymctl.models import AuditLog, Role, Task, User
from tests import factories
from tests.access import test_national_id as national
from tests.access.test_compliance_pdf import pdf_url, text_of
from tests.access.test_erasure import erase
from tests.access.test_join import FROM, make_link
from tests.access.test_national_id import put

keyed_settings = national.keyed_settings  # fixtures: settings with NATIONAL_ID_ENCRYPTION_KEY
keyed_client = national.keyed_client

ADDRESS = "member@iron.example"  # the member's login (make_gym with an idp)
NAME = "Mira Quell"


@pytest.fixture
def other_gym(session, idp, gym):
    """A second gym holding the same person (with its own owner, signed in)."""
    organization = factories.organization(session, name="Harbour Gym")
    owner = factories.signed_in(
        idp, session, identity_id="user_harbour_owner", email="boss@harbour.example"
    )
    owner.membership = factories.membership(
        session, user=owner.user, organization=organization, role=Role.owner
    )
    person = gym[Role.member].user
    person.name = NAME
    factories.membership(session, user=person, organization=organization, role=Role.member)
    session.commit()
    return factories.Gym(organization, {Role.owner: owner})


def roster(client, gym):
    response = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers)
    assert response.status_code == 200, response.json
    return response


def entry(response, user):
    [row] = [m for m in response.json["members"] if m["userId"] == str(user.id)]
    return row


@pytest.mark.embedded  # the demo gym's roster: both engines
def test_the_erasing_gyms_roster_shows_the_member_as_erased_and_others_unchanged(
    engine, client, session, gym, other_gym
):
    person = gym[Role.member].user
    assert erase(client, gym, person.id).json["erased"]["userRowErased"] is False

    here = roster(client, gym)
    assert entry(here, person) | {"name": ERASED_NAME, "email": None} == entry(here, person)
    assert entry(here, person)["status"] == "cancelled"
    # Looking for the old address or name in this gym's roster finds nothing.
    text = here.get_data(as_text=True).lower()
    assert ADDRESS not in text
    assert NAME.lower() not in text
    # Another gym's roster and the person's own login are theirs, unchanged.
    there = entry(roster(client, other_gym), person)
    assert (there["name"], there["email"], there["status"]) == (NAME, ADDRESS, "active")
    me = client.get("/users/me", headers=gym[Role.member].headers)
    assert me.json["user"]["email"] == ADDRESS
    session.expire_all()
    assert (session.get(User, person.id).email, session.get(User, person.id).name) == (
        ADDRESS,
        NAME,
    )


@pytest.mark.embedded
def test_a_member_who_comes_back_is_shown_again(engine, client, session, gym, other_gym):
    """The person gave their details anew: the marker holds only while the membership stays
    ended."""
    person = gym[Role.member].user
    link = make_link(session, gym.organization)
    session.commit()
    erase(client, gym, person.id)

    joined = client.post(f"/join/{link.token}/join", headers=gym[Role.member].headers)

    assert joined.status_code in (200, 201), joined.json
    assert (entry(roster(client, gym), person)["email"]) == ADDRESS


def test_the_member_pdf_shows_the_member_as_erased(keyed_client, session, gym, other_gym):
    person = gym[Role.member].user
    assert put(keyed_client, gym, Role.owner, person.id).status_code == 200
    erase(keyed_client, gym, person.id)

    response = keyed_client.get(pdf_url(gym, person.id), headers=gym[Role.owner].headers)

    assert response.status_code == 200
    text = text_of(response.data)
    assert ERASED_NAME in text
    assert "not collected" in text
    assert ADDRESS not in text
    assert NAME not in text


def test_the_gyms_follow_up_tasks_and_audit_rows_lose_the_address(client, session, gym, other_gym):
    """The join checkout's follow-up put the address in its title and data, and a blocked join
    in its audit row (aimed at the link, not the person): both are the gym's copies."""
    person = gym[Role.member].user
    link = make_link(session, gym.organization)
    session.commit()
    assert (
        client.post(
            f"/join/{link.token}/checkout-failed",
            json={"email": "Member@Iron.example"},
            headers=FROM,
        ).status_code
        == 202
    )
    assert (
        client.post(
            f"/join/{link.token}/request-invite", json={"email": ADDRESS}, headers=FROM
        ).status_code
        == 409
    )  # the address has a login: join.blocked, audited with it

    done = erase(client, gym, person.id).json["erased"]

    assert done["tasks"] == 1
    session.expire_all()
    [task] = session.scalars(select(Task).where(Task.organization_id == gym.id)).all()
    assert "iron.example" not in (task.title + str(task.data)).lower()
    audit = session.scalars(select(AuditLog).where(AuditLog.organization_id == gym.id)).all()
    assert all("iron.example" not in str(row.data).lower() for row in audit if row.data)
