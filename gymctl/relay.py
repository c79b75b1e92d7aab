"""The outbox relay: deliver undelivered events to the event sink, then mark them delivered.

Delivery is at least once: a crash between the sink's acceptance and the commit delivers the batch
again on the next run, so consumers dedupe by `id`. Order is id order, which is emission order,
hence order per aggregate. That holds because the relay is single-flight (the daemon runs it under
its advisory lock, see daemons.runner), so no two relays interleave batches, and because a batch
that fails stops the run: nothing after it is sent until it goes through. An event whose
transaction commits after a higher id was already relayed is still delivered (the sweep selects
`delivered_at IS NULL`, not "after a watermark"), just later; writers to one aggregate serialise on
its row, so per-aggregate order is kept.

No transaction is open while the sink is called: a batch is read, delivered, then marked in a
short transaction of its own. On the embedded default a transaction holds the database's one
write lock, and a slow sink (an HTTP endpoint's 10 s timeout) would have made every writer wait
for it; on PostgreSQL the run sat idle in a transaction through each call. Each batch is marked
as it is delivered, so a relay killed midway redelivers one batch, not the whole run's.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl.db import READ_ONLY
from gymctl.models import OutboxEvent
from gymctl.providers.event_sink import EventSink, SinkError

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500
# Delivered events are kept this long (the member emails and pushes read 2 days back; the
# sink's consumers have their copy), then pruned at most PRUNE_BATCH a run.
DELIVERED_KEPT = timedelta(days=30)
PRUNE_BATCH = 10_000


@dataclass(frozen=True)
class RelayResult:
    delivered: int = 0
    failed: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def serialize(event: OutboxEvent) -> dict[str, Any]:
    """The wire shape of one event (camelCase, like the client API)."""
    return {
        "id": event.id,
        "kind": event.kind,
        "name": event.name,
        "aggregateType": event.aggregate_type,
        "aggregateId": event.aggregate_id,
        "organizationId": str(event.organization_id) if event.organization_id else None,
        "payload": event.payload,
        "occurredAt": event.occurred_at.isoformat(),
    }


def relay_events(
    factory: sessionmaker[Session],
    sink: EventSink,
    *,
    now: datetime,
    batch_size: int = 500,
    max_batches: int = 20,
) -> RelayResult:
    """Deliver up to `max_batches` batches in id order, each marked delivered in a transaction
    of its own; stop at the first failed batch, which gets attempts + 1 and last_error (the
    failure is returned, not raised). Bounded per run; the next run continues."""
    delivered = 0
    for _ in range(max_batches):
        batch = _next_batch(factory, batch_size)
        if not batch:
            break
        ids = [event["id"] for event in batch]
        try:
            sink.deliver(batch)
        except Exception as error:
            message = _error_text(error)
            _mark(factory, ids, last_error=message)
            logger.warning(
                "event relay: %d event(s) from id %d not delivered: %s", len(ids), ids[0], message
            )
            return RelayResult(delivered=delivered, failed=len(ids), error=message)
        _mark(factory, ids, delivered_at=now)
        delivered += len(ids)
        if len(ids) < batch_size:
            break
    return RelayResult(delivered=delivered)


def _next_batch(factory: sessionmaker[Session], batch_size: int) -> list[dict[str, Any]]:
    """The oldest undelivered events in their wire shape, read without the write lock."""
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        return [
            serialize(event)
            for event in session.scalars(
                select(OutboxEvent)
                .where(OutboxEvent.delivered_at.is_(None))
                .order_by(OutboxEvent.id)
                .limit(batch_size)
            )
        ]


def _mark(factory: sessionmaker[Session], ids: list[int], **values: Any) -> None:
    """One attempt more for the batch, and what came of it, committed."""
    with factory() as session:
        session.execute(
            update(OutboxEvent)
            .where(OutboxEvent.id.in_(ids))
            .values(attempts=OutboxEvent.attempts + 1, **values)
        )
        session.commit()


def _error_text(error: Exception) -> str:
    # A SinkError's message is built to hold no event content. Anything else may quote its input
    # (a payload value), so only its type is kept.
    text = str(error) if isinstance(error, SinkError) else f"{type(error).__name__} from the sink"
    return text[:MAX_ERROR_CHARS]


def prune_delivered(session: Session, *, now: datetime, limit: int = PRUNE_BATCH) -> int:
    """Delete up to `limit` events delivered more than DELIVERED_KEPT ago, oldest first; an
    undelivered event is never deleted. The newest event is kept whatever its age: the embedded
    default's ids are SQLite rowids (no AUTOINCREMENT), and with the highest one gone the next
    event would take an id again, one that consumers (dedupe by id) and the member emails and
    pushes (keyed by it) have already seen."""
    newest = select(func.max(OutboxEvent.id)).scalar_subquery()
    oldest = (
        select(OutboxEvent.id)
        .where(OutboxEvent.delivered_at < now - DELIVERED_KEPT, OutboxEvent.id < newest)
        .order_by(OutboxEvent.id)
        .limit(limit)
    )
    statement = delete(OutboxEvent).where(OutboxEvent.id.in_(oldest.scalar_subquery()))
    return session.execute(statement.execution_options(synchronize_session=False)).rowcount
