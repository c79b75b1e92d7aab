"""`gymctl billing settings show|set` and `gymctl billing charges schedule|move`: an
organization's billing settings and its charge-date schedule, the same domain functions as
the HTTP routes. Operators act as a named user (audited as the actor)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING

import typer

from gymctl import clock
from gymctl.cli.billing_common import (
    DRY_RUN,
    JSON_OPTION,
    OPERATOR,
    ORG,
    SUBSCRIPTION,
    day_or_instant,
)
from gymctl.cli.billing_common import instant as _instant
from gymctl.cli.billing_common import unit as _unit
from gymctl.cli.operators import operator_id
from gymctl.cli.output import print_json, render_mapping, render_rows
from gymctl.numerals import is_decimal

if TYPE_CHECKING:
    from gymctl.errors import DomainError

settings_app = typer.Typer(
    no_args_is_help=True, help="Billing settings: grace, lifecycle day, zone, opening day."
)
charges_app = typer.Typer(no_args_is_help=True, help="The charge-date schedule.")


@settings_app.command("show")
def settings_show(organization: str = ORG, as_json: bool = JSON_OPTION) -> None:
    """The organization's billing settings (defaults when never set)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import org_settings

    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        slug = gym.slug
        answer = org_settings.read_settings(session, gym.id)
    render_mapping(answer, title=f"billing settings of {slug}", as_json=as_json)


@settings_app.command("set")
def settings_set(
    organization: str = ORG,
    grace_days: int | None = typer.Option(None, "--grace-days", help="0-60."),
    lifecycle_day: str | None = typer.Option(
        None, "--lifecycle-day", help="Day of the month the gym charges on (1-28), or none."
    ),
    timezone: str | None = typer.Option(None, "--timezone", help="IANA zone, e.g. Asia/Jerusalem."),
    plan_required_to_book: bool | None = typer.Option(
        None,
        "--plan-required-to-book/--no-plan-required-to-book",
        help="A member needs a plan to book (a pack or drop-in then spends a session a booking).",
    ),
    opening_day: str | None = typer.Option(
        None,
        "--opening-day",
        help="The gym's opening day (presales before it): a date (the gym's local midnight), "
        "an ISO time with its UTC offset, or none. Presales on the old day move with it.",
    ),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Change the given settings; the others stay. Audited under the operator."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import org_settings
    from gymctl.cli import codes
    from gymctl.errors import unprocessable

    changes: dict = {}
    if grace_days is not None:
        changes["grace_days"] = grace_days
    if timezone is not None:
        changes["timezone"] = timezone
    if plan_required_to_book is not None:
        changes["plan_required_to_book"] = plan_required_to_book
    if lifecycle_day is not None:
        lifecycle_refusal = partial(unprocessable, codes.BILLING_LIFECYCLE_DAY_INVALID)
        if _cleared(lifecycle_day, "--lifecycle-day", lifecycle_refusal):
            changes["lifecycle_day"] = None
        elif is_decimal(lifecycle_day):
            changes["lifecycle_day"] = int(lifecycle_day)
        else:
            raise unprocessable(
                codes.BILLING_LIFECYCLE_DAY_INVALID,
                "the lifecycle day is a day of the month from 1 to 28, or none",
            )
    if opening_day is not None:
        changes["opening_day"] = _opening_day(opening_day)
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        slug = gym.slug
        answer = org_settings.update_settings(
            session,
            gym.id,
            **changes,
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
        )
    render_mapping(
        answer,
        title=f"billing settings of {slug}{' (dry run)' if dry_run else ''}",
        as_json=as_json,
    )


def _cleared(value: str, option: str, refusal: Callable[[str], DomainError]) -> bool:
    """Whether a setting's value clears it: `none` (or `null`) does. An empty value (a script's
    unset variable) is refused (`refusal`, the option's own code) rather than read as none: it
    cleared the gym's setting (an opening day's presales moved with it) where the operator
    meant to give one."""
    if not value.strip():
        raise refusal(f"{option} is empty: give a value, or none to clear it; nothing changed")
    return value.strip().lower() in ("none", "null")


def _opening_day(value: str) -> date | datetime | None:
    """--opening-day: none, a date (read in the gym's zone by the domain) or an instant."""
    from gymctl.cli import codes
    from gymctl.errors import invalid

    if _cleared(value, "--opening-day", partial(invalid, codes.TIMESTAMP_NOT_UTC)):
        return None
    return day_or_instant(value)


@charges_app.command("schedule")
def charges_schedule(
    organization: str = ORG,
    days: int = typer.Option(30, "--days", help="How far ahead (1-92)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Card-provider charges due in the next days, overdue first, by the gym's local days."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import charge_dates

    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        slug = gym.slug
        answer = charge_dates.charge_schedule(session, gym.id, now=clock.now(), days=days)
    if as_json:
        print_json(answer)
        return
    render_rows(
        answer["items"],
        ["localDate", "nextChargeDate", "kind", "amountInCents", "currency", "subscriptionId"],
        title=f"charges of {slug} ({answer['timezone']})"
        + (" [truncated]" if answer["truncated"] else ""),
    )


@charges_app.command("move")
def charges_move(
    organization: str = ORG,
    subscription: uuid.UUID = SUBSCRIPTION,
    expected: str = typer.Option(..., "--expected", help="The charge date you read (ISO UTC)."),
    to: str | None = typer.Option(
        None,
        "--to",
        help="The new date (ISO UTC); left out: the gym's next lifecycle day (empty is refused).",
    ),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Move an active card renewal's next charge date (audited)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import charge_dates

    new_date = None if to is None else _new_charge_date(to)  # before the database is opened
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        answer = charge_dates.move_charge_date(
            session,
            gym.id,
            subscription,
            expected=_instant(expected),
            to=new_date,
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
        )
    render_mapping(
        answer,
        title=f"charge date of {subscription}{' (dry run)' if dry_run else ''}",
        as_json=as_json,
    )


def _new_charge_date(value: str) -> datetime:
    """--to as given: an instant. Empty (a script's unset variable) is refused, not read as
    --to left out, which moves the charge to the gym's next lifecycle day: the operator who
    wants that leaves --to out."""
    from gymctl.cli import codes
    from gymctl.errors import invalid

    if not value.strip():
        raise invalid(
            codes.TIMESTAMP_NOT_UTC,
            "--to is empty: give the new date (an ISO time with its UTC offset), or leave --to "
            "out to move the charge to the gym's next lifecycle day; nothing was moved",
        )
    return _instant(value)
