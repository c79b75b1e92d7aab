"""The table of periodic jobs. Adding a sweep is one row in JOBS; the runner does the rest
(single flight by advisory lock, one run per tick across daemons, the job_runs ledger)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, get_origin

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from gymctl import codes, ratelimit
from gymctl.access.bulk_invitations import work_batches
from gymctl.access.invitations import Outreach, deliver_link_requests, expire_invitations
from gymctl.access.member_imports import work_imports
from gymctl.billing import lifecycle, sweeps
from gymctl.billing import webhooks as payment_webhooks
from gymctl.bridge import sweeps as bridge
from gymctl.config import Settings
from gymctl.errors import invalid
from gymctl.identity import users as identity_users
from gymctl.models import JobRun
from gymctl.movements.jobs import work_jobs
from gymctl.movements.services import library_from_settings
from gymctl.providers.event_sink import sink_from_url
from gymctl.providers.identity_admin import identity_admin_from_settings
from gymctl.providers.mail import mailer_from_settings
from gymctl.providers.push import push_provider_from_settings
from gymctl.relay import prune_delivered, relay_events
from gymctl.releases.candidates import supersede_stale
from gymctl.releases.push_notices import push_notices
from gymctl.retention import jobs as retention

JobResult = str | dict[str, Any]


POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_run(name: str, run: Callable[..., JobResult], first: type) -> None:
    """`run` takes (`first`, datetime, Settings), by its annotations: a job given the wrong kind
    of function fails when the table is built (at import), not at its first tick."""
    try:
        parameters = list(inspect.signature(run, eval_str=True).parameters.values())
    except (NameError, TypeError) as error:
        raise TypeError(f"job {name}: run's signature does not resolve ({error})") from None
    expected = (first, datetime, Settings)
    takes = [get_origin(p.annotation) or p.annotation for p in parameters if p.kind in POSITIONAL]
    fits = len(takes) == len(parameters) == len(expected) and all(
        isinstance(got, type) and issubclass(got, want)
        for got, want in zip(takes, expected, strict=True)
    )
    if not fits:
        shown = ", ".join(want.__name__ for want in expected)
        raise TypeError(f"job {name}: run must take ({shown}), not {inspect.signature(run)}")


@dataclass(frozen=True)
class Job:
    """A sweep run every `interval_seconds`, in one transaction the runner commits: `run` gets
    that session."""

    name: str
    interval_seconds: int
    run: Callable[[Session, datetime, Settings], JobResult]
    description: str = ""
    # Ticks start this long after each epoch-aligned boundary (a daily job at 02:00 UTC).
    offset_seconds: int = 0
    own_transactions: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _check_run(self.name, self.run, Session)


@dataclass(frozen=True)
class OwnTransactionsJob:
    """A sweep that commits its own short transactions (money: the attempt is stored before the
    provider is called; mail: a row is locked for its own email only; minutes of forecast):
    `run` gets a session factory instead of a session."""

    name: str
    interval_seconds: int
    run: Callable[[sessionmaker[Session], datetime, Settings], JobResult]
    description: str = ""
    offset_seconds: int = 0
    own_transactions: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_run(self.name, self.run, sessionmaker)


AnyJob = Job | OwnTransactionsJob


def event_relay(factory: sessionmaker[Session], now: datetime, settings: Settings) -> JobResult:
    """Outbox events to the sink, each batch marked delivered in its own transaction (no
    transaction is open while the sink is called)."""
    result = relay_events(factory, sink_from_url(settings.resolved_event_sink), now=now)
    return result.as_dict()


def _outreach(settings: Settings, factory: sessionmaker[Session]) -> Outreach:
    return Outreach(
        settings, mailer_from_settings(settings), identity_admin_from_settings(settings, factory)
    )


def invitation_batches(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> JobResult:
    """Queued bulk invites, an address per transaction (gymctl.access.bulk_invitations)."""
    return work_batches(factory, _outreach(settings, factory), now=now)


def link_requests(factory: sessionmaker[Session], now: datetime, settings: Settings) -> JobResult:
    """The link requests registrations stored (a login's address): each claimed, emailed and
    recorded on its own (gymctl.access.invitations.deliver_link_requests)."""
    return deliver_link_requests(factory, _outreach(settings, factory), now=now)


def member_imports(factory: sessionmaker[Session], now: datetime, settings: Settings) -> JobResult:
    """Queued roster imports, a chunk of rows per transaction (gymctl.access.member_imports)."""
    return work_imports(factory, _outreach(settings, factory), now=now)


JOB_RUNS_KEPT = timedelta(days=14)


def job_runs_prune(session: Session, now: datetime, settings: Settings) -> JobResult:
    """The ledger gains a row per job and tick (17,280 a day for a 5 s job): keep two weeks."""
    deleted = session.execute(delete(JobRun).where(JobRun.started_at < now - JOB_RUNS_KEPT))
    return {"deleted": deleted.rowcount}


def outbox_prune(session: Session, now: datetime, settings: Settings) -> JobResult:
    """Delivered outbox events gain a row per change, analytics and audit event: keep 30 days."""
    return {"deleted": prune_delivered(session, now=now)}


def rate_windows_prune(session: Session, now: datetime, settings: Settings) -> JobResult:
    """Rate-limit windows that began a day ago (ratelimit.LONGEST_WINDOW) have ended."""
    return {"deleted": ratelimit.prune(session, now=now)}


def webhook_deliveries_prune(session: Session, now: datetime, settings: Settings) -> JobResult:
    """The webhooks' replay keys, each kept as long as a replay could still reach it."""
    return {
        "identity": identity_users.forget_deliveries(session, now=now),
        "payment": payment_webhooks.forget_deliveries(session, now=now),
    }


def invitation_expiry(session: Session, now: datetime, settings: Settings) -> JobResult:
    return expire_invitations(session, now=now)


def movement_jobs(factory: sessionmaker[Session], now: datetime, settings: Settings) -> JobResult:
    """Work off the movement library's queue (seed, thumbnails, videos, cues), a job per
    transaction."""
    return work_jobs(factory, library_from_settings(settings), now=now)


def billing_lifecycle(session: Session, now: datetime, settings: Settings) -> JobResult:
    return lifecycle.run_lifecycle(session, now=now)


def release_candidate_supersede(session: Session, now: datetime, settings: Settings) -> JobResult:
    return supersede_stale(session, now=now)


def member_pushes(factory: sessionmaker[Session], now: datetime, settings: Settings) -> JobResult:
    """Events a member must know now, pushed to their devices, each in its own transaction."""
    return push_notices(factory, push_provider_from_settings(settings), now=now)


JOBS: tuple[AnyJob, ...] = (
    OwnTransactionsJob(
        "event_relay", 5, event_relay, "deliver outbox events to the event sink, batch by batch"
    ),
    Job("invitation_expiry", 3600, invitation_expiry, "expire pending invitations past their date"),
    OwnTransactionsJob(
        "invitation_batches",
        5,
        invitation_batches,
        "invite the addresses of queued bulk invites, each in a transaction of its own",
    ),
    OwnTransactionsJob(
        "link_requests",
        5,
        link_requests,
        "email the link requests registrations stored for a login's address, each on its own",
    ),
    OwnTransactionsJob(
        "member_imports",
        5,
        member_imports,
        "register the rows of queued roster imports, a chunk per transaction",
    ),
    Job("job_runs_prune", 3600, job_runs_prune, "delete job_runs rows older than 14 days"),
    Job("outbox_prune", 300, outbox_prune, "delete outbox events delivered over 30 days ago"),
    Job("rate_windows_prune", 3600, rate_windows_prune, "delete rate-limit windows past a day"),
    Job(
        "webhook_deliveries_prune",
        3600,
        webhook_deliveries_prune,
        "forget webhook replay keys: identity after 30 days, payment after 90",
    ),
    Job(
        "billing_lifecycle",
        3600,
        billing_lifecycle,
        "expire, end, roll, enter debt and cancel for non-payment (spec B 3)",
    ),
    OwnTransactionsJob(
        "movement_jobs", 5, movement_jobs, "run queued movement-library jobs, each committed"
    ),
    Job(
        "release_candidate_supersede",
        300,
        release_candidate_supersede,
        "supersede release candidates a publish, config or intake revision replaced",
    ),
    OwnTransactionsJob(
        "member_pushes",
        60,
        member_pushes,
        "push members a waitlist seat that became theirs: claimed, sent, then recorded",
    ),
    # The bridge (spec B 3, 8): the sweeps touch only the database; the calls are the dispatcher's.
    Job("bridge_lease_rescue", 30, bridge.lease_rescue, "in-flight sync ops past their lease"),
    Job("bridge_schedule_poll", 300, bridge.schedule_poll, "ask each bridge for a schedule poll"),
    Job("bridge_booking_reconcile", 60, bridge.booking_reconcile, "ask for a booking reconcile"),
    OwnTransactionsJob(
        "bridge_dispatch",
        5,
        bridge.dispatch,
        "send due sync ops, polls and reconciles (also: gymctl bridge dispatch)",
    ),
    # The protected collector (spec B 8): each commits its attempt before calling the provider.
    OwnTransactionsJob(
        "billing_catchup",
        60,
        sweeps.catch_up,
        "charge due card-provider subscriptions (20 orgs x 5, 30 s budget)",
    ),
    OwnTransactionsJob(
        "billing_recovery",
        300,
        sweeps.recovery,
        "resolve pending attempts, stored refunds and desk charges by their ids; collect debts",
    ),
    OwnTransactionsJob(
        "billing_side_effects",
        300,
        sweeps.side_effects,
        "report settled payments whose effects are pending",
    ),
    OwnTransactionsJob(
        "billing_daily",
        86400,
        sweeps.daily,
        "02:00 UTC: charge every due card-provider subscription",
        offset_seconds=2 * 3600,
    ),
    OwnTransactionsJob(
        "billing_abandoned_checkouts",
        300,
        sweeps.abandoned_checkouts,
        "cancel subscriptions whose checkout page was abandoned",
    ),
    OwnTransactionsJob(
        "billing_abandoned_read_back",
        300,
        sweeps.abandoned_read_back,
        "read abandoned pages back (hourly for a day, then daily for a week): record late payments",
    ),
    OwnTransactionsJob(
        "billing_forecasts",
        10,
        sweeps.forecasts,
        "run the billing forecasts platform admins queued over HTTP (one per pass)",
    ),
    # Cancellations, retention and bookings (spec B 3, 6, 8).
    Job("retention_escalation", 3600, retention.retention_escalation, "escalate open notice cases"),
    OwnTransactionsJob(
        "retention_presale_cases",
        300,
        retention.retention_presale_cases,
        "open presale charge-failure cases; email presale cases' owners",
    ),
    OwnTransactionsJob(
        "retention_digest",
        3600,
        retention.retention_digest,
        "hourly from 07:00 UTC: the day's retention digest to owners and admins, once per gym "
        "and day (a refused one is sent the next hour), a gym per transaction",
    ),
    OwnTransactionsJob(
        "cancellation_sweep",
        3600,
        retention.cancellation_sweep,
        "cancel matured notices, settle the refund owed, send the membership-ended email",
    ),
    Job("refund_task_sweep", 3600, retention.refund_task_sweep, "bump overdue refund tasks"),
    OwnTransactionsJob(
        "billing_member_emails",
        300,
        retention.billing_member_emails,
        "email members their debt, non-payment cancellation and presale charge-failure notices,"
        " each in a transaction of its own",
    ),
    Job("booking_no_shows", 300, retention.booking_no_shows, "mark no-shows of ended sessions"),
)


def select_jobs(names: list[str] | None, jobs: tuple[AnyJob, ...] = JOBS) -> list[AnyJob]:
    """The jobs named (all when none), in the order given; an unknown name lists the valid ones."""
    if not names:
        return list(jobs)
    by_name = {job.name: job for job in jobs}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise invalid(
            codes.UNKNOWN_JOB,
            f"unknown job {', '.join(unknown)}; valid jobs: {', '.join(by_name)}",
        )
    return [by_name[name] for name in dict.fromkeys(names)]
