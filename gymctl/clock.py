"""The one clock. Domain code asks it for `now`; tests and sweeps pass a fixed instant."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


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


def ensure_utc(at: datetime) -> datetime:
    """Timestamps are timezone-aware UTC everywhere; a naive one is a programming error."""
    if at.tzinfo is None:
        raise ValueError("naive datetime: gymctl timestamps are timezone-aware UTC")
    return at.astimezone(UTC)


clock: Clock = SystemClock()


def now() -> datetime:
    return clock.now()
