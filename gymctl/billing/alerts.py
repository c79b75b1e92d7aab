"""Billing alerts (spec B 6): a reason and the ids an operator needs, logged as a warning so
the error tracker and the log pipeline page someone. Never amounts of a card, never tokens.

A subscription's collector alert is raised once per state change: the reason last raised is
kept on the row (`billing_alert`), so a held subscription seen by every minute's pass pages
once, and again only after its state changed (an attempt started, a hold was put or lifted).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from gymctl.models import Subscription

logger = logging.getLogger("gymctl.billing.alerts")


# Set while a forecast runs the sweeps on its scratch copy (in the forecast's own thread).
_SILENCED: ContextVar[bool] = ContextVar("billing_alerts_silenced", default=False)


# Set while a pass gathers the alerts raised under it (`collected`).
_COLLECTED: ContextVar[list[dict[str, str]] | None] = ContextVar(
    "billing_alerts_collected", default=None
)


def raise_alert(reason: str, **ids: Any) -> dict[str, str]:
    entry = {"reason": reason, **{key: str(value) for key, value in ids.items()}}
    if not _SILENCED.get():
        logger.warning("billing alert %s", entry)
    gathered = _COLLECTED.get()
    if gathered is not None:
        gathered.append(entry)
    return entry


@contextmanager
def collected() -> Iterator[list[dict[str, str]]]:
    """The alerts raised inside, in order: a pass whose steps page from deep inside (a desk
    charge's reconcile: a contradiction, late evidence, an account gone) reports them in its
    summary as the collector's passes report theirs."""
    gathered: list[dict[str, str]] = []
    token = _COLLECTED.set(gathered)
    try:
        yield gathered
    finally:
        _COLLECTED.reset(token)


@contextmanager
def silenced() -> Iterator[None]:
    """No page for what a forecast raises: its subscription ids are real, but what it saw
    happen is a simulation (the sweeps still return the alert to the forecast)."""
    token = _SILENCED.set(True)
    try:
        yield
    finally:
        _SILENCED.reset(token)


def first_of_its_state(session: Session, subscription_id: uuid.UUID, reason: str) -> bool:
    """Remember `reason` as the subscription's last alert; True when it was not already (the
    alert is to be raised). The caller commits."""
    moved = session.execute(
        update(Subscription)
        .where(
            Subscription.id == subscription_id,
            or_(Subscription.billing_alert.is_(None), Subscription.billing_alert != reason),
        )
        .values(billing_alert=reason)
        .execution_options(synchronize_session=False)
    )
    return moved.rowcount == 1
