"""Day counting in the organization's time zone (spec B 2.5, 3, 8): a debt's day N ends at the
organization's local midnight, not UTC's. The same rule in Python (`grace_ends`) and as SQL
(`day_n_ends`) for the set-based lifecycle, so the pass and the booking refusal agree; and a
month on the gym's calendar as PostgreSQL's set-based roll says it (`months_later`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from gymctl.clock import day_n_ends as _day_n_ends
from gymctl.models import BillingSettings
from gymctl.models.base import UTCDateTime


def grace_ends(debt_since: datetime, settings: BillingSettings) -> datetime:
    """When day N (billing_grace_days counted from debt_since) has passed: the organization's
    midnight that ends it. The member pays by then; the lifecycle cancels from then."""
    return _day_n_ends(debt_since, settings.billing_grace_days, settings.timezone or "UTC")


class day_n_ends(FunctionElement[datetime]):
    """SQL: day_n_ends(since, days, timezone), comparable with bound instants."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(day_n_ends, "postgresql")
def _day_n_ends_pg(element, compiler, **kw) -> str:
    # timestamptz AT TIME ZONE tz is the local wall clock; its day + N + 1 at midnight, read
    # AT TIME ZONE tz again, is that local midnight as an instant (DST included). A midnight
    # the clocks repeat (Atlantic/Azores, America/Havana fall back from 01:00 to 00:00) is the
    # first one, as zoneinfo reads it (fold 0): PostgreSQL reads the second, and the pass
    # cancelled an hour after the booking refusal and the forecast said.
    since, days, tz = (compiler.process(clause, **kw) for clause in element.clauses)
    local = f"(date_trunc('day', {since} AT TIME ZONE {tz}) + make_interval(days => ({days}) + 1))"
    return _instant_pg(local, tz)


def _instant_pg(local: str, tz: str) -> str:
    """The instant of a local wall-clock time of `tz`, as zoneinfo reads it: a time the clocks
    repeat is its first occurrence (fold 0), where PostgreSQL reads the second."""
    read = f"({local} AT TIME ZONE {tz})"
    earlier = f"({read} - interval '1 hour')"
    return f"(CASE WHEN ({earlier} AT TIME ZONE {tz}) = {local} THEN {earlier} ELSE {read} END)"


class months_later(FunctionElement[datetime]):
    """SQL (PostgreSQL): months_later(at, months, timezone), `clock.add_months` as a statement
    says it: the same local wall-clock time that many months on, the day clamped to the
    month's last."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(months_later, "postgresql")
def _months_later_pg(element, compiler, **kw) -> str:
    at, months, tz = (compiler.process(clause, **kw) for clause in element.clauses)
    return _instant_pg(f"(({at} AT TIME ZONE {tz}) + make_interval(months => {months}))", tz)


@compiles(day_n_ends, "sqlite")
def _day_n_ends_sqlite(element, compiler, **kw) -> str:
    since, days, tz = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"gymctl_day_n_ends({since}, {days}, {tz})"  # registered by gymctl.db
