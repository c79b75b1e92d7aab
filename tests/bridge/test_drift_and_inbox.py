"""Drift (the entity map beside the external system now) and the owner's inbox (candidates
shown without phone numbers, one linked over HTTP)."""

from __future__ import annotations

import json
from datetime import timedelta

from gymctl.bridge import entity_map, mirror
from gymctl.bridge.client import Throttle
from gymctl.bridge.connection import connect, import_roster, open_client
from gymctl.bridge.drift import drift
from gymctl.models import Role
from gymctl.models.bridge import EntityType
from tests.bridge.conftest import API_KEY, run
from tests.bridge.test_inbound import scene  # noqa: F401 (fixture)
from tests.conftest import NOW


def _drift(session, connected, settings):
    with open_client(connected, settings, Throttle(None), 1.0) as client:
        return drift(session, connected.organization_id, client, now=lambda: NOW,
                     type_id=connected.bridge_membership_type_id)  # fmt: skip


def test_drift_reports_each_side_missing_different_and_orphaned(
    session,
    org,
    connected,
    fake,
    account,
    bridge_settings,
    clock,
    scene,  # noqa: F811
):
    clean = _drift(session, connected, bridge_settings)
    assert clean["summary"] == {"members": 0, "memberships": 0, "bookings": 0}
    account.users[scene.user]["email"] = "changed@example.test"
    stranger = fake.add_user(account, "stranger@example.test", phone="+972500000009")
    for held in account.memberships.values():
        held["active"] = False  # the desk ended our bridge membership there
    account.registrations.clear()  # our booking is gone there
    other = fake.add_class(account, "2026-11-23", name="Yoga")
    made_there = fake.add_registration(account, scene.user, other)
    report = _drift(session, connected, bridge_settings)
    assert report["members"]["different"] == [
        {"memberId": str(scene.member.id), "externalId": scene.user, "fields": ["email"]}
    ]
    assert report["members"]["notLinked"] == [stranger]
    assert len(report["memberships"]["missingExternally"]) == 1
    assert [b["bookingId"] for b in report["bookings"]["missingExternally"]] == [
        str(scene.booking.id)
    ]
    assert [b["externalId"] for b in report["bookings"]["missingOnPlatform"]] == [made_there]
    assert "+972" not in json.dumps(report)


def test_the_owner_sees_the_candidates_without_phones_and_links_one(
    client, session, gym, fake, bridge_settings, clock
):
    account = fake.add_account(API_KEY)
    member = gym.people[Role.member]
    first = fake.add_user(account, member.user.email, phone="+972500000001", first_name="Dana")
    second = fake.add_user(account, member.user.email, phone="+972500000002", first_name="Dan")
    org = gym.organization
    connection = connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    with open_client(connection, bridge_settings, Throttle(None), 1.0) as external:
        import_roster(session, connection, external, now=NOW)  # names and emails, no phones
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    owner = gym.people[Role.owner].headers
    base = f"/organizations/{org.id}/bridge/issues"
    listed = client.get(base, headers=owner)
    (issue,) = listed.json["issues"]
    assert issue["issueCode"] == "identity_conflict"
    assert [c["externalId"] for c in issue["candidates"]] == [first, second]
    assert issue["candidates"][0]["firstName"] == "Dana"
    assert "+972" not in listed.get_data(as_text=True)
    assert "phone" not in listed.get_data(as_text=True)
    wrong = client.post(f"{base}/{issue['id']}/link", json={"externalId": "5"}, headers=owner)
    assert (wrong.status_code, wrong.json["code"]) == (422, "bridge_candidate_invalid")
    assert entity_map.find(session, org.id, EntityType.member, member.membership.id) is None
    picked = client.post(f"{base}/{issue['id']}/link", json={"externalId": second},
                         headers=owner)  # fmt: skip
    assert (picked.status_code, picked.json["op"]["status"]) == (200, "pending")
    clock.set(NOW + timedelta(minutes=1))
    run(session, org.id, bridge_settings, clock)
    link = entity_map.find(session, org.id, EntityType.member, member.membership.id)
    assert link.external_id == second
    assert fake.calls_to("POST /v3/users") == []
    clock.set(NOW)  # the tokens' time
    assert client.get(base, headers=owner).json["issues"] == []
