"""The outbox relay: deliver undelivered events to the event sink, then mark them delivered.

Delivery is at least once: a crash between the sink's acceptance and the commit delivers the batch
again on the next run, so consumers dedupe by `id`. Order is id order, which is emission order,
hence order per aggregate. That holds because the relay is single-flight (the daemon runs it under
its advisory lock, see daemons.runner), so no two relays interleave batches, and because a batch
that fails stops the run: nothing after it is sent until it goes through. An event whose
transaction commits after a higher id was already relayed is still delivered (the sweep selects
`delivered_at IS NULL`, not "after a watermark"), just later; writers to one aggregate serialise on
its row, so per-aggregate order is kept.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import OutboxEvent
from gymctl.providers.event_sink import EventSink, SinkError

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500


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
    session: Session,
    sink: EventSink,
    *,
    now: datetime,
    batch_size: int = 500,
    max_batches: int = 20,
) -> RelayResult:
    """Deliver up to `max_batches` batches in id order; stop at the first failed batch.

    A failed batch gets attempts + 1 and last_error, and nothing of it counts as delivered; the
    failure is returned, not raised, so the caller commits that record. Bounded per run so one
    run never holds the lock for long; the next run continues.
    """
    delivered = 0
    for _ in range(max_batches):
        batch = list(
            session.scalars(
                select(OutboxEvent)
                .where(OutboxEvent.delivered_at.is_(None))
                .order_by(OutboxEvent.id)
                .limit(batch_size)
            )
        )
        if not batch:
            break
        try:
            sink.deliver([serialize(event) for event in batch])
        except Exception as error:
            message = _error_text(error)
            for event in batch:
                event.attempts += 1
                event.last_error = message
            session.flush()
            logger.warning(
                "event relay: %d event(s) from id %d not delivered: %s",
                len(batch),
                batch[0].id,
                message,
            )
            return RelayResult(delivered=delivered, failed=len(batch), error=message)
        for event in batch:
            event.attempts += 1
            event.delivered_at = now
        session.flush()
        delivered += len(batch)
        if len(batch) < batch_size:
            break
    return RelayResult(delivered=delivered)


def _error_text(error: Exception) -> str:
    # A SinkError's message is built to hold no event content. Anything else may quote its input
    # (a payload value), so only its type is kept.
    text = str(error) if isinstance(error, SinkError) else f"{type(error).__name__} from the sink"
    return text[:MAX_ERROR_CHARS]
