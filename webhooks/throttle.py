"""The HTTP door of the one rate limiter (gymctl.ratelimit): count in the request's session and
commit at once, so a refused request still spends its budget and no lock is held through the
work the limit guards."""

from __future__ import annotations

from datetime import timedelta

from gymctl import ratelimit
from webhooks.context import db, now


def throttle(key: str, *, limit: int, window: timedelta) -> None:
    """Count one attempt under `key`; 429 rate_limited with Retry-After past `limit`."""
    session = db()
    spent = ratelimit.spend(session, key, window=window, now=now())
    session.commit()
    if spent.count > limit:
        raise ratelimit.refused(spent)
