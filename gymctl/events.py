"""The one event emitter: analytics, audit and domain events, in the caller's transaction.

An event lands in the outbox together with the change it describes, so it is never sent for a
change that rolled back and never lost for one that committed; the relay (gymctl.relay) delivers
it afterwards. An audit event also writes an audit_log row, the record operators query.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, insert, select
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from gymctl.db import READ_ONLY
from gymctl.models import AuditLog, OutboxEvent


class EventKind(StrEnum):
    analytics = "analytics"
    audit = "audit"
    domain = "domain"


def emit(
    session: Session,
    kind: EventKind,
    name: str,
    *,
    at: datetime,
    aggregate_type: str,
    aggregate_id: uuid.UUID | str,
    organization_id: uuid.UUID | None = None,
    actor_user_id: uuid.UUID | None = None,
    payload: dict[str, Any] | None = None,
    private: dict[str, Any] | None = None,
) -> OutboxEvent:
    """`private` fields (addresses, IPs) go to the audit record only, never to the outbox that
    the relay sends out."""
    payload = dict(payload or {})
    if kind is EventKind.audit:
        session.add(
            AuditLog(
                at=at,
                action=name,
                organization_id=organization_id,
                actor_user_id=actor_user_id,
                target_type=aggregate_type,
                target_id=str(aggregate_id),
                data={**payload, **(private or {})},
            )
        )
    if actor_user_id is not None:
        payload.setdefault("actorUserId", str(actor_user_id))
    event = OutboxEvent(
        kind=kind.value,
        name=name,
        aggregate_type=aggregate_type,
        aggregate_id=str(aggregate_id),
        organization_id=organization_id,
        payload=payload,
        occurred_at=at,
    )
    session.add(event)
    return event


def emit_many(
    session: Session,
    kind: EventKind,
    name: str,
    *,
    at: datetime,
    aggregate_type: str,
    organization_id: uuid.UUID | None,
    payloads: dict[str, dict[str, Any]],
) -> None:
    """Events of one name, one per aggregate id in `payloads`, as one executemany: for a writer
    of a whole batch that needs no event objects back (the bridge dispatcher's outcomes).
    Not for audit events: they need their audit rows, which `emit` writes."""
    common = {"kind": kind.value, "name": name, "aggregate_type": aggregate_type,
              "organization_id": organization_id, "occurred_at": at, "attempts": 0}  # fmt: skip
    if payloads:
        session.execute(
            insert(OutboxEvent.__table__),
            [
                {**common, "aggregate_id": str(aggregate_id), "payload": payload}
                for aggregate_id, payload in payloads.items()
            ],
        )


def unsettled(
    factory: sessionmaker[Session],
    condition: ColumnElement[bool],
    settled_by: InstrumentedAttribute[int],
    *,
    since: datetime,
    limit: int,
) -> list[int]:
    """The ids of the outbox events matching `condition` since `since`, oldest first, that no
    row of `settled_by` (an outbox_event_id column: a member's email, a push) has settled yet.
    A read that takes no write lock on the embedded default."""
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        return list(
            session.scalars(
                select(OutboxEvent.id)
                .where(
                    condition,
                    OutboxEvent.occurred_at >= since,
                    OutboxEvent.id.not_in(select(settled_by)),
                )
                .order_by(OutboxEvent.id)
                .limit(limit)
            )
        )
