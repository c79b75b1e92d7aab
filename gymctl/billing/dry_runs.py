"""The dry run of every billing sweep: what the sweep would touch now, chosen by the sweep's own
selection and caps (the catch-up's 20 organizations x 5 subscriptions, and the 30 s budget for
the listing itself), read in one read-only session; no provider call, nothing written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import (
    abandoned_pages,
    attempts,
    collector,
    desk_resolution,
    lifecycle,
    refunds,
)
from gymctl.models import Checkout, PaymentTransaction
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus


def catch_up(
    session: Session, now: datetime, *, monotonic: Callable[[], float] = time.monotonic
) -> dict[str, Any]:
    return _due(
        session,
        now,
        organizations=collector.CATCHUP_ORGANIZATIONS,
        per_organization=collector.CATCHUP_PER_ORGANIZATION,
        budget_seconds=collector.CATCHUP_BUDGET_SECONDS,
        monotonic=monotonic,
    )


def daily(session: Session, now: datetime) -> dict[str, Any]:
    return _due(session, now)


def recovery(session: Session, now: datetime) -> dict[str, Any]:
    """Pending protected attempts it would ask about, the debts it would collect, the stored
    refunds it would send again and the desk charges it would reconcile."""
    pending = collector.pending_attempts(session)
    debts = _due(session, now, statuses=(SubscriptionStatus.debt,))
    desk = [
        t.id
        for t in desk_resolution.unresolved_desk_charges(session, now=now)
        if (t.metadata_ or {}).get("source") == "desk_charge"
    ]
    return {
        "pendingAttempts": [str(i) for i in pending],
        "debts": debts["organizations"],
        "refunds": [
            str(i)
            for i in refunds.pending_refunds(session, now=now, limit=collector.RECOVERY_BATCH)
        ],
        "deskCharges": [str(i) for i in desk],
    }


def side_effects(session: Session, now: datetime) -> dict[str, Any]:
    rows = session.scalars(
        select(PaymentTransaction).where(
            PaymentTransaction.status == TransactionStatus.completed,
            PaymentTransaction.effects.is_not(None),
            PaymentTransaction.updated_at <= now - collector.SIDE_EFFECTS_STALE,
        )
    ).all()
    open_ = [t.id for t in rows if collector.effects_open(t.effects)]
    done = collector.reviewed(session, open_)
    return {"wouldAlert": [str(i) for i in open_ if i not in done]}


def abandoned_checkouts(session: Session, now: datetime) -> dict[str, Any]:
    """Expired open pages: each would be read back, then abandoned unless it settled (a page
    that took another amount is left to staff)."""
    expired = session.scalars(
        select(Checkout).where(Checkout.status == CheckoutStatus.open, Checkout.expires_at <= now)
    ).all()
    return {
        "wouldCheck": [str(c.id) for c in expired if not (c.metadata_ or {}).get("contradiction")]
    }


def abandoned_read_back(session: Session, now: datetime) -> dict[str, Any]:
    """Abandoned pages due a read-back on their schedule, the pass's own selection and cap."""
    due = abandoned_pages.due_read_backs(session, now, limit=abandoned_pages.READ_BACKS_PER_PASS)
    return {"wouldRead": [str(checkout_id) for checkout_id, _ in due]}


def lifecycle_pass(session: Session, now: datetime) -> dict[str, Any]:
    """The pass itself, rolled back by the caller: what it would move."""
    return lifecycle.run_lifecycle(session, now=now)


DRY_RUNS: dict[str, Callable[[Session, datetime], dict[str, Any]]] = {
    "lifecycle": lifecycle_pass,
    "catch-up": catch_up,
    "daily": daily,
    "recovery": recovery,
    "side-effects": side_effects,
    "abandoned-checkouts": abandoned_checkouts,
    "abandoned-read-back": abandoned_read_back,
}


def _due(
    session: Session,
    now: datetime,
    *,
    statuses: tuple[SubscriptionStatus, ...] = attempts.COLLECTABLE,
    organizations: int | None = None,
    per_organization: int | None = None,
    budget_seconds: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The collector's own selection (collector._collect_due), listed instead of collected."""
    started = monotonic()
    listed, completed = [], True
    chosen = collector.due_by_organization(
        session, now=now, statuses=statuses, organizations=organizations
    )
    for organization_id in chosen:
        if budget_seconds is not None and monotonic() - started >= budget_seconds:
            completed = False
            break
        due = collector.due_in(session, organization_id, now=now, statuses=statuses)
        listed.append(
            {
                "organizationId": str(organization_id),
                "due": [str(i) for i in due[:per_organization]],
            }
        )
    return {
        "organizations": listed,
        "unevaluable": collector.unevaluable(session, now=now),
        "completed": completed,
    }
