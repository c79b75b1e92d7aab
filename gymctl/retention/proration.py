"""The refund owed for the unused paid period when a notice matures (spec B 8):

    floor(charge cents x ceil(days from the effective date to the period end) / 365)

Days are calendar time (a leap day counts as a day); the divisor stays 365. A cash pause
extended the period by days nobody paid for, so those days are not refunded, except pauses
with reason opening_delay: the gym could not open, the member had paid for that time, and it
keeps its refund basis (spec B 2.1).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

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
    effective_at: datetime, period_end: datetime | None, cash_pauses: list[dict[str, Any]]
) -> int:
    if period_end is None or effective_at >= period_end:
        return 0
    days = math.ceil((period_end - effective_at) / DAY)
    unpaid = sum(pause_days(p) for p in cash_pauses or [] if p.get("reason") != OPENING_DELAY)
    return max(days - unpaid, 0)


def prorated_refund(charge_in_cents: int, days: int) -> int:
    """Integer arithmetic: floor without float rounding; never more than the charge."""
    return min(charge_in_cents * days // YEAR_DAYS, charge_in_cents)
