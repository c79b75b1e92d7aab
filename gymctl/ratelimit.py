"""The one rate limiter of what callers can trigger: fixed windows counted in the database, so
every API process and worker shares them.

It counts inside the caller's session and never opens one of its own: on the embedded SQLite
default the caller's transaction holds the write lock, and a second session would wait on it
(spec of the house: one session per request). The HTTP door commits right after counting, so a
refused request still spends its budget and the lock is not held through the work it guards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from gymctl import codes
from gymctl.clock import ensure_utc
from gymctl.errors import DomainError, too_many_requests
from gymctl.models import RateWindow

KEY_CHARS = 256  # rate_windows.key


@dataclass(frozen=True)
class Spent:
    """One attempt counted: the window's count so far and the seconds until it ends."""

    count: int
    retry_after: int


def spend(session: Session, key: str, *, window: timedelta, now: datetime) -> Spent:
    """Count one attempt under `key` in the current window (an atomic upsert, so concurrent
    workers never lose a count)."""
    now = ensure_utc(now)
    span = int(window.total_seconds() * 1000)
    start_ms = int(now.timestamp() * 1000) // span * span
    window_start = datetime.fromtimestamp(start_ms / 1000, now.tzinfo)
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = insert(RateWindow).values(key=key[:KEY_CHARS], window_start=window_start, count=1)
    count = session.execute(
        statement.on_conflict_do_update(
            index_elements=["key", "window_start"],
            set_={"count": RateWindow.count + 1},
        ).returning(RateWindow.count)
    ).scalar_one()
    retry_after = max(1, math.ceil((window_start + window - now).total_seconds()))
    return Spent(count, retry_after)


def refused(spent: Spent) -> DomainError:
    """The 429 of an attempt over its limit; the HTTP door turns retryAfter into Retry-After.
    It is `audited`: the door commits the refused attempt's count (limits are counted before
    anything else is written)."""
    return too_many_requests(
        codes.RATE_LIMITED,
        "too many attempts; try again shortly",
        audited=True,
        retryAfter=spent.retry_after,
    )


def hit(session: Session, key: str, *, limit: int, window: timedelta, now: datetime) -> Spent:
    """Count one attempt; DomainError rate_limited (429) past `limit` in the current window."""
    spent = spend(session, key, window=window, now=now)
    if spent.count > limit:
        raise refused(spent)
    return spent


def prune(session: Session, *, now: datetime, keep: timedelta = timedelta(hours=1)) -> int:
    """Old windows are never read again."""
    return session.execute(delete(RateWindow).where(RateWindow.window_start < now - keep)).rowcount
