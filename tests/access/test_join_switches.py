"""The owner's join switches (spec A 2.9): organizations.join_enabled, pausing and resuming a
link, and the stored plan a link may carry (only one of the gym's own plans)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, JoinLink, Role
from gymctl.models.billing import PlanType
from tests import factories
from tests.access.conftest import snapshot
from tests.access.test_join import make_link
from tests.billing.factories import make_plan
from tests.conftest import NOW


@pytest.fixture
def link(session, gym) -> JoinLink:
    row = make_link(session, gym.organization)
    session.commit()
    return row


def audits(session, action):
    session.expire_all()
    return session.scalars(select(AuditLog).where(AuditLog.action == action)).all()


@pytest.mark.parametrize("role", [Role.owner, Role.admin])
def test_owner_and_admin_switch_joining_off_and_on_audited(client, session, gym, link, role):
    url = f"/organizations/{gym.id}/join-enabled"
    off = client.put(url, json={"joinEnabled": False}, headers=gym[role].headers)
    assert (off.status_code, off.json) == (200, {"joinEnabled": False})
    assert client.get(f"/join/{link.token}").status_code == 404
    on = client.put(url, json={"joinEnabled": True}, headers=gym[role].headers)
    assert on.json == {"joinEnabled": True}
    assert client.get(f"/join/{link.token}").status_code == 200
    changes = audits(session, "organization.join_enabled_changed")
    assert [a.data.get("joinEnabled") for a in changes] == [False, True]
    assert {a.actor_user_id for a in changes} == {gym[role].user.id}


@pytest.mark.parametrize("role", [Role.coach, Role.member])
def test_coach_and_member_cannot_switch_joining(client, session, gym, link, role):
    before = snapshot(session)
    response = client.put(
        f"/organizations/{gym.id}/join-enabled",
        json={"joinEnabled": False},
        headers=gym[role].headers,
    )
    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before


def test_join_links_list_shows_the_switch(client, gym, link):
    response = client.get(f"/organizations/{gym.id}/join-links", headers=gym[Role.owner].headers)
    assert response.json["joinEnabled"] is True


def test_a_paused_link_answers_404_until_resumed(client, session, gym, link):
    base = f"/organizations/{gym.id}/join-links/{link.id}"
    owner = gym[Role.owner].headers
    paused = client.post(f"{base}/pause", headers=owner)
    assert (paused.status_code, paused.json["active"], paused.json["revoked"]) == (
        200,
        False,
        False,
    )
    assert client.get(f"/join/{link.token}").status_code == 404
    resumed = client.post(f"{base}/resume", headers=owner)
    assert resumed.json["active"] is True
    assert client.get(f"/join/{link.token}").status_code == 200
    assert len(audits(session, "join_link.paused")) == 1
    assert len(audits(session, "join_link.resumed")) == 1


def test_a_revoked_link_cannot_be_resumed(client, session, gym):
    revoked = make_link(session, gym.organization, revoked=True)
    session.commit()
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/join-links/{revoked.id}/resume",
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (409, "join_link_revoked")
    assert snapshot(session) == before


def test_another_gyms_link_cannot_be_paused(client, session, gym):
    other = factories.organization(session, name="Elsewhere")
    theirs = make_link(session, other)
    session.commit()
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/join-links/{theirs.id}/pause",
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (404, "join_link_not_found")
    assert snapshot(session) == before


def _unknown_plan(session, gym):
    return uuid.uuid4()


def _other_gyms_plan(session, gym):
    return make_plan(session, factories.organization(session, name="Rival"), PlanType.card).id


def _deleted_plan(session, gym):
    return make_plan(session, gym.organization, PlanType.card, deleted_at=NOW).id


@pytest.mark.parametrize("plan", [_unknown_plan, _other_gyms_plan, _deleted_plan])
def test_a_join_link_stores_only_a_live_plan_of_its_own_gym(client, session, gym, plan):
    """No stored plan may name a plan outside the organization."""
    plan_id = plan(session, gym)
    session.commit()
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/join-links",
        json={"label": "x", "planId": str(plan_id)},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (422, "join_link_plan_invalid")
    assert snapshot(session) == before


def test_a_join_link_with_its_gyms_plan_is_stored(client, session, gym):
    plan = make_plan(session, gym.organization, PlanType.card)
    session.commit()
    response = client.post(
        f"/organizations/{gym.id}/join-links",
        json={"planId": str(plan.id)},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["planId"]) == (201, str(plan.id))


def test_a_link_with_a_stored_plan_answers_but_is_never_the_minisites(client, session, gym):
    """Decision (issue 23): spec A 8's eligibility (links without plan) is the minisite's call to
    action (2.9); a plan link handed out on purpose opens its join page with the plan chosen."""
    from gymctl.access.join import minisite_join_link

    plan = make_plan(session, gym.organization, PlanType.card)
    with_plan = make_link(session, gym.organization, plan_id=plan.id)
    session.commit()
    shown = client.get(f"/join/{with_plan.token}")
    assert (shown.status_code, shown.json["planId"]) == (200, str(plan.id))
    assert minisite_join_link(session, gym.organization) is None


def test_a_link_whose_plan_was_deleted_answers_404(client, session, gym):
    """Decision (issue 23): a link that would sell a deleted plan is not available."""
    plan = make_plan(session, gym.organization, PlanType.card)
    with_plan = make_link(session, gym.organization, plan_id=plan.id)
    plan.deleted_at = NOW
    session.commit()
    response = client.get(f"/join/{with_plan.token}")
    assert (response.status_code, response.json["code"]) == (404, "join_link_not_found")
    assert session.get(JoinLink, with_plan.id).active is True
