"""The one clock. Domain code asks it for `now`; tests and sweeps pass a fixed instant."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.relativedelta import relativedelta


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that stands still until moved; for tests and replays."""

    def __init__(self, at: datetime) -> None:
        self._at = ensure_utc(at)

    def now(self) -> datetime:
        return self._at

    def set(self, at: datetime) -> None:
        self._at = ensure_utc(at)


# An instant before any other: a due rule's "at once".
LONG_AGO = datetime.min.replace(tzinfo=UTC)


def ensure_utc(at: datetime) -> datetime:
    """Timestamps are timezone-aware UTC everywhere; a naive one is a programming error."""
    if at.tzinfo is None:
        raise ValueError("naive datetime: gymctl timestamps are timezone-aware UTC")
    return at.astimezone(UTC)


clock: Clock = SystemClock()


def day_start(text: str) -> datetime | None:
    """A date (YYYY-MM-DD) as the first instant of that day in UTC, or None when `text` is no
    date: the forecast's "until a day", the same from the command line and over HTTP."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def now() -> datetime:
    return clock.now()


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """An IANA timezone by name; ValueError when there is no such zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone: {name!r}") from None


def day_n_ends(since: datetime, days: int, timezone: str) -> datetime:
    """The instant day `days` ends, day 0 being the local date of `since` in `timezone`: the
    local midnight that starts the next day, as UTC. Days are calendar days of that zone, so a
    daylight-saving change makes one of them 23 or 25 hours long."""
    tz = zone(timezone)
    last = ensure_utc(since).astimezone(tz).date() + timedelta(days=days + 1)
    return datetime.combine(last, time(0), tz).astimezone(UTC)


def add_months(at: datetime, months: int, timezone: str) -> datetime:
    """`at` moved by whole months on the calendar of `timezone`: the same local wall-clock time,
    the day clamped to the month's last (Jan 31 + 1 month = Feb 28), as UTC. Counted on UTC's
    calendar, a period that began at a gym's local midnight on the 1st (the last day of the
    month before, in UTC, east of Greenwich) ended on the 28th or 29th."""
    local = ensure_utc(at).astimezone(zone(timezone))
    return (local + relativedelta(months=months)).astimezone(UTC)
