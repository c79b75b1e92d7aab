"""The refund owed for the unused paid period when a notice matures (spec B 8):

    floor(charge cents x ceil(days from the effective date to the period end) / 365)

Days are calendar days of the gym's own calendar (a leap day counts as a day; a day the clocks
go back is one day, not 25 hours: counted on UTC's clock, a span between two local midnights
across it was 12 days and an hour, refunded as 13); the divisor stays 365. A cash pause
extended the period by days nobody paid for, so those days are not refunded, except pauses
with reason opening_delay: the gym could not open, the member had paid for that time, and it
keeps its refund basis (spec B 2.1). The list is append-only, so a pause with its dates counts
only its days inside the span refunded: one taken in an earlier period extended that period,
not this one (every later refund lost its days). One with a number of days alone cannot be
placed, and counts whole, as before.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from gymctl.clock import zone

OPENING_DELAY = "opening_delay"
DAY = timedelta(days=1)
YEAR_DAYS = 365


def pause_days(pause: dict[str, Any]) -> int:
    """A cashPauses entry's length: `days`, else the span from `from` to `until`."""
    if pause.get("days") is not None:
        return max(int(pause["days"]), 0)
    start, end = pause.get("from"), pause.get("until")
    if start and end:
        span = datetime.fromisoformat(end) - datetime.fromisoformat(start)
        return max(math.ceil(span / DAY), 0)
    return 0


def refund_days(
    effective_at: datetime,
    period_end: datetime | None,
    cash_pauses: list[dict[str, Any]],
    timezone: str = "UTC",
) -> int:
    """Days from the effective date to the period end, begun days counted, in the gym's
    calendar (`timezone`: a gym's default is UTC), less the pauses nobody paid for."""
    if period_end is None or effective_at >= period_end:
        return 0
    local = zone(timezone)
    days = _days(effective_at, period_end, local)
    unpaid = sum(
        _unpaid_days(p, effective_at, period_end, local)
        for p in cash_pauses or []
        if p.get("reason") != OPENING_DELAY
    )
    return max(days - unpaid, 0)


def _unpaid_days(pause: dict[str, Any], start: datetime, end: datetime, local: tzinfo) -> int:
    """A pause's days inside [start, end) when it has its dates; else all of its days."""
    begin, until = pause.get("from"), pause.get("until")
    if not (begin and until):
        return pause_days(pause)
    paused = [datetime.fromisoformat(at) for at in (begin, until)]
    # Entries arrive as data: one written without an offset is read as UTC.
    paused = [at if at.tzinfo else at.replace(tzinfo=UTC) for at in paused]
    return _days(max(paused[0], start), min(paused[1], end), local)


def _days(start: datetime, end: datetime, local: tzinfo) -> int:
    """Begun days from `start` to `end` on the local wall clock (0 when end is not after; at
    least 1 when it is, even within the hour the clocks repeat)."""
    if end <= start:
        return 0
    span = end.astimezone(local).replace(tzinfo=None) - start.astimezone(local).replace(tzinfo=None)
    return max(math.ceil(span / DAY), 1)


def prorated_refund(charge_in_cents: int, days: int) -> int:
    """Integer arithmetic: floor without float rounding; never more than the charge."""
    return min(charge_in_cents * days // YEAR_DAYS, charge_in_cents)
