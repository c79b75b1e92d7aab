"""An operator's retry never sends a create blind, a second retry of an op queued again is
told so (not refused), and a membership update touches only the memberships the entity map
says are ours."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select

from gymctl.bridge import enqueue, entity_map, queue
from gymctl.bridge.connection import connect
from gymctl.models import AuditLog, Role
from gymctl.models.bridge import EntityType, OpStatus
from tests.bridge.conftest import API_KEY, member_payload, run
from tests.conftest import NOW


def _queue(session, org, op_type, payload):
    op = enqueue(session, organization_id=org.id, op_type=op_type, payload=payload, now=NOW)
    session.commit()
    return op


def test_an_operator_retry_of_a_parked_create_searches_before_it_creates(
    session, org, connected, fake, account, bridge_settings, clock
):
    """No idempotency keys at the external system: a parked create may have been applied
    before it parked, so the retried op must look for its user before it sends one."""
    op = _queue(session, org, "user.create", member_payload())
    applied = fake.add_user(account, "dana@example.test")  # the lost attempt did reach it
    op.status, op.attempts, op.issue_code = OpStatus.parked, 6, "retries_exhausted"
    session.commit()
    queue.retry(session, op.id, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    assert [c.query for c in fake.calls_to("GET /v3/searchUser")] == [
        {"email": "dana@example.test"}
    ]
    assert fake.calls_to("POST /v3/users") == []
    assert fake.duplicates == []
    link = entity_map.find(session, org.id, EntityType.member, op.payload["memberId"])
    assert link.external_id == applied


def test_an_owner_retrying_an_op_twice_is_told_it_is_queued_already(
    client, session, gym, account, bridge_settings
):
    """A double click, or a retry sent again after a lost answer: the op is queued, as asked.
    Retried once, audited once; an op sent already is still refused."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    op = _queue(session, gym.organization, "user.create", member_payload())
    op.status, op.attempts, op.issue_code = OpStatus.parked, 6, "retries_exhausted"
    session.commit()
    path = f"/organizations/{gym.id}/bridge/issues/{op.id}/retry"
    owner = gym[Role.owner].headers

    first, second = client.post(path, headers=owner), client.post(path, headers=owner)

    assert (first.status_code, first.json["alreadyQueued"]) == (200, False)
    assert (second.status_code, second.json["alreadyQueued"]) == (200, True)
    assert second.json["op"]["status"] == "pending"
    retried = select(func.count()).where(AuditLog.action == "bridge.op_retried")
    assert session.scalar(retried) == 1
    session.refresh(op)
    op.status = OpStatus.succeeded
    session.commit()
    sent = client.post(path, headers=owner)
    assert (sent.status_code, sent.json["code"]) == (409, "bridge_op_not_retryable")


def _assigned(session, org, bridge_settings, clock) -> tuple[dict, str]:
    payload = member_payload()
    _queue(session, org, "user.create", payload)
    subscription = {"memberId": payload["memberId"], "subscriptionId": str(uuid.uuid4()),
                    "startDate": "2026-11-01"}  # fmt: skip
    _queue(session, org, "membership.assign", subscription)
    run(session, org.id, bridge_settings, clock)
    user = entity_map.find(session, org.id, EntityType.member, payload["memberId"]).external_id
    return subscription, user


def test_a_membership_update_after_a_cancel_never_takes_over_the_desks_membership(
    session, org, connected, fake, account, bridge_settings, clock
):
    subscription, user = _assigned(session, org, bridge_settings, clock)
    _queue(session, org, "membership.cancel", subscription)
    run(session, org.id, bridge_settings, clock)
    desk = str(max(int(i) for i in account.memberships) + 1)
    account.memberships[desk] = {"user_id": user, "membership_type_id": 60, "active": True,
                                 "start_date": "2026-11-20", "end_date": None}  # fmt: skip
    fake.calls.clear()
    update = _queue(session, org, "membership.update", {**subscription, "endDate": "2027-01-31"})
    run(session, org.id, bridge_settings, clock)
    assert update.status is OpStatus.succeeded
    assert fake.calls == []  # nothing of ours is live: nothing to update
    assert account.memberships[desk]["active"] is True
    link = entity_map.find(session, org.id, EntityType.membership, subscription["subscriptionId"])
    assert link.external_id != desk
    assert link.data["status"] == "cancelled"


def test_a_retried_update_adopts_only_the_membership_its_lost_attempt_made(
    session, org, connected, fake, account, bridge_settings, clock
):
    """An update whose first attempt timed out after the assign was applied finds that one
    (same dates), and leaves the desk's own (other dates) alone."""
    subscription, user = _assigned(session, org, bridge_settings, clock)
    fake.time_out("POST /v3/users/memberships", after_apply=True)
    desk = "9999"
    account.memberships[desk] = {"user_id": user, "membership_type_id": 60, "active": True,
                                 "start_date": "2026-11-20", "end_date": None}  # fmt: skip
    update = _queue(session, org, "membership.update", {**subscription, "endDate": "2027-01-31"})
    run(session, org.id, bridge_settings, clock)
    assert update.status is OpStatus.failed
    clock.set(NOW.replace(hour=NOW.hour + 1))
    run(session, org.id, bridge_settings, clock)
    assert update.status is OpStatus.succeeded
    link = entity_map.find(session, org.id, EntityType.membership, subscription["subscriptionId"])
    assert account.memberships[link.external_id]["end_date"] == "2027-01-31"
    assert link.external_id != desk
    assert len(fake.calls_to("POST /v3/users/memberships")) == 2  # the assign, the update's one
