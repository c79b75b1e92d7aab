"""A gym's platform tier, set by a platform admin (spec A 1, 8; a hunter's test of s55). The
tier caps the active members an import may bring (starter 150, growth 600, elite none), but no
door wrote it: every gym stayed on starter, and one that paid for more could never import past
150. `PUT /admin/organizations/:orgId/tier` and `gymctl members tier` now set it."""

from __future__ import annotations

import uuid

import pytest

from gymctl.models import Organization, Role
from gymctl.models.organizations import Tier
from tests import factories
from tests.access.conftest import platform_admin, snapshot  # noqa: F401 (fixture)
from tests.access.test_member_imports import roster, upload
from tests.api.test_hostile_bodies import DEEP, DEEP_AND_SMALL
from tests.billing_ops.helpers import audit_rows

pytestmark = pytest.mark.embedded  # the demo gym's operators set tiers: both engines


def _tier(client, gym_id, tier, who):
    return client.put(
        f"/admin/organizations/{gym_id}/tier", json={"tier": tier}, headers=who.headers
    )


def test_a_gym_put_on_growth_imports_past_the_starter_cap(client, session, gym, platform_admin):  # noqa: F811
    organization = session.get(Organization, gym.id)
    for n in range(149):  # 150 with the fixture's own member: starter's cap
        person = factories.user(session, identity_id=None, email=f"m{n}@example.test")
        factories.membership(session, user=person, organization=organization)
    session.commit()
    refused = upload(client, gym, roster("one@example.test", "two@example.test"))
    assert (refused.status_code, refused.json["code"]) == (422, "member_cap_exceeded")

    answer = _tier(client, gym.id, "growth", platform_admin)

    assert answer.status_code == 200, answer.json
    assert answer.json == {
        "tier": "growth",
        "changed": True,
        "activeMemberCap": 600,
        "activeMembers": answer.json["activeMembers"],
    }
    assert answer.json["activeMembers"] >= 150
    [audit] = audit_rows(session, "organization.tier_changed")
    assert (audit.actor_user_id, audit.data) == (
        platform_admin.user.id,
        {"from": "starter", "to": "growth"},
    )
    queued = upload(client, gym, roster("one@example.test", "two@example.test"))
    assert queued.status_code == 202, queued.json
    again = _tier(client, gym.id, "growth", platform_admin)
    assert (again.status_code, again.json["changed"]) == (200, False)
    assert len(audit_rows(session, "organization.tier_changed")) == 1


def test_refusals_change_nothing(client, session, gym, platform_admin):  # noqa: F811
    before = snapshot(session)
    refused = [
        (_tier(client, gym.id, "elite", gym[Role.owner]), 403, "platform_admin_required"),
        (_tier(client, uuid.uuid4(), "elite", platform_admin), 404, "organization_not_found"),
        (_tier(client, gym.id, "platinum", platform_admin), 400, "invalid_body"),
        (_tier(client, gym.id, 3, platform_admin), 400, "invalid_body"),
    ]
    for answer, status, code in refused:
        assert (answer.status_code, answer.json["code"]) == (status, code)
    assert snapshot(session) == before
    session.expire_all()
    assert session.get(Organization, gym.id).tier == Tier.starter


@pytest.mark.parametrize(
    "raw",
    [
        DEEP,
        DEEP_AND_SMALL,
        b'{"tier": "' + b"e" * 200_000 + b'"}',  # past the member body limit
        b'{"tier": "elite", "extra": 1}',
        b'{"tier": "elite\\u0000"}',
        b'{"tier": "\\ud800"}',
        b"{nope",
    ],
)
def test_a_hostile_body_is_a_4xx_json_answer_and_changes_nothing(
    client,
    session,
    gym,
    platform_admin,  # noqa: F811
    raw,
):
    before = snapshot(session)
    answer = client.put(
        f"/admin/organizations/{gym.id}/tier",
        data=raw,
        headers={**platform_admin.headers, "Content-Type": "application/json"},
    )
    assert 400 <= answer.status_code < 500, answer.status_code
    assert answer.json["code"]
    assert snapshot(session) == before
