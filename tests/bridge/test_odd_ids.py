"""An external write answered with an id that is none (null, empty, an object, true, too long
for a link): s55 noticed that `{"id": null}` was stored as the external id "None", linking the
member to no one there. Such an answer is the external system's failure now, as an unreadable
body is (`client.external_id`): the op is retried, and the retry of a create searches first, so the
user the odd answer made is found and linked, never made twice."""

from __future__ import annotations

import uuid

import pytest

from gymctl.bridge import entity_map
from gymctl.bridge.client import ExternalCallError, external_id_of
from gymctl.models.bridge import EntityType, OpStatus
from tests.bridge.conftest import member_payload, run
from tests.bridge.test_dispatch import _later, _queue

ODD = [None, "", "   ", {}, [], True, 1.5, "x" * 129]


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_a_create_answered_with_an_odd_id_is_retried_and_links_the_user_it_made(
    session, org, connected, fake, bridge_settings, clock, odd
):
    fake.odd_ids["POST /v3/users"] = odd
    payload = member_payload()
    op = _queue(session, org, "user.create", payload)

    run(session, org.id, bridge_settings, clock)

    assert (op.status, op.attempts) == (OpStatus.failed, 1)
    assert entity_map.find(session, org.id, EntityType.member, payload["memberId"]) is None
    fake.odd_ids.clear()
    _later(clock)
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    (made,) = fake.effects  # the one user the first call made
    link = entity_map.find(session, org.id, EntityType.member, payload["memberId"])
    assert link.external_id == made
    assert len(fake.calls_to("POST /v3/users")) == 1
    assert fake.duplicates == []


def test_a_search_hit_with_an_odd_id_links_no_one(
    session, org, connected, fake, account, bridge_settings, clock
):
    existing = fake.add_user(account, "dana@example.test")
    fake.odd_ids["GET /v3/searchUser"] = None
    payload = member_payload()
    op = _queue(session, org, "user.create", payload)

    run(session, org.id, bridge_settings, clock)

    assert op.status is OpStatus.failed
    assert entity_map.find(session, org.id, EntityType.member, payload["memberId"]) is None
    assert fake.calls_to("POST /v3/users") == []
    fake.odd_ids.clear()
    _later(clock)
    run(session, org.id, bridge_settings, clock)
    link = entity_map.find(session, org.id, EntityType.member, payload["memberId"])
    assert link.external_id == existing


def test_a_membership_answered_with_a_null_id_is_found_by_its_retry(
    session, org, connected, fake, bridge_settings, clock
):
    """The retry of an assignment finds the one its lost answer made (same dates): linked to
    it, not assigned twice."""
    payload = member_payload()
    _queue(session, org, "user.create", payload)
    run(session, org.id, bridge_settings, clock)
    fake.odd_ids["POST /v3/users/memberships"] = None
    subscription = {"memberId": payload["memberId"], "subscriptionId": str(uuid.uuid4()),
                    "startDate": "2026-11-01"}  # fmt: skip
    op = _queue(session, org, "membership.assign", subscription)

    run(session, org.id, bridge_settings, clock)

    assert op.status is OpStatus.failed
    key = subscription["subscriptionId"]
    assert entity_map.find(session, org.id, EntityType.membership, key) is None
    fake.odd_ids.clear()
    _later(clock)
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    link = entity_map.find(session, org.id, EntityType.membership, key)
    assert link.external_id not in ("None", "")
    assert len(fake.calls_to("POST /v3/users/memberships")) == 1


@pytest.mark.parametrize("answer", [{"id": 1000}, {"id": "u-17"}, {"id": "x" * 128}])
def test_an_id_a_link_can_keep_is_taken_as_text(answer):
    assert external_id_of("POST /users", answer) == str(answer["id"])


@pytest.mark.parametrize("answer", [{"id": odd} for odd in ODD] + [{}, [], None, "1000"])
def test_anything_else_is_the_external_systems_failure(answer):
    with pytest.raises(ExternalCallError) as failed:
        external_id_of("POST /users", answer)
    assert (failed.value.kind, failed.value.route, failed.value.transient) == (
        "server",
        "POST /users",
        True,
    )


def test_another_accounts_hit_with_an_odd_id_is_left_out_not_a_failure(
    session, org, connected, fake, account, bridge_settings, clock
):
    """A hit of another account is counted, never linked: its odd id does not fail the op."""
    account.foreign_hits.append(
        {"id": None, "box_id": 999, "type": "user", "email": "dana@example.test"}
    )
    payload = member_payload()
    op = _queue(session, org, "user.create", payload)

    run(session, org.id, bridge_settings, clock)

    assert op.status is OpStatus.succeeded
    (made,) = fake.effects
    link = entity_map.find(session, org.id, EntityType.member, payload["memberId"])
    assert link.external_id == made
