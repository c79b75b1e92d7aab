"""repair-schedule (spec B 4.1): a presale's first charge missing or set before it may happen
moves to max(opening day, subscription start), and the period, quota and credit fields a presale
must not hold are cleared (also when its date is right: readiness's presale_holds_period sends
the operator here, and refusing it left no door). Moves no money. The operator names the value
they saw (expectedNextChargeAt) so a report read before a change never repairs the changed row.

Only a presale (`plans.is_presale`: scheduled with an opening day, spec B 2.1) is repaired. A
scheduled subscription without an opening day is a purchase whose hosted page is still open:
its first charge is that page, and a date set here would have the collector charge the price
while the member pays the page too. It is refused as an unresolved first charge.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.billing import codes, plans
from gymctl.billing.operator_actions import audit_twice, require_operator
from gymctl.billing.readiness import readiness
from gymctl.billing.resolution import locked_subscription
from gymctl.crypto import FieldCipher
from gymctl.errors import conflict
from gymctl.models import PaymentTransaction
from gymctl.models.billing import SubscriptionStatus, TransactionStatus

FIRST_CHARGE_BLOCKING = (
    TransactionStatus.pending,
    TransactionStatus.completed,
    TransactionStatus.refund_pending,
    TransactionStatus.refunded,
)


def repair_schedule(
    session: Session,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    expected_next_charge_at: datetime | None,
    operator_user_id: uuid.UUID | None,
    now: datetime,
    cipher: FieldCipher,
) -> dict[str, Any]:
    """Answers {data: {item}}. Refusals (nothing changed): 403 operator_user_required, 404
    subscription_not_found, 409 billing_readiness_state_changed, 409
    billing_first_charge_unresolved (a first charge pending or settled, a subscription that is
    not scheduled, or a purchase whose page is still open), 409
    billing_schedule_not_anomalous."""
    operator = require_operator(session, operator_user_id)
    subscription = locked_subscription(session, organization_id, subscription_id)
    if subscription.next_charge_date != expected_next_charge_at:
        raise conflict(
            codes.BILLING_READINESS_STATE_CHANGED,
            "the next charge changed since the report was read; read it again",
            nextChargeAt=_iso(subscription.next_charge_date),
        )
    charged = session.scalar(
        select(func.count())
        .select_from(PaymentTransaction)
        .where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.status.in_(FIRST_CHARGE_BLOCKING),
            PaymentTransaction.type != "refund",
        )
    )
    if charged or subscription.status != SubscriptionStatus.scheduled:
        raise conflict(
            codes.BILLING_FIRST_CHARGE_UNRESOLVED,
            "the first charge is settled or unresolved; the schedule is the collector's now",
        )
    if not plans.is_presale(subscription):
        raise conflict(
            codes.BILLING_FIRST_CHARGE_UNRESOLVED,
            "the first charge is the hosted page the member has open (a purchase, not a "
            "presale: no opening day); nothing to repair. Nothing changed",
        )
    start = subscription.started_at or subscription.created_at
    floor = max(subscription.opening_day, start)  # a presale has its own opening day
    on_time = subscription.next_charge_date is not None and subscription.next_charge_date >= floor
    holds = _held(subscription)
    if on_time and not any(value is not None for value in holds.values()):
        raise conflict(
            codes.BILLING_SCHEDULE_NOT_ANOMALOUS,
            "the first charge is already at or after its floor and the presale holds no period",
            floor=floor.isoformat(),
        )
    before = {
        "nextChargeAt": _iso(subscription.next_charge_date),
        "currentPeriodStart": _iso(holds["currentPeriodStart"]),
        "currentPeriodEnd": _iso(holds["currentPeriodEnd"]),
        "sessionsRemaining": holds["sessionsRemaining"],
        "credits": holds["credits"],
    }
    if not on_time:  # a date at or after the floor stays: only the held fields were wrong
        subscription.next_charge_date = floor
    subscription.current_period_start = None
    subscription.current_period_end = None
    subscription.sessions_remaining = None
    subscription.credits = None
    subscription.updated_at = now
    audit_twice(
        session,
        action="billing.schedule_repaired",
        subscription=subscription,
        operator=operator,
        body={"expectedNextChargeAt": _iso(expected_next_charge_at)},
        result={"before": before, "after": {"nextChargeAt": _iso(subscription.next_charge_date)}},
        now=now,
    )
    session.flush()
    item = readiness(session, organization_id, now=now, cipher=cipher, only=subscription.id)
    return {"data": {"item": item["items"][0]}}


def _held(subscription) -> dict[str, Any]:
    """The period, quota and credit fields a presale must not hold, as they are."""
    return {
        "currentPeriodStart": subscription.current_period_start,
        "currentPeriodEnd": subscription.current_period_end,
        "sessionsRemaining": subscription.sessions_remaining,
        "credits": subscription.credits,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None
