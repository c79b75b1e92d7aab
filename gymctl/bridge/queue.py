"""The ordered sync queue (spec B 2.6, 3): enqueue, claim, outcomes, leases, operator actions.

Order: an op is claimed only when no earlier unfinished op (pending, in flight, failed or parked)
of its aggregate_key exists. `FOR UPDATE SKIP LOCKED` alone would not keep that order (a locked
head row is skipped and the next row of its key looks free), so the claim has the NOT EXISTS
check, a unique partial index allows one in-flight op per key as the backstop, and a partial
index on (aggregate_key, id) over unfinished rows keeps the check an index probe. The claim's
`LIMIT ... SKIP LOCKED` sits in a CTE so the planner cannot update more rows than the limit.

Across members, one order matters: a booking.create that carries its class session's key
(class_key: the mirror sets it on every booking.cancel, and on a create only when the seat it
takes may still be held at the external system by a cancel not yet sent) waits while more of
that class's earlier booking.cancel ops are on their way than its spare seats allow, so a
waitlist promotion never meets a full class there. It needs one freed seat, not every cancel;
and a parked cancel (or one stuck behind its member's parked op) holds no one but its member,
as spec B 3 has it. Other creates, and cancels, wait for nothing but their member: a class is
not serialised, and a class with room costs no claim round.

Enqueue order is id order because enqueues of one aggregate serialise on an advisory lock named
after it (held to the end of the caller's transaction): a later enqueue cannot commit a lower id.
A class needs no lock of its own: a create that takes a seat a cancel freed was decided after
that cancel committed, so its id is the higher one.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, exists, func, select, update
from sqlalchemy.orm import Session, aliased
from sqlalchemy.orm.attributes import set_committed_value

from gymctl.bridge import codes
from gymctl.bridge.payloads import dump, parse_payload
from gymctl.db import advisory_lock, is_postgres, locked_row
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models.bridge import (
    UNFINISHED,
    WAITING,
    ConnectionStatus,
    IntegrationConnection,
    OpStatus,
    OpType,
    SyncOp,
)
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.organizations import Organization

# Spec B 3: failures back off 1 min, 5 min, 30 min, 2 h, 6 h; the next failure parks.
LADDER: tuple[timedelta, ...] = (
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=6),
)
# A newer op of these types carries the entity's whole state: it replaces a waiting one.
SUPERSEDING = {OpType.user_update, OpType.membership_update, OpType.schedule_coach}
QUEUEING = (ConnectionStatus.pending, ConnectionStatus.active, ConnectionStatus.error)
MAX_ERROR = 300
# What a deleted gym's bridge still takes while it winds down (connection.wind_down): what
# gives something up there. A user.update only as a deactivation (see `_gives_up`).
GIVING_UP = {OpType.membership_cancel, OpType.membership_hold, OpType.booking_cancel}


def enqueue(
    session: Session,
    *,
    organization_id: uuid.UUID,
    op_type: OpType | str,
    payload: dict[str, Any],
    now: datetime,
    dedupe_key: str | None = None,
    class_key: str | None = None,
) -> SyncOp | None:
    """Queue one change for the external system, in the caller's transaction.

    The one door to the queue (platform areas reach it through `mirror`, which decides the op
    type, payload and keys). Returns None when the organization has no bridge
    (never connected, or disconnected): nothing is mirrored then. An existing `dedupe_key`
    returns that op unchanged (a repeated hook enqueues once). A new op of a superseding type
    replaces the waiting ops of the same type and entity, which become superseded.
    `class_key`: a booking op's class session, for the order across members (see above).

    A deleted organization's bridge takes only what gives something up there (a plan's or a
    seat's cancel, a user's deactivation: what its deletion queues, leaving.end_holdings);
    anything else is not queued (None): its memberships still read active while it winds
    down, and a member's new name or address would otherwise create them there.
    """
    op_type = OpType(op_type)
    parsed = parse_payload(op_type, payload)
    connection = session.scalar(
        select(IntegrationConnection).where(
            IntegrationConnection.organization_id == organization_id
        )
    )
    if connection is None or connection.status not in QUEUEING:
        return None
    if not _gives_up(op_type, parsed) and session.scalar(
        select(Organization.deleted_at).where(Organization.id == organization_id)
    ):
        return None
    key = parsed.aggregate_key()
    if is_postgres(session):  # SQLite's BEGIN IMMEDIATE already serialises every writer
        advisory_lock(session, f"bridge:aggregate:{key}")
    if dedupe_key is not None:
        existing = session.scalar(select(SyncOp).where(SyncOp.dedupe_key == dedupe_key))
        if existing is not None:
            return existing
    op = SyncOp(
        organization_id=organization_id,
        op_type=op_type,
        aggregate_key=key,
        class_key=class_key,
        dedupe_key=dedupe_key,
        payload=dump(parsed),
        status=OpStatus.pending,
        attempts=0,
        run_after=now,
        created_at=now,
        updated_at=now,
    )
    session.add(op)
    session.flush()
    if op_type in SUPERSEDING:
        _supersede(session, op, now)
    return op


def _gives_up(op_type: OpType, parsed: Any) -> bool:
    return op_type in GIVING_UP or (op_type is OpType.user_update and parsed.active is False)


def _supersede(session: Session, op: SyncOp, now: datetime) -> None:
    same_entity = [SyncOp.op_type == op.op_type, SyncOp.aggregate_key == op.aggregate_key]
    if op.op_type is OpType.membership_update:
        same_entity.append(
            SyncOp.payload["subscriptionId"].as_string() == op.payload["subscriptionId"]
        )
    session.execute(
        update(SyncOp)
        .where(*same_entity, SyncOp.id < op.id, SyncOp.status.in_(WAITING))
        .values(
            status=OpStatus.superseded, superseded_by_id=op.id, completed_at=now, updated_at=now
        )
        .execution_options(synchronize_session=False)
    )


def blocked() -> Any:
    """An op (SyncOp) is not claimable yet: an earlier op of its aggregate is unfinished, or it
    is a booking.create with a class key and more of its class's earlier booking.cancel ops
    are on their way than it may pass (its spare seats). A cancel on its way is pending, in
    flight or failed on the ladder, and not stuck behind a parked op of its own member: a
    parked op blocks its aggregate only (spec B 3), so neither it nor what waits behind it
    holds another member's create."""
    earlier = aliased(SyncOp)
    by_member = exists().where(
        earlier.aggregate_key == SyncOp.aggregate_key,
        earlier.id < SyncOp.id,
        earlier.status.in_(UNFINISHED),
    )
    stuck = aliased(SyncOp)
    behind_parked = exists().where(
        stuck.aggregate_key == earlier.aggregate_key,
        stuck.id < earlier.id,
        stuck.status == OpStatus.parked,
    )
    cancels_on_their_way = (
        select(func.count())
        .select_from(earlier)
        .where(
            earlier.class_key == SyncOp.class_key,
            earlier.id < SyncOp.id,
            earlier.status.in_(UNFINISHED),  # as the class index's predicate, to probe it
            earlier.status != OpStatus.parked,
            earlier.op_type == OpType.booking_cancel,
            ~behind_parked.correlate(earlier),
        )
        .correlate(SyncOp)
        .scalar_subquery()
    )
    spare = func.coalesce(SyncOp.payload["spareSeats"].as_integer(), 0)
    return (by_member.correlate(SyncOp)) | (
        (SyncOp.op_type == OpType.booking_create)
        & SyncOp.class_key.is_not(None)
        & (cancels_on_their_way > spare)
    )


def _claim_statement() -> Any:
    candidates = (
        select(SyncOp.id)
        .where(
            SyncOp.organization_id == bindparam("of_organization"),
            SyncOp.status.in_(WAITING),
            SyncOp.run_after <= bindparam("at"),
            ~blocked(),
        )
        .order_by(SyncOp.id)
        .limit(bindparam("up_to"))
        .with_for_update(skip_locked=True)
        .cte("candidates")
    )
    return (
        update(SyncOp)
        .where(SyncOp.id == candidates.c.id)
        .values(
            status=OpStatus.in_flight,
            attempts=SyncOp.attempts + 1,
            lease_owner=bindparam("by"),
            lease_expires_at=bindparam("until"),
            updated_at=bindparam("at"),
        )
        .returning(SyncOp)
        .execution_options(synchronize_session=False, populate_existing=True)
    )


# Built once: composing these statements costs more CPU than running them (measured).
_CLAIM = _claim_statement()
_OPS = SyncOp.__table__
_HELD = (
    select(_OPS.c.id, _OPS.c.payload)
    .where(
        _OPS.c.id.in_(bindparam("ids", expanding=True)),
        _OPS.c.status == OpStatus.in_flight,
        _OPS.c.lease_owner == bindparam("owner"),
    )
    .order_by(_OPS.c.id)  # locks in one order: no deadlock with a rescue
    .with_for_update()
)
_RECORD = update(_OPS).where(_OPS.c.id == bindparam("op_id"))


def claim(
    session: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    limit: int,
    lease: timedelta,
    owner: str,
) -> list[SyncOp]:
    """Move up to `limit` due heads of their aggregates to in_flight under a lease; commits."""
    # Parameter names differ from the columns': an UPDATE reserves those for its SET clause.
    params = {"of_organization": organization_id, "at": now, "up_to": limit, "by": owner,
              "until": now + lease}  # fmt: skip
    try:
        with unique_violation("uq_bridge_sync_ops_in_flight_key"):
            ops = list(session.scalars(_CLAIM, params))
            session.commit()
    except UniqueViolation:
        # The in-flight backstop refused a second op of one key: claim again next round.
        session.rollback()
        return []
    return sorted(ops, key=lambda op: op.id)


# -- outcomes: what an op's attempt leaves on its row, then written in one go -------------------


def _row(op: SyncOp) -> dict[str, Any]:
    """The columns an outcome may change, as they stand: every outcome writes them all, so a
    batch of different outcomes is one executemany."""
    return {
        "status": op.status,
        "attempts": op.attempts,
        "run_after": op.run_after,
        "completed_at": op.completed_at,
        "issue_code": op.issue_code,
        "last_error": op.last_error,
    }


def _spent(op: SyncOp) -> dict[str, Any]:
    """A finished op's payload change: an erased member's deactivation drops the address it
    searched by (mirror.member_erased), which only its sending needed."""
    payload = op.payload
    if op.op_type is OpType.user_update and payload.get("active") is False and "email" in payload:
        return {"payload": {"memberId": payload["memberId"], "active": False}}
    return {}


def succeeded(op: SyncOp, *, now: datetime) -> dict[str, Any]:
    return {
        **_row(op), "status": OpStatus.succeeded, "completed_at": now,
        "issue_code": None, "last_error": None, **_spent(op),
    }  # fmt: skip


def failed(
    op: SyncOp, *, now: datetime, error: str, ladder: tuple[timedelta, ...] = LADDER
) -> dict[str, Any]:
    """A transient failure: wait on the ladder, or park once it is exhausted."""
    if op.attempts > len(ladder):
        return parked(op, issue="retries_exhausted", error=error)
    return {
        **_row(op), "status": OpStatus.failed, "run_after": now + ladder[op.attempts - 1],
        "last_error": error[:MAX_ERROR],
    }  # fmt: skip


def parked(op: SyncOp, *, issue: str, error: str) -> dict[str, Any]:
    """Into the issues inbox; the op keeps blocking its aggregate (and only it)."""
    return {
        **_row(op), "status": OpStatus.parked, "issue_code": issue,
        "last_error": error[:MAX_ERROR],
    }  # fmt: skip


ERASED = "withdrawn: personal data erased"


def erased(op_type: OpType, payload: dict[str, Any]) -> bool:
    """A member's user op scrubbed by an erasure (mirror.member_erased): it carries no details
    to send (every user.create and user.update the mirror builds names the member) and is no
    deactivation (which carries none). It is never sent: withdrawn."""
    return (
        op_type in (OpType.user_create, OpType.user_update)
        and "firstName" not in payload
        and payload.get("active") is not False
    )


def withdrawn(op: SyncOp, *, now: datetime, payload: dict[str, Any]) -> dict[str, Any]:
    """Never sent again, as an erasure withdraws an unsent op: superseded (by no op), its
    payload as the erasure left it."""
    return {
        **_row(op), "status": OpStatus.superseded, "completed_at": now, "issue_code": None,
        "last_error": ERASED, "payload": payload,
    }  # fmt: skip


def released(op: SyncOp, *, run_after: datetime) -> dict[str, Any]:
    """Back to pending without charging the attempt: the op was not at fault (429, 401), or
    it never ran."""
    return {
        **_row(op), "status": OpStatus.pending, "attempts": op.attempts - 1,
        "run_after": run_after,
    }  # fmt: skip


def rescued(op: SyncOp, *, now: datetime) -> dict[str, Any]:
    """Back to pending with the attempt counted: it was sent but its effects were not
    recorded, so its next attempt searches the external system first (as after a crash)."""
    return {**_row(op), "status": OpStatus.pending, "run_after": now}


def record(
    session: Session,
    outcomes: list[tuple[SyncOp, dict[str, Any]]],
    *,
    owner: str,
    now: datetime,
) -> list[SyncOp]:
    """Write outcomes in the caller's transaction, each only if `owner` still holds the op's
    lease (a rescue may have taken it); returns the ops written. Two statements for any
    number: lock the rows still leased to us, then one executemany UPDATE.

    The rows are read as they stand under that lock: a user op an erasure scrubbed while it
    was in flight (mirror.member_erased; the erasure locks the member's user ops in the same
    id order, so either waits for the other's commit) is withdrawn unless its attempt
    succeeded: failed, parked or released, it would be sent again, and it has no one's
    details left to send."""
    if not outcomes:
        return []
    ids = [op.id for op, _ in outcomes]
    held = {row.id: row.payload for row in session.execute(_HELD, {"ids": ids, "owner": owner})}
    written = [
        (op, values)
        if values["status"] is OpStatus.succeeded or not erased(op.op_type, held[op.id])
        else (op, withdrawn(op, now=now, payload=held[op.id]))
        for op, values in outcomes
        if op.id in held
    ]
    if not written:
        return []
    cleared = {"lease_owner": None, "lease_expires_at": None, "updated_at": now}
    rows = [{"op_id": op.id, **values, **cleared} for op, values in written]
    for columns in {frozenset(row) for row in rows}:  # one executemany a set of columns
        session.execute(_RECORD, [row for row in rows if frozenset(row) == columns])
    for op, values in written:
        for name, value in {**values, **cleared}.items():
            set_committed_value(op, name, value)  # already written: no second UPDATE at flush
    return [op for op, _ in written]


def rescue_expired(session: Session, *, now: datetime) -> int:
    """In-flight ops whose lease expired (their worker died) go back to pending. The attempt
    stays counted, so a retried create searches the external system before sending again."""
    result = session.execute(
        update(SyncOp)
        .where(SyncOp.status == OpStatus.in_flight, SyncOp.lease_expires_at < now)
        .values(status=OpStatus.pending, lease_owner=None, lease_expires_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def rescue_organization(session: Session, organization_id: uuid.UUID, *, now: datetime) -> int:
    """Called by the holder of the organization's dispatch lock: no one else can be working on
    its in-flight ops, so they belong to a dispatcher that died; no need to wait for the lease."""
    result = session.execute(
        update(SyncOp)
        .where(SyncOp.organization_id == organization_id, SyncOp.status == OpStatus.in_flight)
        .values(status=OpStatus.pending, lease_owner=None, lease_expires_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def get_op(session: Session, op_id: int, organization_id: uuid.UUID | None = None) -> SyncOp:
    """The op under its row lock, read as it stands (a caller that read it before, unlocked,
    got its earlier copy back: an op dismissed meanwhile still read parked, and was retried)."""
    op = locked_row(session, SyncOp, op_id)
    if op is None or (organization_id is not None and op.organization_id != organization_id):
        raise not_found(codes.BRIDGE_OP_NOT_FOUND, f"no sync op {op_id}")
    return op


def retry(
    session: Session,
    op_id: int,
    *,
    now: datetime,
    organization_id: uuid.UUID | None = None,
    actor_user_id: uuid.UUID | None = None,
) -> tuple[SyncOp, bool]:
    """A parked op (or one waiting on the ladder) back to pending now. A parked op starts the
    ladder again, but counted as attempted once: it may have been applied before it parked,
    so its next attempt searches the external system before it creates (a create is never
    sent blind twice). The op, and whether it was queued already (pending or in flight: a
    second retry, a double click), which answers as done and changes nothing."""
    op = get_op(session, op_id, organization_id)
    if op.status in (OpStatus.pending, OpStatus.in_flight):
        return op, True
    if op.status not in (OpStatus.parked, OpStatus.failed):
        raise conflict(codes.BRIDGE_OP_NOT_RETRYABLE, f"op {op_id} is {op.status.value}")
    if op.status is OpStatus.parked:
        op.attempts = 1
    op.status = OpStatus.pending
    op.issue_code = None
    op.run_after = now
    op.updated_at = now
    _audit(session, "bridge.op_retried", op, now, actor_user_id)
    return op, False


def dismiss(
    session: Session,
    op_id: int,
    *,
    now: datetime,
    organization_id: uuid.UUID | None = None,
    actor_user_id: uuid.UUID | None = None,
) -> SyncOp:
    """Give a parked op up: it is never sent and stops blocking its aggregate."""
    op = get_op(session, op_id, organization_id)
    if op.status is not OpStatus.parked:
        raise conflict(codes.BRIDGE_OP_NOT_PARKED, f"op {op_id} is {op.status.value}")
    op.status = OpStatus.dismissed
    op.payload = _spent(op).get("payload", op.payload)
    op.completed_at = now
    op.updated_at = now
    _audit(session, "bridge.op_dismissed", op, now, actor_user_id)
    return op


def _audit(
    session: Session, name: str, op: SyncOp, now: datetime, actor_user_id: uuid.UUID | None
) -> None:
    emit(
        session,
        EventKind.audit,
        name,
        at=now,
        aggregate_type="bridge_sync_op",
        aggregate_id=str(op.id),
        organization_id=op.organization_id,
        actor_user_id=actor_user_id,
        payload={"opId": op.id, "opType": op.op_type.value},
    )


def depth(session: Session, organization_id: uuid.UUID, *, now: datetime) -> dict[str, Any]:
    """Queue depth by status, the oldest waiting op's age and the parked count."""
    counts = dict(
        session.execute(
            select(SyncOp.status, func.count())
            .where(SyncOp.organization_id == organization_id)
            .group_by(SyncOp.status)
        ).all()
    )
    oldest = session.scalar(
        select(func.min(SyncOp.created_at)).where(
            SyncOp.organization_id == organization_id, SyncOp.status.in_(WAITING)
        )
    )
    if oldest is not None and oldest.tzinfo is None:  # min() bypasses the column type on SQLite
        oldest = datetime.fromisoformat(str(oldest)).replace(tzinfo=now.tzinfo)
    return {
        "byStatus": {status.value: counts.get(status, 0) for status in OpStatus},
        "oldestPendingAgeSeconds": round((now - oldest).total_seconds()) if oldest else None,
        "parked": counts.get(OpStatus.parked, 0),
    }


def list_ops(
    session: Session,
    organization_id: uuid.UUID,
    *,
    status: OpStatus | None = None,
    limit: int = 100,
    after_id: int | None = None,
) -> list[SyncOp]:
    query = select(SyncOp).where(SyncOp.organization_id == organization_id)
    if status is not None:
        query = query.where(SyncOp.status == status)
    if after_id is not None:
        query = query.where(SyncOp.id > after_id)
    return list(session.scalars(query.order_by(SyncOp.id).limit(limit)))


def describe(op: SyncOp) -> dict[str, Any]:
    """An op as operators and the inbox see it: no payload (it holds personal data)."""
    return {
        "id": op.id,
        "opType": op.op_type.value,
        "aggregateKey": op.aggregate_key,
        "status": op.status.value,
        "attempts": op.attempts,
        "issueCode": op.issue_code,
        "lastError": op.last_error,
        "runAfter": op.run_after.isoformat(),
        "createdAt": op.created_at.isoformat(),
        "completedAt": op.completed_at.isoformat() if op.completed_at else None,
    }
