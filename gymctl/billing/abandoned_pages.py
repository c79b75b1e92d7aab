"""Abandoned hosted pages read back again, on a schedule (spec B 3, 6; decisions s51).

The abandoned-checkouts sweep (`checkout.abandoned_sweep`) reads an expired page back once and
marks it abandoned; the member can still pay it at the provider afterwards, and then only the
provider's webhook tells us. A webhook lost for good (its redelivery, about 25 hours, spent on
our app down or 5xx answers) left the provider holding the member's money with no ledger row:
nothing read an abandoned page again. This pass reads each abandoned page back by its stored id
on READ_BACK_SCHEDULE, through the webhook's own path (`checkout.verify_and_apply`, which
records a late payment as `apply_page` does: revived where the plan can still be granted,
else recorded on the cancelled plan, `notRevived`, a billing_contradiction alert and an urgent
refund follow-up), a deleted gym's page included.

Each read-back is claimed first in a short committed transaction (the count and the time, by a
compare-and-set on the count), so two passes at once read a page once, a crash mid-call still
counts, and no transaction is open while the provider answers (the embedded default's one
write lock). Every claimed read counts, whatever the provider answered, so a page of a terminal
that refuses every call is still read a bounded number of times."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import checkout
from gymctl.crypto import FieldCipher
from gymctl.models import Checkout
from gymctl.models.billing import READ_BACK_WHERE, CheckoutStatus
from gymctl.providers.card import CardProvider

# Ours (spec B gives no page lifetime at the provider; its webhook redelivery spans about 25 h):
# hourly through the first day after the page was abandoned, then daily for a week. A page paid
# in its first day is recorded within the hour even when every redelivery failed; one paid
# later within the week, by the next day. After 31 read-backs (8 days) the page is not read.
READ_BACK_SCHEDULE: tuple[tuple[int, timedelta], ...] = (
    (24, timedelta(hours=1)),
    (7, timedelta(days=1)),
)
READ_BACKS = sum(times for times, _ in READ_BACK_SCHEDULE)
READ_BACK_WINDOW = sum((times * every for times, every in READ_BACK_SCHEDULE), timedelta())
# Only pages the provider has not answered: one it answered as failed is final (spec B 6: a
# failed page is processed as payment.failed; the provider takes no second payment on it), so
# it is not read again.
READ_BACK_STATUSES = (CheckoutStatus.abandoned,)
READ_BACKS_PER_PASS = 100  # the oldest due first; the rest wait for the next pass (5 minutes)


def _steps(now: datetime) -> list[Any]:
    """One selection per step of the schedule: the pages whose count is on that step and whose
    last read-back is older than its interval. Each searches ix_checkouts_read_back by status
    and a range of the count, its predicate word for word, on both engines (written as one OR,
    SQLite's planner scanned every abandoned page by the status index instead)."""
    steps, done = [], 0
    for times, every in READ_BACK_SCHEDULE:
        steps.append(
            select(Checkout.id, Checkout.read_backs, Checkout.read_back_at).where(
                text(READ_BACK_WHERE),
                Checkout.status.in_(READ_BACK_STATUSES),
                Checkout.read_backs >= done,
                Checkout.read_backs < done + times,
                Checkout.read_back_at <= now - every,
            )
        )
        done += times
    return steps


def due_read_backs(session: Session, now: datetime, *, limit: int | None = None) -> list[Any]:
    """(checkout id, read_backs) of the abandoned pages due a read-back, the longest waiting
    first: the pass's selection (also what a dry run would list)."""
    due = []
    for step in _steps(now):
        step = step.order_by(Checkout.read_back_at, Checkout.id)
        due += session.execute(step if limit is None else step.limit(limit)).all()
    due.sort(key=lambda row: (row.read_back_at, row.id))
    return [(row.id, row.read_backs) for row in due[:limit]]


def read_back_abandoned(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    limit: int = READ_BACKS_PER_PASS,
) -> dict[str, object]:
    """Read back the abandoned pages due on READ_BACK_SCHEDULE and record what was paid."""
    with factory() as session:
        due = due_read_backs(session, now, limit=limit)
    result: dict[str, Any] = {
        "due": len(due),
        "read": 0,
        "completed": [],
        "failed": 0,
        "alerts": [],
        "unreachable": 0,
        "lastReadBack": 0,
    }
    for checkout_id, seen in due:
        with factory() as session:
            if not _claim(session, checkout_id, seen, now):
                continue  # another pass read it meanwhile, or it settled
            result["read"] += 1
            result["lastReadBack"] += seen + 1 == READ_BACKS
            outcome = _read_back(session, provider, checkout_id, now=now, cipher=cipher)
            if outcome == "completed":
                result["completed"].append(str(checkout_id))
            result["failed"] += outcome == "failed"
            result["unreachable"] += outcome == "provider_unreachable"
            if outcome == "billing_contradiction":
                result["alerts"].append({"reason": outcome, "checkoutId": str(checkout_id)})
            session.commit()
    return result


def _claim(session: Session, checkout_id: uuid.UUID, seen: int, now: datetime) -> bool:
    """Count this read-back before the provider is asked, in its own commit; False when another
    pass counted it first (the compare-and-set on the count; on PostgreSQL the second waits for
    the first's commit and then matches nothing)."""
    claimed = session.execute(
        update(Checkout)
        .where(
            Checkout.id == checkout_id,
            Checkout.read_backs == seen,
            Checkout.status.in_(READ_BACK_STATUSES),
        )
        .values(read_backs=seen + 1, read_back_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount
    session.commit()
    return claimed == 1


def _read_back(
    session: Session,
    provider: CardProvider,
    checkout_id: uuid.UUID,
    *,
    now: datetime,
    cipher: FieldCipher,
) -> str:
    """The webhook's own read-back and apply, on the terminal that opened the page (a deleted
    gym's too: its page is its own). A page that took another amount is recorded once and then
    left to staff: its read-backs end."""
    page = session.get(Checkout, checkout_id)
    if (page.metadata_ or {}).get("contradiction") or not page.page_id:
        _end(session, checkout_id)
        return "skipped"
    outcome, _ = checkout.verify_and_apply(
        session,
        provider,
        organization_id=page.organization_id,
        page_id=page.page_id,
        now=now,
        cipher=cipher,
    )
    if outcome == "billing_contradiction":
        _end(session, checkout_id)
    return outcome


def _end(session: Session, checkout_id: uuid.UUID) -> None:
    session.execute(
        update(Checkout)
        .where(Checkout.id == checkout_id)
        .values(read_backs=READ_BACKS)
        .execution_options(synchronize_session=False)
    )
