"""An organization's billing settings and its charge-date schedule (spec B 2.5, 4.3): finance
reads them; the owner changes the settings; finance moves a renewal's charge date. Each calls
the same domain function as the CLI."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Annotated

from flask import Blueprint, jsonify, request
from pydantic import BeforeValidator, Field, StrictBool, StrictInt, WithJsonSchema

from gymctl.access.permissions import Action, Module
from gymctl.billing import charge_dates, org_settings
from gymctl.errors import unprocessable
from gymctl.numerals import is_decimal
from webhooks import codes
from webhooks.access import membership, org_route, owner_route
from webhooks.context import db, now
from webhooks.validation import Body, explicit_utc, parse

bp = Blueprint("billing_settings", __name__)
ORG = "/organizations/<uuid:org_id>"


@bp.get(f"{ORG}/billing/settings")
@org_route(Module.finance, Action.view)
def get_settings(org_id: uuid.UUID):
    return jsonify(data=org_settings.read_settings(db(), org_id))


def _day_or_instant(value: object) -> object:
    """`openingDay` read here as a date (YYYY-MM-DD) or an ISO 8601 instant; other text is a
    400 naming the field (pydantic would read "20261201" as seconds since 1970)."""
    if not isinstance(value, str):
        return value
    try:
        return date.fromisoformat(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("openingDay is a date (YYYY-MM-DD) or an ISO 8601 instant") from None


OpeningDay = Annotated[
    datetime | date | None,
    BeforeValidator(_day_or_instant),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date"},
                {"type": "string", "format": "date-time"},
                {"type": "null"},
            ]
        }
    ),
]


# The ranges org_settings.update_settings checks (422 billing_grace_days_invalid and
# billing_lifecycle_day_invalid), written into the document; the check stays the domain's.
GraceDays = Annotated[
    StrictInt,
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": org_settings.MAX_GRACE_DAYS}),
]
LifecycleDay = Annotated[
    StrictInt,
    WithJsonSchema(
        {
            "type": "integer",
            "minimum": org_settings.LIFECYCLE_DAYS.start,
            "maximum": org_settings.LIFECYCLE_DAYS.stop - 1,
        }
    ),
]


class SettingsBody(Body):
    billing_grace_days: GraceDays = Field(0, alias="billingGraceDays")
    billing_lifecycle_day: LifecycleDay | None = Field(
        None, alias="billingLifecycleDay", description="null: no lifecycle day"
    )
    # The zone must be one of the server's tz database (422 timezone_invalid otherwise): a list
    # that moves with the host's tzdata, so it is described, not enumerated.
    timezone: str = Field(
        "UTC",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_+/-]+$",
        description=(
            "an IANA time zone name the server's tz database holds, such as Asia/Jerusalem"
            " (not localtime, Factory, posix/... or right/...): 422 timezone_invalid otherwise"
        ),
    )
    plan_required_to_book: StrictBool = Field(False, alias="planRequiredToBook")
    opening_day: OpeningDay = Field(None, alias="openingDay")

    def opening_day_given(self) -> datetime | date | None:
        """The opening day to set: an instant in explicit UTC (422 timestamp_not_utc without
        an offset), a date for the domain to read in the gym's zone, None to clear it."""
        if "opening_day" not in self.model_fields_set:
            return org_settings.KEEP
        if isinstance(self.opening_day, datetime):
            return explicit_utc(self.opening_day)
        return self.opening_day


@bp.patch(f"{ORG}/billing/settings")
@owner_route
def patch_settings(org_id: uuid.UUID):
    body = parse(SettingsBody)
    # an absent setting is kept; a null lifecycle or opening day clears it
    given = body.model_fields_set
    answer = org_settings.update_settings(
        db(),
        org_id,
        grace_days=body.billing_grace_days if "billing_grace_days" in given else org_settings.KEEP,
        lifecycle_day=(
            body.billing_lifecycle_day if "billing_lifecycle_day" in given else org_settings.KEEP
        ),
        timezone=body.timezone if "timezone" in given else org_settings.KEEP,
        plan_required_to_book=(
            body.plan_required_to_book if "plan_required_to_book" in given else org_settings.KEEP
        ),
        opening_day=body.opening_day_given(),
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=answer)


@bp.get(f"{ORG}/billing/charge-schedule")
@org_route(Module.finance, Action.view)
def get_charge_schedule(org_id: uuid.UUID):
    raw = request.args.get("days", str(charge_dates.DEFAULT_DAYS))
    if not is_decimal(raw) or len(raw) > 3:
        raise unprocessable(
            codes.SCHEDULE_DAYS_INVALID,
            f"days is a whole number from 1 to {charge_dates.MAX_DAYS}",
        )
    return jsonify(data=charge_dates.charge_schedule(db(), org_id, now=now(), days=int(raw)))


class ChargeDateBody(Body):
    expected_next_charge_date: datetime = Field(alias="expectedNextChargeDate")
    next_charge_date: datetime | None = Field(None, alias="nextChargeDate")


@bp.post(f"{ORG}/subscriptions/<uuid:subscription_id>/charge-date")
@org_route(Module.finance, Action.manage)
def move_charge_date(org_id: uuid.UUID, subscription_id: uuid.UUID):
    body = parse(ChargeDateBody)
    answer = charge_dates.move_charge_date(
        db(),
        org_id,
        subscription_id,
        expected=explicit_utc(body.expected_next_charge_date),
        to=explicit_utc(body.next_charge_date) if body.next_charge_date else None,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=answer)
