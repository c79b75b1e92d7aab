"""Fixed-window rate limits counted in the database, so every API process shares them.

The count is committed in its own transaction: an attempt counts even when the request it guards
fails afterwards (a refused upload still spent the caller's budget).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from gymctl.clock import ensure_utc
from gymctl.errors import DomainError
from gymctl.models import RateWindow


def hit(
    factory: sessionmaker[Session], key: str, *, limit: int, window: timedelta, now: datetime
) -> int:
    """Count one attempt; DomainError rate_limited (429) past `limit` in the current window."""
    now = ensure_utc(now)
    span = int(window.total_seconds() * 1000)
    start_ms = int(now.timestamp() * 1000) // span * span
    window_start = datetime.fromtimestamp(start_ms / 1000, now.tzinfo)
    with factory() as session:
        insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
        statement = insert(RateWindow).values(key=key, window_start=window_start, count=1)
        count = session.execute(
            statement.on_conflict_do_update(
                index_elements=["key", "window_start"],
                set_={"count": RateWindow.count + 1},
            ).returning(RateWindow.count)
        ).scalar_one()
        session.commit()
    if count > limit:
        retry = (window_start + window - now).total_seconds()
        raise DomainError(
            "rate_limited",
            "too many attempts; try again shortly",
            status=429,
            retryAfter=max(1, round(retry)),
        )
    return count


def prune(session: Session, *, now: datetime, keep: timedelta = timedelta(hours=1)) -> int:
    """Old windows are never read again."""
    return session.execute(delete(RateWindow).where(RateWindow.window_start < now - keep)).rowcount
