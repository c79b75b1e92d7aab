"""Member-facing billing emails (spec B 3, 6): debt opened, cancellation for non-payment and a
presale's failed opening-day charge, in the member's locale (en, he, es).

The notices are the outbox events the collector and the lifecycle already write once per stage
(`subscription.debt_opened`, `subscription.cancelled` for non-payment, `payment.charge_failed`
of a presale); each is emailed once, keyed by its event id (`member_emails`). A presale decline
opens debt too: its one email is the presale one. A debt paid before its email went out is not
emailed (`debt_paid_first`); a cancellation emailed after it was paid says the balance was paid.
Events older than LOOKBACK are left alone, so a first run after an upgrade does not mail the
history.

Each email is a transaction of its own, committed once the email is handed over. A failed
handover records nothing (retried next run); a run that stops midway keeps every email it sent,
where one transaction for the whole batch forgot them all and the next run mailed the members
again. Only a stop between a handover and its commit sends that one email twice. On PostgreSQL
the record is written before the handover (a second run reaching the notice waits on its
unique key, then finds it recorded); on the embedded default, whose one write lock is every
writer's, it is written after, with no transaction open while the mail server answers
(decisions s42: it held SQLite's write lock through each handover). The daemons run the job
one at a time there.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, true
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing.accounts import billing_settings
from gymctl.billing.debt import CHARGE_FAILED
from gymctl.clock import day_n_ends, ensure_utc, zone
from gymctl.db import each_committed, is_postgres, release_for_outside_call
from gymctl.events import unsettled
from gymctl.models import (
    CancellationNotice,
    MemberEmail,
    Organization,
    OutboxEvent,
    Plan,
    Subscription,
    User,
)
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.mail import Mailer, MailError
from gymctl.retention import emails

log = logging.getLogger("gymctl.retention")

BATCH = 200
LOOKBACK = timedelta(days=2)
DEBT_OPENED = "debt_opened"
CANCELLED_NON_PAYMENT = "cancelled_non_payment"
PRESALE_CHARGE_FAILED = "presale_charge_failed"
COVERED = "covered_by_presale"  # a presale decline's debt notice: the presale email tells it
PAID_FIRST = "debt_paid_first"  # a debt notice whose debt was paid before its email went out

_NOTICES = or_(
    OutboxEvent.name == "subscription.debt_opened",
    and_(
        OutboxEvent.name == "subscription.cancelled",
        OutboxEvent.payload["reason"].as_string() == "non_payment",
    ),
    and_(
        OutboxEvent.name == "payment.charge_failed",
        OutboxEvent.payload["presale"].as_boolean() == true(),
    ),
)


def send_billing_emails(
    factory: sessionmaker[Session], mailer: Mailer, *, now: datetime, limit: int = BATCH
) -> dict[str, Any]:
    """Email every notice not yet emailed, each in a transaction of its own (module doc)."""
    pending = unsettled(
        factory, _NOTICES, MemberEmail.outbox_event_id, since=now - LOOKBACK, limit=limit
    )
    return each_committed(
        factory,
        pending,
        lambda session, event_id: _email(
            session, mailer, session.get(OutboxEvent, event_id), now=now
        ),
        {"sent": 0, "failed": 0, "skipped": 0, "givenUp": 0},
        what="billing email of event",
    )


def _email(session: Session, mailer: Mailer, event: OutboxEvent, *, now: datetime) -> str:
    """Hand the event's email over and record it (module doc: in which order); "failed"
    (nothing recorded: retried next run), "sent", "skipped" (nobody to tell, or another run
    recorded it first), or "givenUp" (the mail server refused it for good: recorded as not
    sent, audited)."""
    subscription_id = uuid.UUID(event.payload.get("subscriptionId") or event.aggregate_id)
    subscription = session.get(Subscription, subscription_id)
    kind = {
        "subscription.debt_opened": DEBT_OPENED,
        "subscription.cancelled": CANCELLED_NON_PAYMENT,
        "payment.charge_failed": PRESALE_CHARGE_FAILED,
    }[event.name]
    if kind == DEBT_OPENED and subscription.retention_case_kind == PRESALE_CHARGE_FAILED:
        _record(session, event, subscription, COVERED, sent=None, now=now)
        return "skipped"
    if kind in (DEBT_OPENED, PRESALE_CHARGE_FAILED) and not _still_owed(subscription, event):
        # Paid first (the desk, the member's pay-debt, a retry; or while the mail server was
        # down): "your payment failed" would tell the member of a debt that is gone.
        _record(session, event, subscription, PAID_FIRST, sent=None, now=now)
        return "skipped"
    member = session.get(User, subscription.user_id)
    if member is None or not member.email or member.deleted_at is not None:
        _record(session, event, subscription, kind, sent=None, now=now)
        return "skipped"
    message = {
        "to": member.email,
        "locale": _locale(session, subscription),
        **_context(session, subscription, event, member),
    }
    record = None
    if is_postgres(session):
        # Row locks only: the record first, so a second run that reached the notice waits on
        # its unique key while this email is out, then finds it recorded (sent once).
        record = _record(session, event, subscription, kind, sent=now, now=now)
        if record is None:
            return "skipped"
    else:
        # The embedded default's one write lock is every writer's: nothing is written before
        # the handover (the rows read are read again in the transaction that records it).
        release_for_outside_call(session)
    try:
        emails.send(mailer, name=f"billing_{kind}", tag=f"billing_{kind}", **message)
    except MailError as error:
        if not error.permanent:
            log.warning("billing email %s not sent, retried next run: %s", kind, error)
            return "failed"  # the caller rolls back: nothing recorded
        if record is not None:
            record.sent_at = None  # recorded, so no run tries it again; not sent
        elif _record(session, event, subscription, kind, sent=None, now=now) is None:
            return "skipped"
        emails.give_up(
            session,
            email=f"billing_{kind}",
            reason=str(error),
            aggregate_type="subscription",
            aggregate_id=subscription.id,
            organization_id=subscription.organization_id,
            now=now,
        )
        return "givenUp"
    if record is None and _record(session, event, subscription, kind, sent=now, now=now) is None:
        return "skipped"
    return "sent"


def _still_owed(subscription: Subscription, event: OutboxEvent) -> bool:
    """Whether the debt the notice tells of is the plan's debt still: one paid since has no
    day 0 (`debt.restore_from_debt`), a later one another (with its own notice). A debt notice
    names its day 0 `since`, the cancellation for non-payment `debtSince`; a presale's decline
    is its debt's day 0 (`attempts.leave_unpaid`)."""
    if subscription.debt_since is None:
        return False
    if event.name == "payment.charge_failed":
        since = event.occurred_at
    else:
        named = event.payload.get("since") or event.payload.get("debtSince")
        if named is None:
            return True
        since = datetime.fromisoformat(named)
    return ensure_utc(since) == ensure_utc(subscription.debt_since)


def _record(session, event, subscription, kind, *, sent, now) -> MemberEmail | None:
    """The event's record; None when another run recorded it first (the event's unique key)."""
    record = MemberEmail(
        id=ids.new_id(),
        outbox_event_id=event.id,
        organization_id=subscription.organization_id,
        subscription_id=subscription.id,
        kind=kind,
        sent_at=sent,
        created_at=now,
    )
    try:
        with unique_violation("uq_member_emails_outbox_event_id"), session.begin_nested():
            session.add(record)
    except UniqueViolation:
        return None
    return record


def _context(session, subscription, event, member) -> dict[str, Any]:
    """What the templates say: money as the member owes it, days in the gym's own calendar."""
    settings = billing_settings(session, subscription.organization_id)
    local = zone(settings.timezone or "UTC")
    plan = session.get(Plan, subscription.plan_id)
    gym = session.get(Organization, subscription.organization_id)
    amount = event.payload.get("amountInCents") or event.payload.get("debtAmountInCents") or 0
    since = subscription.debt_since or event.occurred_at
    last_day = day_n_ends(since, settings.billing_grace_days, settings.timezone or "UTC")
    return {
        "gym": gym.name,
        "member": emails.display_name(member),
        "plan": plan.name if plan else "",
        "amount": emails.money(amount, subscription.currency),
        "reason": event.payload.get("reason") or event.payload.get("debtReason") or CHARGE_FAILED,
        # the last day to pay: day N, the local day before the midnight that ends it
        "pay_by": (last_day.astimezone(local) - timedelta(days=1)).date().isoformat(),
        "on": event.occurred_at.astimezone(local).date().isoformat(),
        # A cancellation email sent after the member paid: the cancellation stands, the
        # balance it names is no longer owed (nor are bookings blocked for it).
        "still_owed": _still_owed(subscription, event),
    }


def _locale(session: Session, subscription: Subscription) -> str | None:
    """The locale the member last used with the gym (their latest notice), else English."""
    return session.scalar(
        select(CancellationNotice.locale)
        .where(
            CancellationNotice.user_id == subscription.user_id,
            CancellationNotice.organization_id == subscription.organization_id,
        )
        .order_by(CancellationNotice.given_at.desc())
        .limit(1)
    )
