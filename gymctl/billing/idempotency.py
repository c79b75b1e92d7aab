"""Client idempotency keys (spec B 4.3): a desk charge, a credit note and a refund carry a
UUIDv4 the client made; the ledger row stores it, unique per organization, so a replayed
request finds what the first one did."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import codes
from gymctl.errors import unprocessable
from gymctl.models import PaymentTransaction

UNIQUE_KEY = "uq_payment_transactions_organization_id_idempotency_key"


def require_uuid4(
    key: uuid.UUID, *, code: str = codes.IDEMPOTENCY_KEY_INVALID, field: str = "idempotencyKey"
) -> None:
    """Client-made keys must be random (v4): a time-based or hand-made id may collide."""
    if key.version != 4 or key.variant != uuid.RFC_4122:
        raise unprocessable(code, f"{field} must be a UUIDv4")


def by_key(
    session: Session, organization_id: uuid.UUID, key: uuid.UUID
) -> PaymentTransaction | None:
    """The organization's ledger row stored under `key`, read fresh."""
    return session.scalar(
        select(PaymentTransaction)
        .where(
            PaymentTransaction.organization_id == organization_id,
            PaymentTransaction.idempotency_key == str(key),
        )
        .execution_options(populate_existing=True)
    )
