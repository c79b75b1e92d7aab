"""Write-behind: a claimed batch's outcomes, links and events are written in one short
transaction after its calls; under the rate limit each op is written before the next call
waits; a dispatcher that dies before its batch is written loses nothing and sends nothing twice
(spec B 3: "before re-sending a create the dispatcher searches for the entity first")."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select, text

from gymctl.bridge import enqueue, entity_map, operations, queue
from gymctl.bridge.dispatcher import Policy
from gymctl.models import OutboxEvent
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, OpType, Origin, SyncOp
from tests.bridge.conftest import FAST, member_payload, run
from tests.conftest import NOW


class Died(BaseException):
    """The dispatcher process died here: nothing in it catches this."""


def _enqueue(session, org, op_type, payload):
    enqueue(session, organization_id=org.id, op_type=op_type, payload=payload, now=NOW)


def _members(session, org, account, fake, count: int, dated=True) -> tuple[str, list[str]]:
    """`count` members, each: user.create, membership.assign, booking.create of one class
    (linked with its day, as the poll links, or without, as an operator may)."""
    day = NOW.date().isoformat()
    schedule = fake.add_class(account, day)
    session_id = str(uuid.uuid4())
    entity_map.link(session, org.id, EntityType.schedule, platform_id=session_id,
                    external_id=schedule, origin=Origin.manual, now=NOW,
                    data={"date": day} if dated else {})  # fmt: skip
    emails = []
    for n in range(count):
        payload = member_payload(email=f"m{n}@example.test")
        member = payload["memberId"]
        _enqueue(session, org, "user.create", payload)
        subscription = {"memberId": member, "startDate": "2026-11-01",
                        "subscriptionId": str(uuid.uuid4())}  # fmt: skip
        _enqueue(session, org, "membership.assign", subscription)
        _enqueue(session, org, "booking.create", {"memberId": member, "sessionId": session_id,
                                                  "bookingId": str(uuid.uuid4())})  # fmt: skip
        emails.append(payload["email"])
    session.commit()
    return schedule, emails


@pytest.mark.parametrize("dies_at_write", [1, 2, 3])
def test_a_dispatcher_dying_before_its_batch_is_written_sends_nothing_twice(
    session, org, connected, fake, account, bridge_settings, clock, monkeypatch, dies_at_write
):
    """Batch 1 creates the users, 2 assigns memberships, 3 books: whichever batch's write is
    lost, its ops stay in flight, the next holder rescues them with the attempt counted, and
    each searches the external system and finds what it had done."""
    schedule, emails = _members(session, org, account, fake, 3)
    real, writes = queue.record, itertools.count(1)

    def record(session_, outcomes, **kwargs):
        if outcomes and next(writes) == dies_at_write:
            raise Died
        return real(session_, outcomes, **kwargs)

    monkeypatch.setattr(queue, "record", record)
    with pytest.raises(Died):
        run(session, org.id, bridge_settings, clock)
    monkeypatch.setattr(queue, "record", real)
    lost = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.in_flight)).all()
    assert len(lost) == 3  # sent, not written

    summary = run(session, org.id, bridge_settings, clock)
    assert summary.rescued == 3
    ops = session.scalars(select(SyncOp)).all()
    assert {op.status for op in ops} == {OpStatus.succeeded}
    assert fake.duplicates == []
    users = account.users
    assert sorted(user["email"] for user in users.values()) == sorted(emails)
    expected = ["created", "membership", f"book:{schedule}"]
    assert all(fake.effects[user_id] == expected for user_id in users)


def test_a_claimed_batch_costs_the_same_statements_whatever_its_size(
    session, org, connected, fake, account, bridge_settings, clock
):
    """The batch's outcomes, links and events go in one executemany each, in one transaction:
    4 ops and 12 ops cost the same statements (the first run also polls: not compared), apart
    from the connection check before each call, under the organization's calls lock (no call
    leaves after a disconnect, none is in flight when it commits), and the transaction that
    check ends."""
    statements: list[str] = []
    bind = session.get_bind()
    per_call = ("SAVEPOINT", "integration_connections.status", "pg_try_advisory_lock",
                "pg_advisory_unlock")  # fmt: skip

    def count(_conn, _cursor, statement, *_args) -> None:
        if not any(part in statement for part in per_call):
            statements.append(statement)

    costs = []
    for size in (1, 4, 12):
        for n in range(size):
            _enqueue(session, org, "user.create", member_payload(email=f"s{size}-{n}@example.test"))
        session.commit()
        statements.clear()
        event.listen(bind, "before_cursor_execute", count)
        try:
            summary = run(session, org.id, bridge_settings, clock, replace(FAST, batch=20))
        finally:
            event.remove(bind, "before_cursor_execute", count)
        assert summary.succeeded == size
        assert session.scalar(select(func.count()).where(
            OutboxEvent.name == "bridge.sync_op",
            OutboxEvent.payload["correlationId"].as_string() == summary.correlation_id,
        )) == size  # fmt: skip
        costs.append(len(statements))
    assert session.scalar(select(func.count()).select_from(EntityLink).where(
        EntityLink.entity_type == EntityType.member)) == 1 + 4 + 12  # fmt: skip
    assert costs[1] == costs[2]


def test_under_the_rate_limit_each_op_is_written_before_the_next_call_waits(
    session, org, connected, fake, account, bridge_settings, clock, monkeypatch
):
    """While the token bucket makes the dispatcher wait, it writes what it holds: at 2
    requests a second every op's outcome is written on its own, before the next call."""
    for n in range(3):
        member = str(uuid.uuid4())
        user = fake.add_user(account, f"u{n}@example.test")
        entity_map.link(session, org.id, EntityType.member, platform_id=member,
                        external_id=user, origin=Origin.manual, now=NOW)  # fmt: skip
        _enqueue(session, org, "user.update", member_payload(member, firstName=f"N{n}"))
    session.commit()
    real, sizes = queue.record, []

    def record(session_, outcomes, **kwargs):
        if outcomes:
            sizes.append(len(outcomes))
        return real(session_, outcomes, **kwargs)

    monkeypatch.setattr(queue, "record", record)
    run(session, org.id, bridge_settings, clock, Policy(rate=2.0, timeout=0.5))
    assert sizes == [1, 1, 1]
    assert len(fake.calls_to("PATCH /v3/users")) == 3


def test_a_bug_in_one_op_leaves_the_links_of_the_others_in_place(
    session, org, connected, fake, account, bridge_settings, clock, monkeypatch
):
    """Not a database error: nothing is rolled back, so the create before it (a member with
    nothing to search by) is written as done and never sent again."""
    created = member_payload(email=None)
    _enqueue(session, org, "user.create", created)
    other = str(uuid.uuid4())
    entity_map.link(session, org.id, EntityType.member, platform_id=other, origin=Origin.manual,
                    external_id=fake.add_user(account, "x@example.test"), now=NOW)  # fmt: skip
    _enqueue(session, org, "user.update", member_payload(other, firstName="Z"))
    session.commit()

    def bug(ctx, op, payload):
        raise KeyError("id")

    monkeypatch.setitem(operations.HANDLERS, OpType.user_update, bug)
    run(session, org.id, bridge_settings, clock)
    create, update = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
    assert (create.status, update.status) == (OpStatus.succeeded, OpStatus.failed)
    assert update.last_error == "KeyError"
    assert entity_map.find(session, org.id, EntityType.member, created["memberId"])
    assert len(fake.calls_to("POST /v3/users")) == 1
    assert fake.duplicates == []


def test_a_database_error_rescues_only_the_ops_that_succeeded(
    session, org, connected, fake, account, bridge_settings, clock, monkeypatch
):
    """The rollback drops the session's links: the create that succeeded goes back to pending
    and finds its user by email; the update that got a 503 keeps its wait on the ladder."""
    created = member_payload(email="found@example.test")
    _enqueue(session, org, "user.create", created)
    other = str(uuid.uuid4())
    entity_map.link(session, org.id, EntityType.member, platform_id=other, origin=Origin.manual,
                    external_id=fake.add_user(account, "x@example.test"), now=NOW)  # fmt: skip
    _enqueue(session, org, "user.update", member_payload(other, firstName="Z"))
    _enqueue(session, org, "schedule.coach", {"sessionId": str(uuid.uuid4()),
                                              "coachId": str(uuid.uuid4())})  # fmt: skip
    session.commit()
    fake.fail("PATCH /v3/users", 503)

    def broken_statement(ctx, op, payload):
        ctx.session.execute(text("SELECT no_such_column FROM bridge_sync_ops"))

    monkeypatch.setitem(operations.HANDLERS, OpType.schedule_coach, broken_statement)
    run(session, org.id, bridge_settings, clock)
    create, update, coach = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
    assert (create.status, create.attempts) == (OpStatus.succeeded, 2)  # rescued, then found
    assert (update.status, update.run_after) == (OpStatus.failed, NOW + FAST.ladder[0])
    assert (coach.status, coach.last_error) == (OpStatus.failed, "ProgrammingError")
    assert len(fake.calls_to("POST /v3/users")) == 1
    assert len(fake.calls_to("PATCH /v3/users")) == 1
    assert entity_map.find(session, org.id, EntityType.member, created["memberId"])
    assert fake.duplicates == []


def test_a_retried_create_of_a_member_with_nothing_to_search_by_parks(
    session, org, connected, fake, account, bridge_settings, clock
):
    """No idempotency keys and no email or phone: re-sending could make a second user, so an
    operator decides (identity_unsearchable)."""
    fake.time_out("POST /v3/users", after_apply=True)
    _enqueue(session, org, "user.create", member_payload(email=None))
    session.commit()
    run(session, org.id, bridge_settings, clock)
    clock.set(NOW + timedelta(minutes=10))
    run(session, org.id, bridge_settings, clock)
    (op,) = session.scalars(select(SyncOp)).all()
    assert (op.status, op.issue_code) == (OpStatus.parked, "identity_unsearchable")
    assert len(fake.calls_to("POST /v3/users")) == 1
    assert len(account.users) == 1


def test_a_retried_booking_of_a_class_linked_without_its_day_searches_the_poll_window(
    session, org, connected, fake, account, bridge_settings, clock
):
    fake.time_out("POST /v3/schedule/bookSession", after_apply=True)
    _members(session, org, account, fake, 1, dated=False)
    run(session, org.id, bridge_settings, clock)
    clock.set(NOW + timedelta(minutes=10))
    run(session, org.id, bridge_settings, clock)
    assert {op.status for op in session.scalars(select(SyncOp))} == {OpStatus.succeeded}
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1
    assert fake.duplicates == []


def test_a_link_held_by_the_batch_is_seen_by_a_later_ops_uniqueness_check(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Two members with one email in one batch: the first creates the user (its link held, not
    yet written); the second's search finds that user, and the check that refuses one external
    user for two members must see the held link: it parks identity_conflict."""
    first = member_payload(email="shared@example.test")
    second = member_payload(email="shared@example.test")
    _enqueue(session, org, "user.create", first)
    _enqueue(session, org, "user.create", second)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    created, conflicted = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
    assert created.status is OpStatus.succeeded
    assert (conflicted.status, conflicted.issue_code) == (OpStatus.parked, "identity_conflict")
    assert len(fake.calls_to("POST /v3/users")) == 1
    (user,) = account.users
    link = entity_map.find(session, org.id, EntityType.member, first["memberId"])
    assert link.external_id == user
    assert entity_map.find(session, org.id, EntityType.member, second["memberId"]) is None
