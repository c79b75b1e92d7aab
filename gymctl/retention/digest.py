"""The daily retention digest to owners and admins (spec B 3, 6).

One digest per organization and UTC day, the retention_digests row its claim (insert or
nothing): a second run the same day, or a second daemon, sends nothing. Each send is audited
as RETENTION_DIGEST_SENT. An organization without open cases gets no digest.

Each organization's digest is a transaction of its own (claim, emails, audit, commit): a run
stopped midway keeps the digests it sent, where one transaction for every gym forgot them all
and the next run sent that day's digests again. A mail failure claims nothing (the next run
retries the day); a stop between an organization's emails and its commit sends that
organization's digest again. On PostgreSQL the day is claimed before the emails (a second run
waits on the claim's key, then finds the day taken); on the embedded default, whose one write
lock is every writer's, a claimed day is looked up first and the claim written after the
emails, with no transaction open while the mail server answers (decisions s42: it held
SQLite's write lock through every owner's email). The daemons run the job one at a time there.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.access import erased
from gymctl.db import (
    READ_ONLY,
    each_committed,
    is_postgres,
    release_for_outside_call,
    upsert_for,
)
from gymctl.events import EventKind, emit
from gymctl.models import (
    Membership,
    Organization,
    OrganizationStatus,
    RetentionCase,
    RetentionDigest,
    Subscription,
    User,
)
from gymctl.providers.mail import Mailer, MailError
from gymctl.retention import emails

log = logging.getLogger("gymctl.retention")
DIGEST_HOUR = 7  # UTC: a day's digest is due from 07:00 (the daemon's job, hourly after)


def _claimed(session: Session, organization_id, day) -> bool:
    return (
        session.scalar(
            select(RetentionDigest.organization_id).where(
                RetentionDigest.organization_id == organization_id, RetentionDigest.day == day
            )
        )
        is not None
    )


def _claim(session: Session, organization_id, day, *, recipients: int, cases: int, now) -> bool:
    insert = upsert_for(session)
    claimed = session.execute(
        insert(RetentionDigest)
        .values(
            organization_id=organization_id,
            day=day,
            recipients=recipients,
            open_cases=cases,
            sent_at=now,
        )
        .on_conflict_do_nothing()
        .returning(RetentionDigest.organization_id)
    )
    return claimed.scalar() is not None


def _lines(session: Session, organization_id, now: datetime) -> list[dict]:
    rows = session.execute(
        select(RetentionCase, Subscription.cancellation_effective_at, User)
        .join(Subscription, Subscription.id == RetentionCase.subscription_id)
        .join(User, User.id == RetentionCase.user_id)
        .where(RetentionCase.organization_id == organization_id, RetentionCase.status == "open")
        .order_by(Subscription.cancellation_effective_at.nulls_last(), RetentionCase.opened_at)
    ).all()
    members = session.scalars(
        select(Membership).where(
            Membership.organization_id == organization_id,
            Membership.user_id.in_({user.id for _, _, user in rows}),
        )
    )
    gone = erased.erased_user_ids(session, organization_id, members)  # named as the gym shows
    return [
        {
            "member": erased.ERASED_NAME if user.id in gone else emails.display_name(user),
            "kind": case.kind,
            "ends": emails.local_day(session, organization_id, ends) if ends else "-",
            "overdue": case.acknowledged_at is None
            and case.sla_due_at is not None
            and case.sla_due_at <= now,
            "contacted": case.last_contact_at is not None,
        }
        for case, ends, user in rows
    ]


def send_digests(
    factory: sessionmaker[Session], mailer: Mailer, *, now: datetime, locale: str | None = None
) -> dict[str, int]:
    """{orgsChecked, sent}: organizations with open cases, digests sent this run."""
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        # Of live gyms only: a deleted or inactive gym's staff reach none of its routes, so
        # a case its deletion left open (a withdrawn presale's) could never be closed, and
        # its former owners were mailed about it daily for good.
        organization_ids = session.scalars(
            select(RetentionCase.organization_id)
            .join(Organization, Organization.id == RetentionCase.organization_id)
            .where(
                RetentionCase.status == "open",
                Organization.deleted_at.is_(None),
                Organization.status == OrganizationStatus.active,
            )
            .group_by(RetentionCase.organization_id)
            .order_by(func.min(RetentionCase.opened_at))
        ).all()

    def send(session: Session, organization_id: uuid.UUID) -> str:
        # "failed" rolls the organization's day back: not claimed, retried by a later run.
        sent = _send_digest(session, mailer, organization_id, now=now, locale=locale)
        return "sent" if sent else "failed"

    # A gym whose digest fails unexpectedly is logged and passed over: the gyms are taken
    # oldest case first, so raising here left every gym behind it without its digest.
    counts = each_committed(
        factory, organization_ids, send, {"sent": 0, "failed": 0}, what="digest of organization"
    )
    return {"orgsChecked": len(organization_ids), "sent": counts["sent"]}


def _send_digest(
    session: Session, mailer: Mailer, organization_id, *, now: datetime, locale: str | None
) -> bool:
    """Claim the organization's day, email its owners and admins, audit it (module doc: in
    which order): False when there is no one to tell, the day was claimed already, or the mail
    failed (nothing claimed: a later run retries it)."""
    recipients = emails.staff_addresses(session, organization_id)
    if not recipients:
        return False
    day = now.date()
    gym = session.get(Organization, organization_id).name
    lines = _lines(session, organization_id, now)
    claim = {"recipients": len(recipients), "cases": len(lines), "now": now}
    claim_first = is_postgres(session)  # row locks only there (module doc)
    if claim_first and not _claim(session, organization_id, day, **claim):
        return False
    if not claim_first:
        if _claimed(session, organization_id, day):
            return False
        release_for_outside_call(session)  # only read: no write lock while the mail answers
    try:
        for address in recipients:
            emails.send(
                mailer,
                to=address,
                name="retention_digest",
                locale=locale,
                tag="retention_digest",
                gym=gym,
                day=day.isoformat(),
                cases=lines,
            )
    except MailError as error:
        log.warning("retention digest not sent: %s", error)  # the next run retries this day
        return False
    if not claim_first and not _claim(session, organization_id, day, **claim):
        return False  # claimed by another run meanwhile
    emit(
        session,
        EventKind.audit,
        "RETENTION_DIGEST_SENT",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        payload={
            "day": day.isoformat(),
            "openCases": len(lines),
            "recipients": len(recipients),
        },
    )
    return True
