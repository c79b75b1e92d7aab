"""The bridge's rows in the daemon table: (session, now, settings) sweeps that only touch the
database, and the dispatcher pass for daemons that run everything on one machine (the
`gymctl bridge dispatch` processes are the way to scale it out; both share the organization
locks, so they never serve one organization twice)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from gymctl.bridge import polling, queue
from gymctl.bridge.dispatcher import Policy, process_label, run_dispatcher
from gymctl.config import Settings


def lease_rescue(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return {"rescued": queue.rescue_expired(session, now=now)}


def schedule_poll(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return {"requested": polling.mark_due(session, "schedule_poll_due_at", now=now)}


def booking_reconcile(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return {"requested": polling.mark_due(session, "reconcile_due_at", now=now)}


def dispatch(factory: sessionmaker[Session], now: datetime, settings: Settings) -> dict[str, Any]:
    """One pass over the organizations due now."""
    if not settings.bridge_api_url:
        return {"disabled": "GYMCTL_BRIDGE_API_URL is unset"}
    bind = factory.kw["bind"]
    engine = bind if isinstance(bind, Engine) else bind.engine
    summaries = run_dispatcher(
        engine, settings, Policy.from_settings(settings), runner=process_label(), once=True
    )
    return {
        "organizations": len(summaries),
        "sent": sum(summary.succeeded for summary in summaries),
        "parked": sum(summary.parked for summary in summaries),
    }
