"""What the `gymctl billing` commands share (its arguments, the unit of work, an instant): its
own module, so that billing.py and billing_settings.py both import it and not each other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import TYPE_CHECKING

import typer

from gymctl.cli import codes
from gymctl.cli.output import JSON
from gymctl.errors import DomainError, invalid

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

ORG = typer.Argument(..., help="Organization id or slug.")
SUBSCRIPTION = typer.Argument(..., help="Subscription id.")
TRANSACTION = typer.Argument(..., help="Transaction id.")
OPERATOR = typer.Option(
    ..., "--operator", help="Your user: database id or identity subject (audited as the actor)."
)
JSON_OPTION = JSON
DRY_RUN = typer.Option(False, "--dry-run", help="Do everything, then roll back: nothing is kept.")


@contextmanager
def unit(dry_run: bool = False) -> Iterator[Session]:
    """One unit of work. A refusal that wrote its own audit record (a vetoed confirmation keeps
    the settlement it applied) is committed before it reaches the top-level handler. A dry run
    is rolled back and raises no billing alert: an alert pages someone, which no rollback
    undoes (the command still shows what it would raise: a contradiction, a veto)."""
    from contextlib import nullcontext

    from gymctl.billing.alerts import silenced
    from gymctl.config import get_settings
    from gymctl.db import get_engine, session_factory

    factory = session_factory(get_engine(get_settings().resolved_database_url))
    with factory() as session, silenced() if dry_run else nullcontext():
        try:
            yield session
        except DomainError as error:
            if error.audited and not dry_run:
                session.commit()
            raise
        if dry_run:
            session.rollback()
        else:
            session.commit()


def instant(value: str) -> datetime:
    from gymctl.clock import ensure_utc

    try:
        return ensure_utc(as_written(value))
    except (ValueError, OverflowError):  # OverflowError: 0001-01-01T00:00+01:00 is before year 1
        raise _not_utc(value) from None


def as_written(value: str) -> datetime:
    """An ISO time with the offset it was written with: what evidence must state itself (a
    confirmation time is explicit UTC; converted first, any offset passed as UTC)."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise _not_utc(value) from None


def _not_utc(value: str) -> DomainError:
    return invalid(
        codes.TIMESTAMP_NOT_UTC, f"{value!r} is not an ISO time with an explicit UTC offset"
    )


def day_or_instant(value: str) -> date | datetime:
    """A day (YYYY-MM-DD, read in the gym's zone by the domain) or an ISO time with its UTC
    offset; a refusal names both forms."""
    try:
        return date.fromisoformat(value)
    except ValueError:
        pass
    try:
        return instant(value)
    except DomainError:
        raise invalid(
            codes.TIMESTAMP_NOT_UTC,
            f"{value!r} is neither a day (YYYY-MM-DD) nor an ISO time with an explicit UTC offset",
        ) from None
