"""Personal-data erasure (spec A 2.8: "owner-only organization deletion and personal-data
erasure" are rules kept outside the matrix): what this gym holds is erased, what other gyms or
the person's own login hold stays, money records are kept, and everyone else is refused."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import (
    AuditLog,
    JoinSubmission,
    Lead,
    Membership,
    MembershipStatus,
    Role,
    User,
)
from gymctl.models.billing import PlanType
from tests import factories
from tests.access.conftest import snapshot
from tests.access.test_join import make_link
from tests.billing.factories import make_plan
from tests.conftest import NOW


def erase(client, gym, user_id, by=Role.owner):
    return client.post(
        f"/organizations/{gym.id}/members/{user_id}/erasure", headers=gym[by].headers
    )


@pytest.fixture
def desk_member(session, gym):
    """A member the desk registered (no login of their own), with a join-form row and a lead."""
    person = factories.user(
        session, identity_id=None, email="dana@desk.example", name="Dana", signup_origin="desk"
    )
    membership = factories.membership(
        session, user=person, organization=gym.organization, role=Role.member
    )
    membership.national_id_ciphertext = "v1.k1.ciphertext"
    link = make_link(session, gym.organization)
    session.add(
        JoinSubmission(
            join_link_id=link.id,
            organization_id=gym.id,
            email="Dana@desk.example",
            outcome="checkout_failed",
            ip="203.0.113.9",
            user_agent="UA",
            data={"reason": "card declined"},
            created_at=NOW,
        )
    )
    session.add(
        Lead(organization_id=gym.id, name="Dana", email="dana@desk.example", created_at=NOW)
    )
    session.commit()
    return person


def test_the_owner_erases_a_desk_members_personal_data_audited(client, session, gym, desk_member):
    plan = make_plan(session, gym.organization, PlanType.card)  # money records stay untouched
    session.commit()
    response = erase(client, gym, desk_member.id)
    assert response.status_code == 200, response.json
    assert response.json["erased"]["userRowErased"] is True
    session.expire_all()
    person = session.get(User, desk_member.id)
    assert (person.email, person.name) == (None, None)
    assert person.deleted_at is not None
    membership = session.scalar(select(Membership).where(Membership.user_id == person.id))
    assert membership.status is MembershipStatus.cancelled
    assert membership.national_id_ciphertext is None
    [submission] = session.scalars(select(JoinSubmission)).all()
    assert (submission.email, submission.ip, submission.user_agent) == (None, None, None)
    [lead] = session.scalars(select(Lead)).all()
    assert "dana" not in (lead.name + lead.email).lower()
    [audit] = session.scalars(
        select(AuditLog).where(AuditLog.action == "personal_data.erased")
    ).all()
    assert audit.actor_user_id == gym[Role.owner].user.id
    assert "dana" not in str(audit.data).lower()
    assert session.get(type(plan), plan.id) is not None


@pytest.mark.embedded  # the bug was SQLite's lower(): both engines
def test_an_address_with_a_letter_beyond_ascii_is_erased_where_it_was_given(client, session, gym):
    """The database folds case on both sides: the erasure compared the columns with
    Python's lower-cased address, which SQLite's lower() never equals for 'É', and left the
    lead 'Élodie@desk.example' with the person's address."""
    person = factories.user(session, identity_id=None, email="Élodie@desk.example", name="Élodie")
    factories.membership(session, user=person, organization=gym.organization, role=Role.member)
    session.add(Lead(organization_id=gym.id, name="Élodie", email="Élodie@desk.example",
                     created_at=NOW))  # fmt: skip
    session.commit()

    assert erase(client, gym, person.id).status_code == 200

    session.expire_all()
    [lead] = session.scalars(select(Lead)).all()
    assert "desk.example" not in lead.email


def test_what_another_gym_holds_stays(client, session, gym, desk_member):
    other = factories.organization(session, name="Other Gym")
    factories.membership(session, user=desk_member, organization=other, role=Role.member)
    session.commit()
    response = erase(client, gym, desk_member.id)
    assert response.json["erased"]["userRowErased"] is False
    session.expire_all()
    person = session.get(User, desk_member.id)
    assert (person.email, person.deleted_at) == ("dana@desk.example", None)
    theirs = session.scalar(
        select(Membership).where(
            Membership.user_id == person.id, Membership.organization_id == other.id
        )
    )
    assert theirs.status is MembershipStatus.active
    [lead] = session.scalars(select(Lead)).all()
    assert lead.email != "dana@desk.example"  # this gym's own copy is erased all the same


def test_a_login_of_their_own_is_the_persons_and_stays(client, session, gym):
    member = gym[Role.member]
    response = erase(client, gym, member.user.id)
    assert response.status_code == 200
    assert response.json["erased"]["userRowErased"] is False
    session.expire_all()
    assert session.get(User, member.user.id).email == "member@iron.example"


@pytest.mark.parametrize("role", [Role.admin, Role.coach, Role.member])
def test_erasure_is_refused_for_anyone_but_the_owner(client, session, gym, desk_member, role):
    before = snapshot(session)
    response = erase(client, gym, desk_member.id, by=role)
    assert (response.status_code, response.json["code"]) == (403, "owner_required")
    assert snapshot(session) == before


def test_the_owner_cannot_erase_themself_or_someone_outside_the_gym(client, session, gym, outsider):
    before = snapshot(session)
    own = erase(client, gym, gym[Role.owner].user.id)
    assert (own.status_code, own.json["code"]) == (409, "erasure_owner")
    stranger = erase(client, gym, outsider.user.id)
    assert (stranger.status_code, stranger.json["code"]) == (404, "member_not_found")
    assert snapshot(session) == before
