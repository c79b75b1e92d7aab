"""The retention and booking sweeps by name, with their outside parts built from settings:
what the daemon's jobs and the operator test hooks call (the same functions)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from gymctl.bookings.attendance import no_show_pass
from gymctl.config import Settings
from gymctl.crypto import billing_cipher
from gymctl.providers.card_factory import card_provider_from_settings
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import Mailer, mailer_from_settings
from gymctl.retention.billing_emails import send_billing_emails
from gymctl.retention.digest import DIGEST_HOUR, send_digests
from gymctl.retention.escalation import escalate
from gymctl.retention.presales import presale_cases_pass
from gymctl.retention.refund_tasks import bump_overdue_refund_tasks
from gymctl.retention.settlement import Doors, period_end_sweep


def doors_from_settings(settings: Settings, mailer: Mailer | None = None) -> Doors:
    return Doors(
        provider=card_provider_from_settings(settings),
        cipher=billing_cipher(settings),
        documents=LocalDocumentProvider(),
        mailer=mailer or mailer_from_settings(settings),
    )


def retention_escalation(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return escalate(session, now=now)


def retention_presale_cases(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> dict[str, Any]:
    return presale_cases_pass(factory, mailer_from_settings(settings), now=now)


def retention_digest(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> dict[str, Any]:
    """Hourly from DIGEST_HOUR UTC: each gym's day is claimed once, and a day a mail failure
    left unclaimed is sent by the next hour's run (once a day, the next run claimed the next
    day and the refused one was never sent)."""
    if now.hour < DIGEST_HOUR:
        return {"orgsChecked": 0, "sent": 0}
    return send_digests(factory, mailer_from_settings(settings), now=now)


def cancellation_sweep(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> dict[str, Any]:
    return period_end_sweep(factory, doors_from_settings(settings), now=now).as_dict()


def refund_task_sweep(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return bump_overdue_refund_tasks(session, now=now)


def booking_no_shows(session: Session, now: datetime, settings: Settings) -> dict[str, Any]:
    return no_show_pass(session, now=now)


def billing_member_emails(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> dict[str, Any]:
    return send_billing_emails(factory, mailer_from_settings(settings), now=now)
