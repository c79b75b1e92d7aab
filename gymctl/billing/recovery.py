"""The recovery job (spec B 8), every 5 minutes: what a crash or a lost answer left unresolved
is resolved by its stored ids: pending charge attempts (then the debts whose retry has come),
stored card refunds, pending desk charges. One pass for the daemon and the forecast, so
neither runs a step the other leaves out."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import attempts, collector, desk_resolution, refunds
from gymctl.crypto import FieldCipher
from gymctl.models import PaymentTransaction
from gymctl.providers.card import CardProvider
from gymctl.providers.documents import DocumentProvider


def recovery_pass(
    factory: sessionmaker[Session],
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    now: datetime,
    documents: DocumentProvider,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    summary = collector.recover(
        factory, provider, now=now, cipher=cipher, monotonic=monotonic
    ).as_dict()
    resumed = refunds.resume_refunds(factory, provider, cipher, now=now, documents=documents)
    desk = desk_resolution.recover_desk_charges(
        factory, provider, cipher, now=now, documents=documents
    )
    told = desk.pop("alerts")  # one list of the pass's alerts: the collector's, then the desk's
    return {
        **summary,
        "alerts": [*summary["alerts"], *told],
        "refunds": resumed,
        "deskCharges": desk,
    }


_STORED = or_(refunds.STORED_REFUND, desk_resolution.PENDING_DESK_CHARGE)


def recovery_due(session: Session, *, after: datetime | None = None) -> datetime | None:
    """The first instant (after `after`, if given) at which the pass can act: the collector's
    (`collector.recovery_due`), or the executing grace of a stored refund or a pending desk
    charge ending."""
    first = select(func.min(PaymentTransaction.created_at)).where(_STORED)
    if after is not None:
        first = first.where(PaymentTransaction.created_at > after - attempts.EXECUTING_GRACE)
    stored = session.scalar(first)
    instants = (
        collector.recovery_due(session, after=after),
        stored and stored + attempts.EXECUTING_GRACE,
    )
    return min((i for i in instants if i is not None), default=None)
