"""The dispatcher against the fake external system: each op's calls, identity search, retries
that never duplicate, 429 / 5xx / 401 / timeouts, polling, and what events carry."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import dispatcher, enqueue, entity_map
from gymctl.bridge.dispatcher import Policy
from gymctl.db import get_engine
from gymctl.models import OutboxEvent
from gymctl.models.bridge import ConnectionStatus, EntityType, OpStatus, Origin, SyncOp
from tests.bridge.conftest import API_KEY, FAST, committed_gym, member_payload, run
from tests.conftest import NOW


def _queue(session, org, op_type, payload):
    op = enqueue(session, organization_id=org.id, op_type=op_type, payload=payload, now=NOW)
    session.commit()
    return op


def _later(clock, minutes=10):
    clock.set(clock.now() + timedelta(minutes=minutes))


def test_user_create_links_the_one_native_user_found_by_email(
    session, org, connected, fake, account, bridge_settings, clock
):
    existing = fake.add_user(account, "dana@example.test")
    account.foreign_hits.append(
        {"id": 1, "box_id": 999, "type": "user", "email": "dana@example.test"}
    )
    payload = member_payload()
    op = _queue(session, org, "user.create", payload)
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    link = entity_map.find(session, org.id, EntityType.member, payload["memberId"])
    assert (link.external_id, link.origin) == (existing, Origin.mirror)
    assert fake.calls_to("POST /v3/users") == []


def test_identity_search_falls_back_to_the_phone(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Spec B 8: email first, then phone."""
    existing = fake.add_user(account, "other@example.test", phone="+972500000001")
    payload = member_payload(phone="+972500000001")
    _queue(session, org, "user.create", payload)
    run(session, org.id, bridge_settings, clock)
    searches = [c.query for c in fake.calls_to("GET /v3/searchUser")]
    assert searches == [{"email": "dana@example.test"}, {"phone": "+972500000001"}]
    link = entity_map.find(session, org.id, EntityType.member, payload["memberId"])
    assert link.external_id == existing


def test_several_native_hits_park_the_op_with_identity_conflict(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Spec B 7: identity_conflict, several external users match; the op parks."""
    fake.add_user(account, "dana@example.test")
    fake.add_user(account, "dana@example.test")
    payload = member_payload()
    op = _queue(session, org, "user.create", payload)
    behind = _queue(session, org, "user.update", payload)
    run(session, org.id, bridge_settings, clock)
    assert (op.status, op.issue_code) == (OpStatus.parked, "identity_conflict")
    assert behind.status is OpStatus.pending  # blocked behind the parked create
    assert fake.calls_to("POST /v3/users") == []
    assert entity_map.find(session, org.id, EntityType.member, payload["memberId"]) is None


def test_a_new_user_is_created_without_a_welcome_email_then_updated(
    session, org, connected, fake, bridge_settings, clock
):
    payload = member_payload()
    _queue(session, org, "user.create", payload)
    _queue(session, org, "user.update", {**payload, "firstName": "Dahlia"})
    run(session, org.id, bridge_settings, clock)
    (created,) = fake.calls_to("POST /v3/users")
    assert created.body["send_welcome_email"] is False
    assert fake.welcome_emails == []
    (user_id,) = fake.effects
    assert fake.effects[user_id] == ["created", "updated:Dahlia"]
    assert all(c.agent.startswith("gymctl-bridge/") for c in fake.calls)


def test_a_create_that_timed_out_after_the_write_is_found_not_sent_again(
    session, org, connected, fake, bridge_settings, clock
):
    """No idempotency keys: a retried create searches first."""
    fake.time_out("POST /v3/schedule/bookSession", after_apply=True)
    ids = _member_with_membership(session, org, fake, bridge_settings, clock)
    day = NOW.date().isoformat()
    schedule = fake.add_class(fake.accounts[API_KEY], day)
    session_id = uuid.uuid4()
    entity_map.link(session, org.id, EntityType.schedule, platform_id=session_id,
                    external_id=schedule, origin=Origin.manual, now=NOW,
                    data={"date": day})  # fmt: skip
    booking = {"memberId": ids, "bookingId": str(uuid.uuid4()), "sessionId": str(session_id)}
    op = _queue(session, org, "booking.create", booking)
    run(session, org.id, bridge_settings, clock)
    assert (op.status, op.attempts) == (OpStatus.failed, 1)
    _later(clock)
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1
    assert fake.duplicates == []
    assert entity_map.find(session, org.id, EntityType.booking, booking["bookingId"])


def _member_with_membership(session, org, fake, settings, clock) -> str:
    payload = member_payload()
    _queue(session, org, "user.create", payload)
    subscription = {"memberId": payload["memberId"], "subscriptionId": str(uuid.uuid4()),
                    "startDate": "2026-11-01"}  # fmt: skip
    _queue(session, org, "membership.assign", subscription)
    run(session, org.id, settings, clock)
    return payload["memberId"]


def test_booking_needs_the_bridge_membership_and_a_change_nudges_the_reconcile(
    session, org, connected, fake, account, bridge_settings, clock
):
    member = _member_with_membership(session, org, fake, bridge_settings, clock)
    (assigned,) = fake.calls_to("POST /v3/users/memberships")
    assert assigned.body["membership_type_id"] == connected.bridge_membership_type_id == "60"
    schedule = fake.add_class(account, NOW.date().isoformat())
    session_id = uuid.uuid4()
    entity_map.link(session, org.id, EntityType.schedule, platform_id=session_id,
                    external_id=schedule, origin=Origin.manual, now=NOW)  # fmt: skip
    booking = {"memberId": member, "bookingId": str(uuid.uuid4()), "sessionId": str(session_id)}
    _queue(session, org, "booking.create", booking)
    _queue(session, org, "booking.cancel", booking)
    connected.last_reconcile_at = None
    session.commit()
    run(session, org.id, bridge_settings, clock)
    (booked,) = fake.calls_to("POST /v3/schedule/bookSession")
    assert booked.body["membership_user_id"] == assigned_id(fake)
    user = next(iter(fake.effects))
    assert fake.effects[user] == ["created", "membership", f"book:{schedule}", f"cancel:{schedule}"]
    assert connected.last_reconcile_at == NOW  # nudged: reconciled in the same run


def assigned_id(fake) -> str:
    (membership_id,) = fake.accounts[API_KEY].memberships
    return membership_id


def test_membership_hold_update_and_cancel_use_only_assign_and_cancel(
    session, org, connected, fake, bridge_settings, clock
):
    payload = member_payload()
    _queue(session, org, "user.create", payload)
    subscription = {"memberId": payload["memberId"], "subscriptionId": str(uuid.uuid4()),
                    "startDate": "2026-11-01"}  # fmt: skip
    for op_type in ("membership.assign", "membership.hold", "membership.assign"):
        _queue(session, org, op_type, subscription)
    _queue(session, org, "membership.update", {**subscription, "endDate": "2027-01-31"})
    _queue(session, org, "membership.cancel", subscription)
    run(session, org.id, bridge_settings, clock)
    user = next(iter(fake.effects))
    assert fake.effects[user] == [
        "created",
        "membership",
        "membership_cancelled",
        "membership",
        "membership_cancelled",
        "membership",
        "membership_cancelled",
    ]
    memberships = fake.accounts[API_KEY].memberships.values()
    assert [m["end_date"] for m in memberships] == [None, None, "2027-01-31"]
    assert not any(m["active"] for m in memberships)


def test_a_rejected_call_parks_and_a_5xx_backs_off(
    session, org, connected, fake, bridge_settings, clock
):
    fake.fail("POST /v3/users", 422)
    first = _queue(session, org, "user.create", member_payload(email="a@example.test"))
    fake.fail("POST /v3/users", 503)
    second = _queue(session, org, "user.create", member_payload(email="b@example.test"))
    run(session, org.id, bridge_settings, clock)
    assert (first.status, first.issue_code, first.last_error) == (
        OpStatus.parked,
        "rejected",
        "POST /v3/users: 422",
    )
    assert (second.status, second.run_after) == (OpStatus.failed, NOW + timedelta(minutes=1))
    _later(clock, 1)
    run(session, org.id, bridge_settings, clock)
    assert second.status is OpStatus.succeeded


def test_a_429_pauses_the_organization_without_charging_the_op(
    session, org, connected, fake, bridge_settings, clock
):
    fake.fail("GET /v3/searchUser", 429, retry_after=0.3)
    op = _queue(session, org, "user.create", member_payload())
    started = time.monotonic()
    run(session, org.id, bridge_settings, clock)
    assert (op.status, op.attempts) == (OpStatus.pending, 0)
    clock.set(NOW + timedelta(seconds=1))
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    assert time.monotonic() - started >= 0.3


def test_a_refused_key_errors_the_connection_and_keeps_the_ops(
    session, org, connected, fake, bridge_settings, clock
):
    fake.accounts.pop(API_KEY)  # revoked at the external system: it answers 401
    op = _queue(session, org, "user.create", member_payload())
    summary = run(session, org.id, bridge_settings, clock)
    assert summary.stopped == "unauthorized"
    assert (op.status, op.attempts) == (OpStatus.pending, 0)
    assert connected.status is ConnectionStatus.error
    assert "401" in connected.last_error


def test_the_schedule_poll_and_the_booking_reconcile(
    session, org, connected, fake, account, bridge_settings, clock
):
    member = _member_with_membership(session, org, fake, bridge_settings, clock)
    today = NOW.date()
    kept = fake.add_class(account, today.isoformat())
    far = fake.add_class(account, (today + timedelta(days=20)).isoformat())
    user = entity_map.find(session, org.id, EntityType.member, member).external_id
    registration = fake.add_registration(account, user, kept)
    connected.schedule_poll_due_at = connected.reconcile_due_at = NOW
    session.commit()
    fake.calls.clear()
    summary = run(session, org.id, bridge_settings, clock)
    (call,) = fake.calls_to("GET /v3/schedule")
    assert call.query == {"from_date": "2026-11-21", "to_date": "2026-12-05",
                          "registration_details": "1"}  # fmt: skip
    assert summary.polls["schedule"]["new"] == 1
    assert entity_map.find_external(session, org.id, EntityType.schedule, far) is None
    seen = entity_map.find_external(session, org.id, EntityType.booking, registration)
    assert (seen.origin, seen.platform_id, seen.data["memberId"]) == (Origin.poll, None, member)
    names = session.scalars(select(OutboxEvent.name)).all()
    assert "bridge.booking_seen" in names
    account.registrations.clear()
    seen.data = {**seen.data, "status": "booked"}
    connected.reconcile_due_at = NOW
    session.commit()
    run(session, org.id, bridge_settings, clock)
    assert seen.data["status"] == "cancelled_externally"


def test_a_coach_change_patches_the_schedule(
    session, org, connected, fake, account, bridge_settings, clock
):
    schedule = fake.add_class(account, NOW.date().isoformat())
    session_id, coach = uuid.uuid4(), uuid.uuid4()
    entity_map.link(session, org.id, EntityType.schedule, platform_id=session_id,
                    external_id=schedule, origin=Origin.manual, now=NOW)  # fmt: skip
    entity_map.link(session, org.id, EntityType.staff, platform_id=coach, external_id="41",
                    origin=Origin.manual, now=NOW)  # fmt: skip
    _queue(session, org, "schedule.coach", {"sessionId": str(session_id), "coachId": str(coach)})
    run(session, org.id, bridge_settings, clock)
    (call,) = fake.calls_to("PATCH /v3/schedule")
    assert call.body == {"schedule_id": schedule, "coach_id": "41"}


def test_events_carry_a_correlation_id_and_no_personal_data_or_key(
    session, org, connected, fake, bridge_settings, clock, caplog
):
    payload = member_payload(phone="+972501234567")
    _queue(session, org, "user.create", payload)
    with caplog.at_level(logging.DEBUG):
        summary = run(session, org.id, bridge_settings, clock)
    events = session.scalars(select(OutboxEvent).where(OutboxEvent.name.like("bridge.%"))).all()
    op_events = [e for e in events if e.name == "bridge.sync_op"]
    run_events = [e for e in events if e.name == "bridge.sync_run"]
    assert op_events
    assert run_events
    assert {e.payload["correlationId"] for e in op_events + run_events} == {summary.correlation_id}
    text = json.dumps([e.payload for e in events]) + caplog.text
    for secret in (API_KEY, "dana@example.test", "+972501234567", "Dana", "Levi"):
        assert secret not in text
    assert API_KEY not in connected.credentials_ciphertext


def test_one_organization_never_gets_more_than_two_requests_a_second(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Spec B 8: the per-organization token bucket, default 2 requests per second."""
    for n in range(3):
        _queue(session, org, "user.create", member_payload(email=f"m{n}@example.test"))
    started = time.monotonic()
    run(session, org.id, bridge_settings, clock, Policy(rate=2.0, timeout=0.5))
    assert len([c for c in fake.calls if c.at >= started]) == 7  # 3 x (search, create), a poll
    assert fake.busiest_second("777", since=started) == 2


@pytest.mark.parametrize("op_type", ["user.update", "booking.create"])
def test_an_op_for_a_member_never_created_parks(
    session, org, connected, fake, bridge_settings, clock, op_type
):
    member = str(uuid.uuid4())
    payload = (
        member_payload(member)
        if op_type == "user.update"
        else {"memberId": member, "bookingId": str(uuid.uuid4()), "sessionId": str(uuid.uuid4())}
    )
    op = _queue(session, org, op_type, payload)
    run(session, org.id, bridge_settings, clock, FAST)
    assert (op.status, op.issue_code) == (OpStatus.parked, "member_unmapped")


def test_a_dispatcher_leaves_an_organization_another_holds_alone_for_a_moment(
    committed_pg, fake, bridge_settings, monkeypatch
):
    """Still due, but another dispatcher holds its lock (a second database connection holding
    the real lock): reaching for it again at once would spin on the lock and take the CPU from
    the dispatcher doing the work. Once the other lets it go, the op is sent."""
    engine = get_engine(committed_pg)
    fake.add_account(API_KEY)
    org, [op] = committed_gym(engine, bridge_settings, name="Held")
    other = dispatcher.organization_lock(engine, org.id)
    assert other.__enter__() is not None  # the other dispatcher's connection holds the lock
    refused: list[float] = []
    stop = threading.Event()
    real_lock = dispatcher.organization_lock

    @contextmanager
    def watched(engine_, organization_id, **options):
        """The real lock; counts refusals, lets the other go after three, stops once served."""
        with real_lock(engine_, organization_id, **options) as connection:
            if connection is None:
                refused.append(time.monotonic())
                if len(refused) == 3:
                    other.__exit__(None, None, None)
            yield connection
        if connection is not None:
            stop.set()

    monkeypatch.setattr(dispatcher, "organization_lock", watched)
    policy = Policy(rate=None, workers=2, idle_seconds=0.1)
    worker = threading.Thread(target=dispatcher.run_dispatcher,
                              args=(engine, bridge_settings, policy),
                              kwargs={"runner": "test", "stop": stop})  # fmt: skip
    worker.start()
    served = stop.wait(timeout=60)
    stop.set()
    worker.join(timeout=60)
    assert served
    assert not worker.is_alive()
    assert len(refused) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(refused)]
    assert all(gap >= policy.idle_seconds for gap in gaps)  # 6,064 attempts in 0.5 s before
    with Session(engine) as session:
        assert session.get(SyncOp, op.id).status is OpStatus.succeeded
    assert len(fake.calls_to("POST /v3/users")) == 1
