"""The sync queue (spec B 2.6, 3): order per aggregate, supersede, dedupe, the ladder, leases,
and the operators' retry and dismiss."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from gymctl.bridge import enqueue, queue
from gymctl.errors import DomainError
from gymctl.models import AuditLog, IntegrationConnection
from gymctl.models.bridge import ConnectionStatus, OpStatus, SyncOp
from tests import factories
from tests.access.conftest import snapshot
from tests.bridge.conftest import member_payload
from tests.conftest import NOW

LEASE = timedelta(minutes=5)


@pytest.fixture
def bridged(session):
    """An organization with a connection row (no external calls in these tests)."""
    organization = factories.organization(session)
    session.add(IntegrationConnection(organization_id=organization.id, status="active"))
    session.commit()
    return organization


def _booking(member_id) -> dict:
    return {
        "memberId": str(member_id),
        "bookingId": str(uuid.uuid4()),
        "sessionId": str(uuid.uuid4()),
    }


def _claim(session, org, limit=50, now=NOW):
    return queue.claim(session, org.id, now=now, limit=limit, lease=LEASE, owner="w1")


def _record(session, op, values, owner="w1"):
    return queue.record(session, [(op, values)], owner=owner, now=NOW)


@pytest.mark.embedded
def test_only_the_head_of_each_aggregate_is_claimed_in_enqueue_order(session, bridged):
    """Spec B 3: dispatched only when no earlier unfinished op of the same aggregate_key."""
    members = [uuid.uuid4() for _ in range(3)]
    ops = {m: [] for m in members}
    for _ in range(3):
        for member in members:
            op = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                         payload=_booking(member), now=NOW)  # fmt: skip
            ops[member].append(op.id)
    session.commit()
    for round_ in range(3):
        claimed = _claim(session, bridged)
        assert sorted(op.id for op in claimed) == sorted(ops[m][round_] for m in members)
        assert _claim(session, bridged) == []  # the next of each key waits for its head
        for op in claimed:
            assert _record(session, op, queue.succeeded(op, now=NOW)) == [op]
        session.commit()


@pytest.mark.embedded
def test_a_parked_op_blocks_its_aggregate_and_only_it(session, bridged):
    stuck, free = uuid.uuid4(), uuid.uuid4()
    for member in (stuck, stuck, free, free):
        enqueue(session, organization_id=bridged.id, op_type="booking.create",
                payload=_booking(member), now=NOW)  # fmt: skip
    session.commit()
    heads = _claim(session, bridged)
    parked = next(op for op in heads if op.aggregate_key == f"member:{stuck}")
    other = next(op for op in heads if op.aggregate_key == f"member:{free}")
    _record(session, parked, queue.parked(parked, issue="rejected", error="POST /v3/x: 422"))
    _record(session, other, queue.succeeded(other, now=NOW))
    session.commit()
    later = NOW + timedelta(days=1)
    assert [op.aggregate_key for op in _claim(session, bridged, now=later)] == [f"member:{free}"]
    assert queue.depth(session, bridged.id, now=later)["parked"] == 1


def test_the_in_flight_backstop_refuses_a_second_op_of_one_key(session, bridged):
    """The unique partial index holds even if a claim query were wrong."""
    member = uuid.uuid4()
    first = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                    payload=_booking(member), now=NOW)  # fmt: skip
    second = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                     payload=_booking(member), now=NOW)  # fmt: skip
    session.flush()
    session.execute(update(SyncOp).where(SyncOp.id == first.id).values(status="in_flight"))
    with pytest.raises(IntegrityError), session.begin_nested():
        session.execute(update(SyncOp).where(SyncOp.id == second.id).values(status="in_flight"))


@pytest.mark.embedded
def test_a_newer_update_supersedes_the_waiting_one(session, bridged):
    member = uuid.uuid4()
    old = enqueue(session, organization_id=bridged.id, op_type="user.update",
                  payload=member_payload(member, firstName="Old"), now=NOW)  # fmt: skip
    new = enqueue(session, organization_id=bridged.id, op_type="user.update",
                  payload=member_payload(member, firstName="New"), now=NOW)  # fmt: skip
    session.commit()
    session.refresh(old)
    assert (old.status, old.superseded_by_id) == (OpStatus.superseded, new.id)
    assert [op.id for op in _claim(session, bridged)] == [new.id]


def test_an_in_flight_update_is_never_superseded(session, bridged):
    member = uuid.uuid4()
    enqueue(session, organization_id=bridged.id, op_type="user.update",
            payload=member_payload(member), now=NOW)  # fmt: skip
    session.commit()
    (sent,) = _claim(session, bridged)
    enqueue(session, organization_id=bridged.id, op_type="user.update",
            payload=member_payload(member, firstName="Later"), now=NOW)  # fmt: skip
    session.commit()
    session.refresh(sent)
    assert sent.status is OpStatus.in_flight


def test_a_repeated_dedupe_key_enqueues_once(session, bridged):
    payload = _booking(uuid.uuid4())
    first = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                    payload=payload, now=NOW, dedupe_key="booking.create:b1")  # fmt: skip
    again = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                    payload=payload, now=NOW, dedupe_key="booking.create:b1")  # fmt: skip
    assert again.id == first.id
    assert session.scalar(select(SyncOp.id).where(SyncOp.id != first.id)) is None


def test_failures_back_off_on_the_ladder_then_park(session, bridged):
    """Spec B 3: 1 min, 5 min, 30 min, 2 h, 6 h, then parked with an issues inbox entry."""
    enqueue(session, organization_id=bridged.id, op_type="booking.create",
            payload=_booking(uuid.uuid4()), now=NOW)  # fmt: skip
    session.commit()
    at = NOW
    waits = []
    for _ in range(5):
        (op,) = _claim(session, bridged, now=at)
        _record(session, op, queue.failed(op, now=at, error="POST /v3/schedule/bookSession: 503"))
        session.commit()
        waits.append(op.run_after - at)
        assert op.status is OpStatus.failed
        assert _claim(session, bridged, now=op.run_after - timedelta(seconds=1)) == []
        at = op.run_after
    assert waits == list(queue.LADDER)
    (op,) = _claim(session, bridged, now=at)
    _record(session, op, queue.failed(op, now=at, error="POST /v3/schedule/bookSession: 503"))
    session.commit()
    assert (op.status, op.issue_code, op.attempts) == (OpStatus.parked, "retries_exhausted", 6)


def test_an_expired_lease_returns_the_op_to_pending_with_its_attempt_counted(session, bridged):
    enqueue(session, organization_id=bridged.id, op_type="booking.create",
            payload=_booking(uuid.uuid4()), now=NOW)  # fmt: skip
    session.commit()
    (op,) = _claim(session, bridged)
    assert queue.rescue_expired(session, now=NOW + LEASE - timedelta(seconds=1)) == 0
    assert queue.rescue_expired(session, now=NOW + LEASE + timedelta(seconds=1)) == 1
    session.refresh(op)
    assert (op.status, op.attempts, op.lease_owner) == (OpStatus.pending, 1, None)
    # The dead worker's late outcome is not applied: the lease is no longer its own.
    assert _record(session, op, queue.succeeded(op, now=NOW)) == []


def test_operator_retry_and_dismiss_of_parked_ops(session, bridged):
    member = uuid.uuid4()
    for _ in range(2):
        enqueue(session, organization_id=bridged.id, op_type="booking.create",
                payload=_booking(member), now=NOW)  # fmt: skip
    session.commit()
    (op,) = _claim(session, bridged)
    _record(session, op, queue.parked(op, issue="rejected", error="422"))
    session.commit()
    retried, queued = queue.retry(session, op.id, now=NOW, organization_id=bridged.id)
    assert not queued
    # Counted as attempted once: the retried op searches before it creates.
    assert (retried.status, retried.attempts, retried.issue_code) == (OpStatus.pending, 1, None)
    (op,) = _claim(session, bridged)
    _record(session, op, queue.parked(op, issue="rejected", error="422"))
    session.commit()
    assert queue.dismiss(session, op.id, now=NOW).status is OpStatus.dismissed
    (behind,) = _claim(session, bridged)  # the dismissed op no longer blocks
    assert behind.id > op.id
    actions = session.scalars(select(AuditLog.action).order_by(AuditLog.at)).all()
    assert {"bridge.op_retried", "bridge.op_dismissed"} <= set(actions)


@pytest.mark.parametrize(
    ("action", "status", "code", "http"),
    [
        ("retry", OpStatus.succeeded, "bridge_op_not_retryable", 409),
        ("dismiss", OpStatus.pending, "bridge_op_not_parked", 409),
        ("retry", None, "bridge_op_not_found", 404),
        ("dismiss", None, "bridge_op_not_found", 404),
    ],
)
def test_operator_refusals_change_nothing(session, bridged, action, status, code, http):
    op = enqueue(session, organization_id=bridged.id, op_type="booking.create",
                 payload=_booking(uuid.uuid4()), now=NOW)  # fmt: skip
    if status is not None:
        op.status = status
    session.commit()
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        getattr(queue, action)(session, op.id if status else op.id + 999, now=NOW)
    assert (refused.value.code, refused.value.status) == (code, http)
    session.rollback()
    assert snapshot(session) == before


def test_leads_are_never_written_and_bad_payloads_are_refused(session, bridged):
    before = snapshot(session)
    with pytest.raises(DomainError) as lead:
        enqueue(session, organization_id=bridged.id, op_type="lead.create", payload={}, now=NOW)
    assert (lead.value.code, lead.value.status) == ("bridge_op_not_allowed", 400)
    with pytest.raises(DomainError) as bad:
        enqueue(session, organization_id=bridged.id, op_type="booking.create",
                payload={"memberId": "x"}, now=NOW)  # fmt: skip
    assert (bad.value.code, bad.value.status) == ("bridge_payload_invalid", 400)
    assert snapshot(session) == before


def test_nothing_is_queued_without_a_connection_or_after_disconnect(session, bridged):
    unbridged = factories.organization(session)
    payload = _booking(uuid.uuid4())
    assert enqueue(session, organization_id=unbridged.id, op_type="booking.create",
                   payload=payload, now=NOW) is None  # fmt: skip
    connection = session.scalar(select(IntegrationConnection))
    connection.status = ConnectionStatus.revoked
    assert enqueue(session, organization_id=bridged.id, op_type="booking.create",
                   payload=payload, now=NOW) is None  # fmt: skip
    connection.status = ConnectionStatus.error  # a refused key: changes wait for a new one
    assert enqueue(session, organization_id=bridged.id, op_type="booking.create",
                   payload=payload, now=NOW) is not None  # fmt: skip
