"""Write-behind: a claimed batch's outcomes, links and events are written in one short
transaction after its calls; under the rate limit each op is written before the next call
waits; a dispatcher that dies before its batch is written loses nothing and sends nothing twice
(spec B 3: "before re-sending a create the dispatcher searches for the entity first")."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import event, select

from gymctl.bridge import enqueue, entity_map, queue
from gymctl.bridge.dispatcher import Policy
from gymctl.models.bridge import EntityType, OpStatus, Origin, SyncOp
from tests.bridge.conftest import FAST, member_payload, run
from tests.conftest import NOW


class Died(BaseException):
    """The dispatcher process died here: nothing in it catches this."""


def _enqueue(session, org, op_type, payload):
    enqueue(session, organization_id=org.id, op_type=op_type, payload=payload, now=NOW)


def _members(session, org, account, fake, count: int) -> tuple[str, list[str]]:
    """`count` members, each: user.create, membership.assign, booking.create of one class."""
    day = NOW.date().isoformat()
    schedule = fake.add_class(account, day)
    session_id = str(uuid.uuid4())
    entity_map.link(session, org.id, EntityType.schedule, platform_id=session_id,
                    external_id=schedule, origin=Origin.manual, now=NOW,
                    data={"date": day})  # fmt: skip
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
    4 ops and 12 ops cost the same statements (the first run also polls: not compared)."""
    statements: list[str] = []
    bind = session.get_bind()

    def count(_conn, _cursor, statement, *_args) -> None:
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
        costs.append(len(statements))
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
