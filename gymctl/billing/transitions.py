"""A set-based transition of subscription rows and the domain events it writes.

On PostgreSQL a transition is one statement: it picks at most `limit` rows (oldest first,
skipping rows another worker holds), moves them and writes their events from the moved rows
(`WITH picked AS (SELECT ... FOR UPDATE SKIP LOCKED), moved AS (UPDATE ... RETURNING ...),
notices AS (INSERT INTO outbox_events SELECT ... FROM moved)`), so the statements issued do not
grow with the number of rows. On the embedded default (SQLite, one writer, no data-modifying
CTEs) it picks, updates and emits in three statements. The events are the ones
`gymctl.events.emit` writes: same columns, payload instants as Python's isoformat.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Integer,
    Text,
    Uuid,
    bindparam,
    case,
    cast,
    exists,
    extract,
    false,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.orm import Session

from gymctl.billing.debt import CHARGE_FAILED
from gymctl.db import is_postgres
from gymctl.events import EventKind, emit
from gymctl.models import OutboxEvent, Subscription
from gymctl.models.base import UTCDateTime

S = Subscription.__table__
_OUTBOX = OutboxEvent.__table__
# The reason of a plan the lifecycle cancels for non-payment. Here, not in the lifecycle: the
# booking rules read it, and the lifecycle calls into bookings (a plan's end gives up seats).
NON_PAYMENT = "non_payment"


def _ctid() -> ColumnElement[Any]:
    """A subscription row's physical address (PostgreSQL only)."""
    return literal_column("subscriptions.ctid")


class Moved(NamedTuple):
    rows: int
    events: int
    more: bool  # rows still matching were left for the next run


def utc_wall_clock(at) -> ColumnElement[datetime]:
    """A timestamptz as a UTC wall-clock timestamp, so month steps ignore the session zone."""
    return func.timezone("UTC", at)


@dataclass(frozen=True)
class Transition:
    """Which subscriptions move (`where` over `source`, oldest first), their new values, and
    the domain event each move writes. `notice` is the debt notice stage the move reaches: its
    event is written only when the row was not already at that stage (notices at most once per
    stage, spec B 2.1)."""

    name: str
    where: Callable[[datetime], ColumnElement[bool]]
    # The new column values, from the row and the picked CTE's columns (PostgreSQL only).
    values: Callable[[datetime, Any], dict[str, Any]]
    event: str
    payload: Callable[[Any], dict[str, Any]]
    oldest_first: Any
    source: Any = S  # the FROM of the rows `where` reads
    notice: str | None = None
    # Columns computed once per picked row (PostgreSQL), for values that need them.
    picks: Callable[[datetime], dict[str, ColumnElement[Any]]] | None = None
    # Per-row values computed in Python on the embedded default, where SQL cannot say them,
    # and the columns of `source` they read besides RETURNED.
    embedded_values: Callable[[dict[str, Any], datetime], dict[str, Any]] | None = None
    embedded_reads: tuple[ColumnElement[Any], ...] = ()

    def new_values(self, now: datetime, picked: Any) -> dict[str, Any]:
        values = self.values(now, picked)
        if self.notice is not None:
            values["debt_notice_stage"] = self.notice
        return values

    def event_payload(self, row: Any) -> dict[str, Any]:
        payload = self.payload(row)
        if self.notice is not None:
            payload["notice"] = self.notice
        return payload


# What a moved row exposes to `payload`. debt_reason is read as charge_failed
# when null (spec B 2.1).
RETURNED = (
    S.c.id,
    S.c.organization_id,
    S.c.user_id,
    S.c.plan_type,
    S.c.currency,
    S.c.interval_months,
    S.c.next_charge_date,
    S.c.debt_amount_in_cents,
    S.c.debt_since,
    func.coalesce(S.c.debt_reason, CHARGE_FAILED).label("debt_reason"),
    S.c.current_period_start,
    S.c.current_period_end,
)


def run_transition(session: Session, t: Transition, now: datetime, limit: int) -> Moved:
    """Move at most `limit` rows and write their events, in the caller's transaction."""
    return (_run_pg if is_postgres(session) else _run_embedded)(session, t, now, limit)


def _run_pg(session: Session, t: Transition, now: datetime, limit: int) -> Moved:
    extra = t.picks(now) if t.picks is not None else {}
    picked = (
        select(
            S.c.id,
            _ctid().label("row_ctid"),
            S.c.debt_notice_stage.label("old_stage"),
            *(column.label(name) for name, column in extra.items()),
        )
        .select_from(t.source)
        .where(t.where(now))
        .order_by(t.oldest_first, S.c.id)
        .limit(limit)
        .with_for_update(of=S, skip_locked=True)
        .cte("picked")
    )
    moved = (
        update(S)
        # The picked rows are locked, so their physical address is stable in this transaction:
        # a TID scan reads just them (an id join alone was planned as a hash join over every
        # subscription), then joins the picked columns by id.
        .where(
            _ctid() == func.any(func.array(select(picked.c.row_ctid).scalar_subquery())),
            S.c.id == picked.c.id,
        )
        .values(t.new_values(now, picked.c))
        .returning(*RETURNED, picked.c.old_stage)
        .cte("moved")
    )
    events = select(
        literal(EventKind.domain.value),
        literal(t.event),
        literal("subscription"),
        cast(moved.c.id, Text),
        moved.c.organization_id,
        func.jsonb_build_object(*_json_pairs(t.event_payload(moved.c))),
        literal(now, UTCDateTime()),
        literal(0),
    )
    if t.notice is not None:
        events = events.where(moved.c.old_stage.is_distinct_from(t.notice))
    columns = (
        "kind",
        "name",
        "aggregate_type",
        "aggregate_id",
        "organization_id",
        "payload",
        "occurred_at",
        "attempts",
    )
    notices = insert(_OUTBOX).from_select(columns, events).returning(_OUTBOX.c.id).cte("notices")
    moved_count = select(func.count()).select_from(moved).scalar_subquery()
    # Rows still matching beyond the ones picked (the statement's snapshot predates the move).
    left = exists(
        select(S.c.id).select_from(t.source).where(t.where(now), S.c.id.not_in(select(picked.c.id)))
    )
    row = session.execute(
        select(
            moved_count,
            select(func.count()).select_from(notices).scalar_subquery(),
            case((moved_count >= limit, left), else_=false()),
        )
    ).one()
    return Moved(row[0], row[1], bool(row[2]))


def _json_pairs(payload: dict[str, Any]) -> list[Any]:
    """jsonb_build_object's arguments; instants as Python's isoformat writes them, ids as text."""
    pairs: list[Any] = []
    for key, value in payload.items():
        pairs.append(literal_column(f"'{key}'"))
        if not isinstance(value, ColumnElement):
            value = cast(literal(value), Integer if isinstance(value, int) else Text)
        elif isinstance(value.type, DateTime | UTCDateTime):
            value = _iso_pg(value)
        elif isinstance(value.type, Uuid):
            value = cast(value, Text)
        pairs.append(value)
    return pairs


def _iso_pg(at: ColumnElement[datetime]) -> ColumnElement[str]:
    utc = utc_wall_clock(at)
    fraction = case(
        (extract("microseconds", utc) % 1_000_000 != 0, func.to_char(utc, ".US")), else_=""
    )
    return func.to_char(utc, 'YYYY-MM-DD"T"HH24:MI:SS') + fraction + "+00:00"


def _run_embedded(session: Session, t: Transition, now: datetime, limit: int) -> Moved:
    picked = session.execute(_embedded_pick(t), {"now": now, "limit": limit + 1}).all()
    left = len(picked) > limit
    picked = picked[:limit]
    if not picked:
        return Moved(0, 0, left)
    old_stage = {row.id: row.old_stage for row in picked}
    if t.embedded_values is not None:
        # Per-row values (the roll's month steps) computed here, written in one executemany;
        # a value SQL says (a column of the row's plan) is the statement's own.
        changes = [t.embedded_values(row._asdict(), now) for row in picked]
        said = {c: v for c, v in changes[0].items() if isinstance(v, ColumnElement)}
        session.execute(
            update(S)
            .where(S.c.id == bindparam("row_id"))
            .values({c: said.get(c, bindparam(f"new_{c}")) for c in changes[0]}),
            [
                {
                    "row_id": row.id,
                    **{f"new_{c}": value for c, value in change.items() if c not in said},
                }
                for row, change in zip(picked, changes, strict=True)
            ],
        )
        moved = [
            SimpleNamespace(**{**row._asdict(), **change})
            for row, change in zip(picked, changes, strict=True)
        ]
    else:
        moved = session.execute(
            update(S)
            .where(S.c.id.in_(old_stage))
            .values(t.new_values(now, None))
            .returning(*RETURNED)
        ).all()
    written = 0
    for row in moved:
        if t.notice is not None and old_stage[row.id] == t.notice:
            continue
        emit(
            session,
            EventKind.domain,
            t.event,
            at=now,
            aggregate_type="subscription",
            aggregate_id=row.id,
            organization_id=row.organization_id,
            payload={key: _json_value(value) for key, value in t.event_payload(row).items()},
        )
        written += 1
    session.flush()
    return Moved(len(moved), written, left)


_PICKS: dict[str, Any] = {}


def _embedded_pick(t: Transition) -> Any:
    """The rows a transition moves, as one statement built once per transition (`now` and the
    limit bound at each run): the hourly pass and the forecast's thousands of passes skip
    rebuilding its conditions, which cost more than SQLite running them."""
    if t.name not in _PICKS:
        _PICKS[t.name] = (
            select(*RETURNED, S.c.debt_notice_stage.label("old_stage"), *t.embedded_reads)
            .select_from(t.source)
            .where(t.where(bindparam("now")))
            .order_by(t.oldest_first, S.c.id)
            .limit(bindparam("limit", type_=Integer))
        )
    return _PICKS[t.name]


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value
