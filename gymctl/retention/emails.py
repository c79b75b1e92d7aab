"""Retention and cancellation emails (spec B 6), rendered from the templates beside this
module in en, he or es and handed to the Mailer (SMTP, or the embedded default's mailbox).

A template's first line is `Subject: ...`; the rest is the plain-text body.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access import erased
from gymctl.access.memberships import owner_of
from gymctl.billing.accounts import billing_settings
from gymctl.clock import zone
from gymctl.events import EventKind, emit
from gymctl.models import Membership, MembershipStatus, Role, User
from gymctl.providers.mail import Mailer, OutgoingEmail
from gymctl.retention.copy import DEFAULT_LOCALE, LOCALES
from gymctl.text import on_one_line

log = logging.getLogger("gymctl.retention")
_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,  # noqa: S701 (plain-text mail: no HTML to escape)
)


def render(name: str, locale: str | None, **context: Any) -> tuple[str, str]:
    """(subject, body) of template `name` in `locale` (en when unsupported). A text value
    (a gym's, a plan's or a member's name) is put on one line: a line break in one cut the
    subject short, and a carriage return is refused in any mail header (the email was never
    sent, and the sweep sending it stopped there)."""
    locale = locale if locale in LOCALES else DEFAULT_LOCALE
    context = {key: _one_line(value) for key, value in context.items()}
    text = _TEMPLATES.get_template(f"{locale}/{name}.txt").render(**context)
    first, _, body = text.partition("\n")
    return first.removeprefix("Subject:").strip(), body.lstrip("\n")


def _one_line(value: Any) -> Any:
    """Every text of the context on one line, in the rows a template loops over too (the
    digest's cases: a member's name holding a line break added a case line of its own)."""
    if isinstance(value, str):
        return on_one_line(value)
    if isinstance(value, dict):
        return {key: _one_line(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_one_line(item) for item in value]
    return value


def send(
    mailer: Mailer, *, to: str, name: str, locale: str | None, tag: str, **context: Any
) -> str:
    """Render and hand over; raises MailError (the caller decides what a failure means)."""
    subject, body = render(name, locale, **context)
    return mailer.send(OutgoingEmail(to=to, subject=subject, text=body, tag=tag))


def give_up(
    session: Session,
    *,
    email: str,
    reason: str,
    aggregate_type: str,
    aggregate_id: uuid.UUID,
    organization_id: uuid.UUID,
    now: datetime,
) -> None:
    """Record an email that can never be sent (no address, or refused for good): its queue
    marks it done and stops retrying it, so it no longer fills the oldest-first batch."""
    log.warning("%s email given up: %s", email, reason)
    emit(
        session,
        EventKind.audit,
        "retention.email_given_up",
        at=now,
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        organization_id=organization_id,
        payload={"email": email, "reason": reason},
    )


def money(amount_in_cents: int, currency: str) -> str:
    return f"{amount_in_cents // 100}.{amount_in_cents % 100:02d} {currency}"


def local_day(session: Session, organization_id: uuid.UUID, at: datetime) -> str:
    """The day of instant `at` in the gym's own calendar (spec B 2.5 timezone), as an email
    tells it: a plan ending at 01:30 in Jerusalem ended that day, not on the UTC day before."""
    settings = billing_settings(session, organization_id)
    return at.astimezone(zone(settings.timezone or "UTC")).date().isoformat()


def display_name(user: User | None) -> str:
    if user is None:
        return "member"
    return user.name or (user.email or "member").partition("@")[0]


def shown_name(session: Session, organization_id: uuid.UUID, user: User | None) -> str:
    """The member's name as the gym shows it: "Erased member" once this gym erased them (their
    row keeps the name when a login is theirs), as the digest names them."""
    membership = user and session.scalar(
        select(Membership).where(
            Membership.organization_id == organization_id, Membership.user_id == user.id
        )
    )
    if membership is not None and erased.is_erased(session, membership):
        return erased.ERASED_NAME
    return display_name(user)


def case_owner_address(
    session: Session, organization_id: uuid.UUID, owner_user_id: uuid.UUID | None
) -> str | None:
    """The case owner's address while they are active staff of the organization, else the
    organization's active owner's (spec B 6); None when neither has one."""
    if owner_user_id is not None:
        staff = session.scalar(
            select(User.email)
            .join(Membership, Membership.user_id == User.id)
            .where(
                User.id == owner_user_id,
                User.deleted_at.is_(None),
                Membership.organization_id == organization_id,
                Membership.status == MembershipStatus.active,
                Membership.role.in_((Role.owner, Role.admin, Role.coach)),
            )
        )
        if staff:
            return staff
    owner = owner_of(session, organization_id)
    if owner is None:
        return None
    user = session.get(User, owner.user_id)
    return user.email if user is not None and user.deleted_at is None else None


def staff_addresses(session: Session, organization_id: uuid.UUID) -> list[str]:
    """Owners and admins with an address: the digest's recipients."""
    return list(
        session.scalars(
            select(User.email)
            .join(Membership, Membership.user_id == User.id)
            .where(
                Membership.organization_id == organization_id,
                Membership.status == MembershipStatus.active,
                Membership.role.in_((Role.owner, Role.admin)),
                User.deleted_at.is_(None),
                User.email.is_not(None),
            )
            .order_by(User.email)
        )
    )
