"""Sales grants (spec A 2.5): only owner and admin grant, only an active coach receives, a member
never holds sales access (not even through a leftover grant), and a grant is beside the role,
never instead of it."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import AuditLog, Membership, MembershipStatus, Role, SalesGrant
from tests import factories
from tests.access.conftest import signed_in, snapshot

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def grant(client, gym, by: Role, target, *, scope="own", manager=False):
    return client.post(
        f"/organizations/{gym.id}/sales-grants",
        json={"userId": str(target.user.id), "scope": scope, "manager": manager},
        headers=gym[by].headers,
    )


def access(client, gym, person):
    response = client.get(f"/organizations/{gym.id}/me/sales-access", headers=person.headers)
    assert response.status_code == 200
    return response.json["salesAccess"]


def live_grants(session: Session, membership: Membership) -> list[SalesGrant]:
    session.expire_all()
    return list(
        session.scalars(
            select(SalesGrant).where(
                SalesGrant.membership_id == membership.id, SalesGrant.revoked_at.is_(None)
            )
        )
    )


@pytest.mark.parametrize("by", [Role.owner, Role.admin])
def test_owner_and_admin_grant_sales_to_an_active_coach(client, session, gym, by):
    coach = gym[Role.coach]

    response = grant(client, gym, by, coach, scope="team", manager=True)

    assert response.status_code == 201
    [row] = live_grants(session, coach.membership)
    assert response.json == {"id": str(row.id), "scope": "team", "manager": True}
    assert row.granted_by_user_id == gym[by].user.id
    [audit] = session.scalars(select(AuditLog).where(AuditLog.action == "sales.granted"))
    assert audit.target_id == str(coach.user.id)
    assert access(client, gym, coach) == {"scope": "team", "manager": True}


@pytest.mark.parametrize("by", [Role.coach, Role.member])
def test_a_coach_or_member_cannot_grant_sales(client, session, gym, by):
    before = snapshot(session)

    response = grant(client, gym, by, gym[Role.coach])

    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before


def test_a_member_membership_can_never_receive_a_sales_grant(client, session, gym):
    before = snapshot(session)

    response = grant(client, gym, Role.owner, gym[Role.member])

    assert (response.status_code, response.json["code"]) == (422, "sales_grant_member_refused")
    assert snapshot(session) == before


def _suspended_coach(session, idp, gym):
    person = signed_in(idp, session, identity_id="user_suspended", email="s@iron.example")
    person.membership = factories.membership(
        session,
        user=person.user,
        organization=gym.organization,
        role=Role.coach,
        status=MembershipStatus.suspended,
    )
    return person


@pytest.mark.parametrize("target", ["admin", "owner", "suspended_coach"])
def test_only_an_active_coach_is_eligible_for_a_sales_grant(client, session, idp, gym, target):
    person = _suspended_coach(session, idp, gym) if target == "suspended_coach" else gym[target]
    session.commit()
    before = snapshot(session)

    response = grant(client, gym, Role.owner, person)

    assert (response.status_code, response.json["code"]) == (422, "sales_grant_ineligible")
    assert snapshot(session) == before


@pytest.mark.parametrize("scope", ["everyone", "", "OWN"])
def test_an_unknown_scope_is_refused_422_sales_scope_invalid(client, session, gym, scope):
    before = snapshot(session)

    response = grant(client, gym, Role.owner, gym[Role.coach], scope=scope)

    assert (response.status_code, response.json["code"]) == (422, "sales_scope_invalid")
    assert snapshot(session) == before


def test_granting_to_someone_outside_the_organization_is_404(client, session, gym, outsider):
    before = snapshot(session)

    response = grant(client, gym, Role.owner, outsider)

    assert (response.status_code, response.json["code"]) == (404, "member_not_found")
    assert snapshot(session) == before


def test_a_sales_grant_changes_neither_the_role_nor_gives_member_administration(
    client, session, gym
):
    coach = gym[Role.coach]
    assert grant(client, gym, Role.owner, coach, scope="team", manager=True).status_code == 201

    session.refresh(coach.membership)
    assert coach.membership.role is Role.coach
    roster = client.get(f"/organizations/{gym.id}/members", headers=coach.headers)
    assert roster.status_code == 200
    [me] = [m for m in roster.json["members"] if m["userId"] == str(coach.user.id)]
    assert me["role"] == "coach"
    before = snapshot(session)
    for method, path, body in [
        ("patch", f"/members/{gym[Role.member].user.id}", {"role": "coach"}),
        ("post", "/members", {"email": "walk.in@example.test"}),
        ("post", "/sales-grants", {"userId": str(coach.user.id), "scope": "team"}),
    ]:
        response = getattr(client, method)(
            f"/organizations/{gym.id}{path}", json=body, headers=coach.headers
        )
        assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before


def test_granting_again_updates_the_one_live_grant(client, session, gym):
    coach = gym[Role.coach]
    first = grant(client, gym, Role.owner, coach, scope="own")
    second = grant(client, gym, Role.admin, coach, scope="team", manager=True)

    assert first.json["id"] == second.json["id"]
    [row] = live_grants(session, coach.membership)
    assert (row.scope, row.manager) == ("team", True)


# --- holding sales access --------------------------------------------------------------------


def test_a_coach_without_a_grant_and_a_member_have_no_sales_access(client, gym):
    assert access(client, gym, gym[Role.coach]) is None
    assert access(client, gym, gym[Role.member]) is None


@pytest.mark.parametrize("role", [Role.owner, Role.admin])
def test_owner_and_admin_are_implicit_team_managers(client, gym, role):
    assert access(client, gym, gym[role]) == {"scope": "team", "manager": True}


def test_a_leftover_grant_from_an_earlier_staff_role_gives_no_access(client, session, gym):
    coach = gym[Role.coach]
    assert grant(client, gym, Role.owner, coach, scope="team", manager=True).status_code == 201
    assert access(client, gym, coach) == {"scope": "team", "manager": True}

    demoted = client.patch(
        f"/organizations/{gym.id}/members/{coach.user.id}",
        json={"role": "member"},
        headers=gym[Role.admin].headers,
    )

    assert demoted.status_code == 200
    assert demoted.json["role"] == "member"
    assert live_grants(session, coach.membership) == []  # the grant ended with the role
    assert access(client, gym, coach) is None


def _change_role(client, gym, person, role):
    response = client.patch(
        f"/organizations/{gym.id}/members/{person.user.id}",
        json={"role": role},
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json


def test_a_grant_ends_with_the_staff_role_and_is_not_revived(client, session, gym):
    """Spec A 2.5: a leftover grant from an earlier staff role gives no access; coach ->
    member -> coach comes back without sales access until someone grants it again."""
    coach = gym[Role.coach]
    assert grant(client, gym, Role.owner, coach, scope="team").status_code == 201
    _change_role(client, gym, coach, "member")
    _change_role(client, gym, coach, "coach")
    assert access(client, gym, coach) is None
    session.expire_all()
    ended = session.scalars(select(AuditLog).where(AuditLog.action == "sales.ended")).all()
    assert [a.data.get("role") for a in ended] == ["member"]


def test_a_grant_ends_when_the_membership_is_removed(client, session, gym):
    coach = gym[Role.coach]
    assert grant(client, gym, Role.owner, coach).status_code == 201
    removed = client.delete(
        f"/organizations/{gym.id}/members/{coach.user.id}", headers=gym[Role.owner].headers
    )
    assert removed.status_code == 200
    assert live_grants(session, coach.membership) == []


def test_sales_access_is_asked_only_about_an_organization_one_belongs_to(client, gym, outsider):
    response = client.get(f"/organizations/{gym.id}/me/sales-access", headers=outsider.headers)
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")


# --- revoking --------------------------------------------------------------------------------


def test_deleting_a_grant_revokes_the_coachs_sales_access(client, session, gym):
    coach = gym[Role.coach]
    grant_id = grant(client, gym, Role.owner, coach, scope="own").json["id"]

    response = client.delete(
        f"/organizations/{gym.id}/sales-grants/{grant_id}", headers=gym[Role.admin].headers
    )

    assert response.status_code == 200
    assert response.json == {"id": grant_id, "revoked": True}
    assert live_grants(session, coach.membership) == []
    assert access(client, gym, coach) is None
    assert session.scalars(select(AuditLog).where(AuditLog.action == "sales.revoked")).one()


def test_a_coach_cannot_revoke_a_grant(client, session, gym):
    coach = gym[Role.coach]
    grant_id = grant(client, gym, Role.owner, coach).json["id"]
    before = snapshot(session)

    response = client.delete(
        f"/organizations/{gym.id}/sales-grants/{grant_id}", headers=coach.headers
    )

    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before


def test_revoking_an_unknown_or_another_gyms_grant_is_404(client, session, gym):
    other = factories.organization(session)
    other_coach = factories.user(session)
    other_membership = factories.membership(
        session, user=other_coach, organization=other, role=Role.coach
    )
    foreign = SalesGrant(organization_id=other.id, membership_id=other_membership.id, scope="own")
    session.add(foreign)
    session.commit()
    before = snapshot(session)

    for grant_id in (uuid.uuid4(), foreign.id):
        response = client.delete(
            f"/organizations/{gym.id}/sales-grants/{grant_id}", headers=gym[Role.owner].headers
        )
        assert (response.status_code, response.json["code"]) == (404, "sales_grant_not_found")
    assert snapshot(session) == before
