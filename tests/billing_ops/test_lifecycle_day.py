"""The lifecycle day's arithmetic alone (no database): the next charge day of the month in the
organization's time zone."""

from __future__ import annotations

from datetime import UTC, datetime

from gymctl.billing.charge_dates import next_lifecycle_day


def test_next_lifecycle_day_keeps_a_date_already_on_it_and_rolls_past_month_end():
    on_it = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
    assert next_lifecycle_day(on_it, 5, "Pacific/Kiritimati") == on_it
    after = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)
    assert next_lifecycle_day(after, 5, "UTC") == datetime(2027, 1, 5, tzinfo=UTC)
    assert next_lifecycle_day(after, 5, "Pacific/Pago_Pago") == datetime(
        2027, 1, 5, 11, 0, tzinfo=UTC
    )
