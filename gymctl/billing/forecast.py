"""The billing forecast (issue 24): one organization's billing state copied into a scratch
database, then the daemons' own sweeps run on it on a fixed clock from now to a date.

Nothing here is a second model of the rules: the sweeps are the functions daemons/jobs.py runs,
with outside parts that reach nothing (a seeded card provider, a mailer that writes nowhere).
The real database is only read, once, while copying.

Stepping: every sweep is a function of the rows and `now`, so a tick at which no row changed
and no instant the rows name was crossed does nothing. The clock therefore jumps from tick to
tick of the real cadences (each job on its own epoch-aligned boundaries, in the daemons' table
order), skipping the ticks in between that could not act: a job that a change reached (a row
written since its last run began, by any job, itself included) runs at its next tick; a job
that changed nothing and saw no change after runs at its first tick at or after the next
instant any live row names (a due date, a period end, a grace day, a page's expiry). A job
whose sweep states its own due rule (the collector's, the recovery's, the period-end sweep's,
the abandoned checkouts', the presale cases') runs instead at the tick of the first instant its
selection holds a row: a change it cannot act on yet does not wake it.

The scratch copy has indexes the real database does not need (one per instant column of the
live subscriptions) and the planner's statistics: they change how the sweeps find their rows,
never which (a test compares).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from dateutil.relativedelta import relativedelta
from sqlalchemy import Engine, and_, bindparam, event, func, insert, select, text
from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import alerts, attempts, checkout, codes, collector, lifecycle, recovery
from gymctl.billing.accounts import CARD_PROVIDER
from gymctl.clock import LONG_AGO, day_n_ends, ensure_utc
from gymctl.crypto import FieldCipher
from gymctl.db import READ_ONLY, UNSHARED, get_engine, release_engine, session_factory
from gymctl.errors import invalid, not_found, unprocessable
from gymctl.migrate import upgrade
from gymctl.models import (
    BillingSettings,
    Checkout,
    Organization,
    OutboxEvent,
    PaymentProviderConfig,
    PaymentTransaction,
    Subscription,
)
from gymctl.models.base import Base, UTCDateTime
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import (
    CardProvider,
    ChargeResult,
    HostedPage,
    Outcome,
    PageRequest,
    PageResult,
    PageState,
    RefundResult,
    Terminal,
)
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import OutgoingEmail
from gymctl.retention import presales
from gymctl.retention.presales import presale_cases_pass
from gymctl.retention.settlement import Doors, period_end_due, period_end_sweep

MAX_HORIZON = relativedelta(years=3)
MAX_SEED = 2**31  # a seed's range, over HTTP and on the command line alike
UNTIL = "the forecast's end (--until; until over HTTP)"  # refusals read on a terminal and over HTTP
HISTORY = timedelta(days=90)
PERIODS = ("day", "week", "month")
# The billing state of one organization, copied in the metadata's dependency order. Users are
# copied as far as these rows name them.
COPIED_TABLES = (
    "organizations",
    "billing_settings",
    "document_counters",
    "payment_provider_configs",
    "plans",
    "memberships",
    "payment_methods",
    "tasks",
    "subscriptions",
    "cancellation_notices",
    "checkouts",
    "payment_transactions",
    "cancellation_settlements",
    "retention_cases",
    "retention_contacts",
    "class_types",
    "class_sessions",
    "bookings",
)
# Of the schedule, only what is still to come: a plan the forecast ends gives up its seats in
# classes to come (lifecycle -> bookings.book.give_up_uncovered: the session back on the plan,
# the line moved up), as the daemons do; without them its pack kept the session. Past classes
# are history no sweep reads.
UPCOMING = {
    "class_sessions": lambda table, sessions, start: table.c.starts_at > start,
    "bookings": lambda table, sessions, start: table.c.class_session_id.in_(
        select(sessions.c.id).where(
            sessions.c.organization_id == table.c.organization_id, sessions.c.starts_at > start
        )
    ),
}
ENDED = lifecycle.ENDED
LIVE = tuple(status for status in SubscriptionStatus if status not in ENDED)


# --- The outside parts: nothing leaves the process --------------------------------------------


class SeededCardProvider:
    """The card provider of a forecast: each token charge is declined with probability
    `decline_rate`. The draw is the card's own: the n-th charge of a card draws from the seed,
    the card's token and n, so a seed gives each member the same fate whatever order the sweeps
    reach them in and whoever else the gym has (a member added since the last forecast moves
    no one else's decline). A unique id is answered once and replayed after, as the real
    provider does; refunds are approved; a hosted page is still open (the member has not come
    back), so an expired checkout is abandoned."""

    name = "forecast"

    def __init__(self, decline_rate: float = 0.0, seed: int = 0) -> None:
        self.decline_rate = decline_rate
        self.seed = seed
        self._charges: Counter[str] = Counter()  # per card token
        self._answers: dict[str, ChargeResult] = {}

    def create_page(self, terminal: Terminal, request: PageRequest) -> HostedPage:
        raise NotImplementedError("a forecast opens no payment page")

    def get_page(self, terminal: Terminal, page_id: str) -> PageResult:
        return PageResult(PageState.pending, page_id, response_code=0)

    def charge_token(
        self,
        terminal: Terminal,
        *,
        token: str,
        expiry: date | None,
        amount_in_cents: int,
        currency: str,
        unique_id: str,
    ) -> ChargeResult:
        if unique_id in self._answers:
            return replace(self._answers[unique_id], replayed=True)
        self._charges[token] += 1
        return self._drawn(
            f"{token}:{self._charges[token]}",
            unique_id,
            amount_in_cents=amount_in_cents,
            currency=currency,
            terminal=terminal.number,
        )

    def lookup_charge(self, terminal: Terminal, unique_id: str) -> ChargeResult:
        """A charge this forecast made: its answer. One it did not make (an attempt or a desk
        charge in flight when the organization was copied) was sent to the real provider,
        whose answer no forecast can ask: it is drawn as a charge is (approved but for the
        decline rate), from the seed and its id, rather than answered "never received", which
        would charge the member a second time."""
        if unique_id not in self._answers:
            return self._drawn(f"lookup:{unique_id}", unique_id)
        return self._answers[unique_id]

    def _drawn(self, draw_key: str, unique_id: str, **terms: Any) -> ChargeResult:
        """The answer drawn from the seed and `draw_key`, kept for `unique_id`'s replays."""
        draw = random.Random(f"{self.seed}:{draw_key}")  # noqa: S311 (no secret)
        declined = draw.random() < self.decline_rate
        answer = ChargeResult(
            Outcome.declined if declined else Outcome.approved,
            unique_id,
            transaction_id=None if declined else f"forecast-{len(self._answers) + 1}",
            response_code=5 if declined else 0,
            **terms,
        )
        self._answers[unique_id] = answer
        return answer

    def refund(
        self, terminal: Terminal, *, transaction_id: str, amount_in_cents: int, unique_id: str
    ) -> RefundResult:
        return RefundResult(Outcome.approved, transaction_id=f"forecast-refund-{unique_id}")


class NowhereMailer:
    """Hands every message over to nobody: the sweeps see a sent email, no one receives it."""

    def send(self, email: OutgoingEmail) -> str:
        return f"<forecast-{uuid.uuid4()}@invalid>"


# --- The jobs: the money and status rows of daemons/jobs.py ------------------------------------


# A job's due rule, kept next to its sweep: the first instant after the given one (or any,
# given None) at which the sweep's selection holds a row; an instant already past means at
# once; None: never, until a row changes.
Due = Callable[[Session, datetime | None], datetime | None]


@dataclass(frozen=True)
class ForecastJob:
    name: str
    interval_seconds: int
    offset_seconds: int
    run: Callable[[sessionmaker[Session], datetime], Any]
    collects: bool = False  # a protected-collector pass (left out for lifecycle-only forecasts)
    due: Due | None = None  # without one, the next instant any live row names (NextInstant)


def forecast_jobs(provider: CardProvider, cipher: FieldCipher) -> tuple[ForecastJob, ...]:
    """The jobs of daemons/jobs.py that move money or status, with the same cadences, order and
    domain functions; the card provider and the mailer are the forecast's."""
    doors = Doors(
        provider=provider, cipher=cipher, documents=LocalDocumentProvider(), mailer=NowhereMailer()
    )

    # The forecast's clock stands still within a tick: a pass's charges all begin at its tick
    # (collector.charging_at), and the catch-up's 30 s budget is never spent.
    def stands() -> float:
        return 0.0

    collector_due = _once_per_tick(lambda session, after: collector.next_due(session, after=after))

    def in_session(run: Callable[[Session, datetime], Any]) -> Callable[..., Any]:
        def job(factory: sessionmaker[Session], now: datetime) -> Any:
            with factory() as session:
                result = run(session, now)
                session.commit()
            return result

        return job

    return (
        ForecastJob(
            "billing_lifecycle",
            3600,
            0,
            in_session(lambda s, now: lifecycle.run_lifecycle(s, now=now)),
        ),
        ForecastJob(
            "billing_catchup",
            60,
            0,
            lambda factory, now: collector.catch_up(
                factory, provider, now=now, cipher=cipher, monotonic=stands
            ),
            collects=True,
            due=collector_due,
        ),
        ForecastJob(
            "billing_recovery",
            300,
            0,
            lambda factory, now: recovery.recovery_pass(
                factory, provider, cipher, now=now, documents=doors.documents, monotonic=stands
            ),
            collects=True,
            due=lambda session, after: recovery.recovery_due(session, after=after),
        ),
        ForecastJob(
            "billing_daily",
            86400,
            2 * 3600,
            lambda factory, now: collector.daily_sweep(
                factory, provider, now=now, cipher=cipher, monotonic=stands
            ),
            collects=True,
            due=collector_due,
        ),
        ForecastJob(
            "billing_abandoned_checkouts",
            300,
            0,
            lambda factory, now: checkout.abandoned_sweep(
                factory, provider, now=now, cipher=cipher
            ),
            due=lambda session, after: checkout.abandoned_due(session, after=after),
        ),
        ForecastJob(
            "retention_presale_cases",
            300,
            0,
            lambda factory, now: presale_cases_pass(factory, doors.mailer, now=now),
            # It reads no clock: after a pass that found nothing, only a change can give it work.
            due=lambda session, after: (
                LONG_AGO if after is None and presales.cases_waiting(session) else None
            ),
        ),
        ForecastJob(
            "cancellation_sweep",
            3600,
            0,
            lambda factory, now: period_end_sweep(factory, doors, now=now),
            due=lambda session, after: period_end_due(session, after=after),
        ),
    )


def _once_per_tick(due: Due) -> Due:
    """A rule two jobs share, asked once per tick (a tick's questions share its session)."""
    last: list[Any] = [None, None]

    def asked(session: Session, after: datetime | None) -> datetime | None:
        if last[0] != (session, after):
            last[:] = [(session, after), due(session, after)]
        return last[1]

    return asked


def next_tick(job: ForecastJob, at: datetime, *, strictly_after: bool = False) -> datetime:
    """The job's first epoch-aligned boundary at (or after) `at`, as the daemons' trigger."""
    step = timedelta(seconds=job.interval_seconds)
    origin = datetime.fromtimestamp(job.offset_seconds, tz=UTC)
    ticks, rest = divmod(at - origin, step)
    if rest or strictly_after:
        ticks += 1
    return origin + ticks * step


# --- Copying one organization ------------------------------------------------------------------


def _read_organization(
    source: Session, organization_id: uuid.UUID, start: datetime
) -> list[tuple[Any, list]]:
    """The organization's billing rows and its classes to come (at `start`, the forecast's),
    table by table from the model metadata (a new column follows without a change here), and
    the users those rows name."""
    tables = {t.name: t for t in Base.metadata.sorted_tables}
    users = tables["users"]
    user_ids: set[uuid.UUID] = set()
    found: list[tuple[Any, list]] = []
    for name in COPIED_TABLES:
        table = tables[name]
        key = table.c.id if name == "organizations" else table.c.organization_id
        terms = [key == organization_id]
        if name in UPCOMING:
            terms.append(UPCOMING[name](table, tables["class_sessions"], start))
        rows = [dict(r._mapping) for r in source.execute(select(table).where(*terms))]
        for column in table.c:
            if any(fk.column.table is users for fk in column.foreign_keys):
                user_ids.update(row[column.name] for row in rows if row[column.name])
        found.append((table, rows))
    ids = sorted(user_ids)
    named: list[dict[str, Any]] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        named += (
            dict(r._mapping) for r in source.execute(select(users).where(users.c.id.in_(chunk)))
        )
    # Users first (they name no other row): a row's key is in place before the rows that name
    # it. Inserted last, each user had SQLite look through every table that names users for
    # the deferred violations it cleared (16 of the 20 s a 20,000-subscription copy took).
    return [(users, named), *found]


def copy_rows(target: Engine, found: list[tuple[Any, list]]) -> int:
    """Insert the rows read, in their order (a named row before the rows naming it); foreign
    keys are checked at the commit."""
    with target.begin() as connection:
        connection.exec_driver_sql("PRAGMA defer_foreign_keys=ON")
        for table, rows in found:
            if rows:
                connection.execute(insert(table), rows)
    return sum(len(rows) for _, rows in found)


# --- The forecast ------------------------------------------------------------------------------


@dataclass
class Step:
    at: datetime
    job: str
    event: str
    subscription_id: str | None
    payload: dict[str, Any]


@dataclass
class Forecast:
    organization_id: uuid.UUID
    start: datetime
    until: datetime
    by: str
    decline_rate: float
    seed: int | None
    lifecycle_only: bool
    steps: list[Step] = field(default_factory=list)
    active_at: dict[datetime, int] = field(default_factory=dict)
    ticks_run: int = 0
    rows_copied: int = 0
    # Told the forecast clock's instant before each tick (a progress bar, a queued run's
    # heartbeat); what it raises ends the forecast (a request's time budget).
    progress: Callable[[datetime], None] | None = field(default=None, repr=False, compare=False)
    # At `until`: every subscription's row and the ledger, by table name.
    final: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def periods(self) -> list[dict[str, Any]]:
        rows: dict[datetime, dict[str, Any]] = {}
        for start in self.period_starts():
            rows[start] = {
                "periodStart": start,
                "moneyInCents": 0,
                "refundsOutCents": 0,
                "debtsOpened": 0,
                "debtsCleared": 0,
                "cancelledForNonPayment": 0,
                "noticesMatured": 0,
                "presalesOpened": 0,
                "activeAtEnd": 0,
            }
        for step in self.steps:
            start = period_start(step.at, self.start, self.by)
            row = rows.get(start) or rows[max(rows)]  # a tick at `until` closes the last period
            payload = step.payload
            if step.event == "subscription.renewed" and payload.get("transactionId"):
                row["moneyInCents"] += payload.get("amountInCents") or 0
                row["debtsCleared"] += payload.get("kind") == "debt"  # a debt retry settled
            elif step.event == "subscription.cancellation_settled":
                row["noticesMatured"] += 1
                refund = (payload.get("after") or {}).get("amountInCents") or 0
                row["refundsOutCents"] += refund
            elif step.event == "subscription.debt_opened":
                row["debtsOpened"] += 1
            elif step.event == "subscription.debt_cleared":
                row["debtsCleared"] += 1
            elif step.event == "subscription.cancelled" and payload.get("reason") == "non_payment":
                row["cancelledForNonPayment"] += 1
            elif step.event == "membership.activated":
                row["presalesOpened"] += 1
        for start, row in rows.items():
            row["activeAtEnd"] = self.active_at.get(start, 0)
        return list(rows.values())

    def report(self, explain: uuid.UUID | None = None) -> dict[str, Any]:
        """as_dict, with the timeline of `explain` if asked, in JSON's own types (instants in
        ISO 8601): what HTTP answers and a queued run stores."""
        report = self.as_dict()
        if explain is not None:
            report["explain"] = {"subscriptionId": str(explain), "timeline": self.explain(explain)}
        return json.loads(json.dumps(report, default=_json_value))

    def period_starts(self) -> list[datetime]:
        starts, at = [], self.start
        while at < self.until:
            starts.append(at)
            at = _advance(at, self.by)
        return starts

    def explain(self, subscription_id: uuid.UUID) -> list[dict[str, Any]]:
        wanted = str(subscription_id)
        return [
            {"at": s.at, "job": s.job, "event": s.event, "payload": s.payload}
            for s in self.steps
            if s.subscription_id == wanted
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "organizationId": str(self.organization_id),
            "from": self.start,
            "until": self.until,
            "by": self.by,
            "declineRate": self.decline_rate,
            "seed": self.seed,
            "lifecycleOnly": self.lifecycle_only,
            "ticksRun": self.ticks_run,
            "periods": self.periods(),
        }


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _advance(at: datetime, by: str) -> datetime:
    if by == "day":
        return at + timedelta(days=1)
    if by == "week":
        return at + timedelta(weeks=1)
    return at + relativedelta(months=1)


def period_start(at: datetime, start: datetime, by: str) -> datetime:
    current = start
    while True:
        following = _advance(current, by)
        if at < following:
            return current
        current = following


def history_decline_rate(session: Session, organization_id: uuid.UUID, *, now: datetime) -> float:
    """The share of the organization's protected attempts of the last 90 days that were
    declined (technical not-charged failures excluded); 0 without attempts."""
    rows = session.execute(
        select(PaymentTransaction.status, PaymentTransaction.billing_resolution).where(
            PaymentTransaction.organization_id == organization_id,
            PaymentTransaction.attempt_kind.is_not(None),
            PaymentTransaction.created_at >= now - HISTORY,
            PaymentTransaction.status.in_((*attempts.SETTLED, TransactionStatus.failed)),
        )
    ).all()
    answered = [
        status
        for status, resolution in rows
        if not (
            status == TransactionStatus.failed
            and (resolution or {}).get("decision") in attempts.NOT_DECLINES
        )
    ]
    if not answered:
        return 0.0
    return sum(status == TransactionStatus.failed for status in answered) / len(answered)


def check_options(by: str, decline_rate: float | None, from_history: bool) -> None:
    """The refusals of the options alone."""
    if by not in PERIODS:
        raise invalid(codes.FORECAST_PERIOD_INVALID, f"--by is one of {', '.join(PERIODS)}")
    if not 0.0 <= (decline_rate or 0.0) <= 1.0:
        raise invalid(codes.DECLINE_RATE_INVALID, "--decline-rate is a share between 0 and 1")
    if from_history and decline_rate:
        raise unprocessable(
            codes.DECLINE_RATE_CONFLICT,
            "a decline rate and the organization's own history exclude each other "
            "(--decline-rate / --from-history; declineRate / fromHistory)",
        )


def within(
    seconds: float, monotonic: Callable[[], float] = time.monotonic
) -> Callable[[datetime], None]:
    """A progress hook that ends the forecast once it has run `seconds`: for a caller that must
    answer in time (an HTTP request), which then points to the queued forecast instead."""
    deadline = monotonic() + seconds

    def check(_reached: datetime) -> None:
        if monotonic() > deadline:
            raise unprocessable(
                codes.FORECAST_TOO_LONG_FOR_REQUEST,
                f"this forecast takes longer than {seconds:g} s, more than a request may: queue "
                "it (POST /admin/organizations/{org_id}/billing-forecasts) and read it back",
            )

    return check


def check_organization(session: Session, organization_id: uuid.UUID) -> None:
    organization = session.get(Organization, organization_id)
    if organization is None or organization.deleted_at is not None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no such organization")


def check_explain(session: Session, organization_id: uuid.UUID, subscription_id: uuid.UUID) -> None:
    """The subscription a forecast is asked to explain is one of the organization's: another
    gym's or a made-up id would only show an empty timeline."""
    found = session.scalar(
        select(Subscription.id).where(
            Subscription.id == subscription_id, Subscription.organization_id == organization_id
        )
    )
    if found is None:
        raise not_found(
            codes.SUBSCRIPTION_NOT_FOUND, "the organization has no subscription with this id"
        )


def check_request(
    session: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    until: datetime,
    lifecycle_only: bool,
) -> None:
    """The refusals, before anything is copied."""
    check_organization(session, organization_id)
    if until <= now:
        raise unprocessable(codes.FORECAST_DATE_PAST, f"{UNTIL} must be after now")
    if until > now + MAX_HORIZON:
        raise unprocessable(codes.FORECAST_DATE_TOO_FAR, f"{UNTIL} must be at most 3 years ahead")
    config = session.scalar(
        select(PaymentProviderConfig).where(
            PaymentProviderConfig.organization_id == organization_id,
            PaymentProviderConfig.active.is_(True),
        )
    )
    if config is not None and config.provider != CARD_PROVIDER and not lifecycle_only:
        raise unprocessable(
            codes.PROVIDER_NOT_RECONCILABLE,
            f"the organization collects through {config.provider}, which the collector cannot "
            "reconcile: its renewals are provider-direct and only the lifecycle part can be "
            "forecast (pass --lifecycle-only; lifecycleOnly over HTTP)",
            provider=config.provider,
        )


def simulate(
    source: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    until: datetime,
    cipher: FieldCipher,
    by: str = "week",
    decline_rate: float | None = 0.0,
    seed: int = 0,
    from_history: bool = False,
    lifecycle_only: bool = False,
    scratch_dir: Path | None = None,
    progress: Callable[[datetime], None] | None = None,
) -> Forecast:
    """Forecast the organization's billing from `now` to `until` on a scratch copy, dropped
    afterwards. `source` is only read. `progress` is told the forecast clock before each tick
    (from the forecast's own thread); an error it raises ends the forecast."""
    now, until = ensure_utc(now), ensure_utc(until)
    owned = not source.in_transaction()
    if owned:
        source.connection(execution_options=READ_ONLY)  # the embedded default: no write lock
    check_options(by, decline_rate, from_history)
    check_request(source, organization_id, now=now, until=until, lifecycle_only=lifecycle_only)
    if from_history:
        decline_rate = history_decline_rate(source, organization_id, now=now)
    forecast = Forecast(organization_id, now, until, by, decline_rate or 0.0, seed, lifecycle_only)
    left = threading.Event()
    forecast.progress = _until_left(left, progress)
    # The scratch database is written from a thread of its own: on the embedded default the
    # caller's transaction may hold the real database's write lock, and gymctl.db refuses a
    # second writer in one thread (even on another file).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast") as worker:
        rows = _read_organization(source, organization_id, now)
        if owned:
            # All is read: a transaction of its own ends here rather than holding a snapshot
            # open while the forecast runs (minutes for a large gym, on a daemon's connection).
            source.rollback()
        running = worker.submit(_scratch_run, rows, forecast, cipher, scratch_dir)
        try:
            running.result()
        except BaseException:
            # The caller left (Ctrl-C): the pool's exit waits for the worker, which stops at
            # its next tick rather than finishing a forecast no one will read.
            left.set()
            raise
    return forecast


class _Left(Exception):
    """The caller of simulate left while the forecast ran."""


def _until_left(
    left: threading.Event, progress: Callable[[datetime], None] | None
) -> Callable[[datetime], None]:
    def told(at: datetime) -> None:
        if left.is_set():
            raise _Left
        if progress is not None:
            progress(at)

    return told


SCRATCH_PREFIX = "gymctl-forecast-"
OWNER = "owner.pid"  # the process a scratch copy belongs to


def _scratch_run(
    rows: list[tuple[Any, list]], forecast: Forecast, cipher: FieldCipher, scratch_dir: Path | None
) -> None:
    parent = Path(scratch_dir or tempfile.gettempdir())
    remove_orphans(parent)
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    (folder / OWNER).write_text(str(os.getpid()))
    url = f"sqlite:///{folder / 'forecast.sqlite3'}"
    try:
        engine = scratch_engine(url)
        try:
            forecast.rows_copied = copy_rows(engine, rows)
            if forecast.progress is not None:
                forecast.progress(forecast.start)  # a request's time budget counts the copy
            tune_scratch(engine)
            provider = SeededCardProvider(forecast.decline_rate, forecast.seed or 0)
            jobs = forecast_jobs(provider, cipher)
            if forecast.lifecycle_only:
                jobs = tuple(job for job in jobs if not job.collects)
            with alerts.silenced():
                run(engine, jobs, forecast)
            forecast.final = final_state(engine)
        finally:
            release_engine(url)  # the file goes: nothing of it stays in the engine cache
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_orphans(parent: Path) -> int:
    """Remove the scratch copies whose process is gone: one killed outright (SIGKILL, out of
    memory) never ran its cleanup, and a large gym's copy is hundreds of MB. A copy of a live
    process (another forecast, this one's daemon) stays, and so does one without its owner
    written yet (or from before s54). How many went."""
    removed = 0
    for folder in parent.glob(f"{SCRATCH_PREFIX}*"):
        try:
            pid = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or a pid no signal can name: left alone
    return True


# A thrown-away file: no fsync (a crash loses only the forecast), and up to 128 MiB of its pages
# kept in memory (with SQLite's default 2 MiB each pass rereads the subscriptions from the file).
SCRATCH_PRAGMAS = (
    "PRAGMA synchronous=OFF",
    "PRAGMA cache_size=-131072",
    "PRAGMA temp_store=MEMORY",
)


# The lifecycle's ending transitions (expired, gift_ended, term_ended, rolled) read active rows
# of one plan type by period end, but for a notice by the plan's own end; term_ended's branches
# (paid by card, in cash or later) have no one range, so it walks its rows, and the columns its
# terms read follow in the index: a row is rejected there, without reading it (1.9 -> 0.3 ms a
# pass at 5,000 subscriptions; without the notice's date, which the own-end rule reads since
# s42, each row was read again: 0.6 -> 2.1 ms). The id last: the pass leaves out a plan with a
# charge on its way (`id NOT IN` the pending attempts), and without it each row was read from
# the table again (the planner then took the cash lapse's narrower index: 1.3 -> 0.45 ms).
ENDING_COLUMNS = (
    "status",
    "plan_type",
    "current_period_end",
    "cancel_at_period_end",
    "cancellation_effective_at",
    "payment_collection_method",
    "payment_method_id",
    "next_charge_date",
    "cash_prepaid_through",
    "renewal_end",
    "price_in_cents",
    "open_ended",
    "interval_months",
    "unpaid_amount_in_cents",
    "id",
)


# Indexes for the statements of one sweep each, where the per-column ones leave a walk of rows
# the statement then rejects one by one (each measured on a copy of 20,000 subscriptions):
SCRATCH_INDEXES = {
    # The lifecycle's cash lapse, by its plan types: past the drop-ins and gifts paid in cash,
    # whose paid-through day is behind them for good (4.2 -> 0.06 ms a look).
    "forecast_cash_lapsed": "subscriptions "
    "(status, payment_collection_method, plan_type, cash_prepaid_through) WHERE deleted_at IS NULL",
    # The collector's due rule, the retries later than their charge date: few rows, where the
    # retry_at index walks every debt to reject it (next_due 5.1 -> 0.3 ms a look).
    "forecast_late_retries": "subscriptions (status, retry_at) "
    "WHERE deleted_at IS NULL AND retry_at > next_charge_date",
    # The presale cases' due rule, the declined presales: past every other debt
    # (cases_waiting 4.6 -> 0.4 ms a look).
    "forecast_presale_debts": "subscriptions (retention_case_kind, status, debt_since) "
    "WHERE deleted_at IS NULL",
    # The lifecycle's pay-later balance of an ended plan falling due, not in debt yet: the
    # debt_since index alone walks every ended row with no debt, and ended rows pile up over a
    # forecast (1.7 -> 0.01 ms a look at 5,000 subscriptions, 120 days in).
    "forecast_pay_later_due": "subscriptions "
    "(status, payment_collection_method, debt_since, payment_due_at) WHERE deleted_at IS NULL",
}


# Instants that record when a row was written or ended: at or before the tick that wrote
# them, never one a sweep waits for (and a live row has no deletion). Left out of NextInstant,
# and so unindexed: every write moves updated_at, and its index with it.
RECORDED = ("created_at", "updated_at", "cancelled_at", "ended_at", "deleted_at")


def instant_columns() -> list[Any]:
    """The subscription columns that hold instants a sweep may wait for: what NextInstant
    asks about."""
    return [
        c
        for c in Subscription.__table__.c
        if isinstance(c.type, UTCDateTime) and c.name not in RECORDED
    ]


def tune_scratch(engine: Engine) -> None:
    """After the copy: an index per instant column, led by the status (every sweep's scan and
    NextInstant's lookups name the statuses they read; an index of the instant alone walks
    every ended row too, and ended rows pile up over a forecast: the lifecycle's cash lapse
    looked at 1,900 rows to find none), one for the lifecycle's ending transitions
    (ENDING_COLUMNS), one of the ledger by status and obligation (the recovery's pending
    attempts, few among many settled ones; each charge's count of its obligation's technical
    failures, which the status alone answered by walking every failed attempt: the statistics
    of the copy, taken before the forecast's own declines, favour it), SCRATCH_INDEXES, then
    the planner's statistics. A plan decides how a statement finds its rows, not what it finds: the
    forecast is the same with or without this (a test compares)."""
    with engine.begin() as connection:
        for column in instant_columns():
            connection.exec_driver_sql(
                f"CREATE INDEX forecast_{column.name} ON subscriptions (status, {column.name}) "
                "WHERE deleted_at IS NULL"
            )
        connection.exec_driver_sql(
            f"CREATE INDEX forecast_ending ON subscriptions ({', '.join(ENDING_COLUMNS)}) "
            "WHERE deleted_at IS NULL"
        )
        connection.exec_driver_sql(
            "CREATE INDEX forecast_transaction_status ON payment_transactions"
            " (status, obligation_key)"
        )
        for name, ddl in SCRATCH_INDEXES.items():
            connection.exec_driver_sql(f"CREATE INDEX {name} ON {ddl}")
        connection.exec_driver_sql("ANALYZE")


def scratch_engine(url: str) -> Engine:
    """A migrated SQLite file that is thrown away (SCRATCH_PRAGMAS on every connection)."""
    engine = get_engine(url)
    engine.update_execution_options(**UNSHARED)  # the forecast's thread is its only writer
    with _alembic_quiet():
        upgrade(url)
    event.listen(engine, "connect", _scratch_pragmas)
    engine.dispose()  # the migration's pooled connections predate the listener
    return engine


class _AlembicQuiet:
    """alembic's INFO lines left out while a scratch database is migrated: about 20 a forecast
    (each revision's "Running upgrade"), in the daemon's log once per queued forecast. Its
    warnings still show. The level is the "alembic" logger's, for the whole process, so it is
    counted: two forecasts' migrations may overlap, and the last one out puts it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._level = logging.NOTSET

    @contextmanager
    def __call__(self) -> Iterator[None]:
        logger = logging.getLogger("alembic")
        with self._lock:
            if self._depth == 0:
                self._level = logger.level
                logger.setLevel(max(logging.WARNING, logger.level))
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    logger.setLevel(self._level)


_alembic_quiet = _AlembicQuiet()


def _scratch_pragmas(dbapi_connection, _record) -> None:
    for pragma in SCRATCH_PRAGMAS:
        dbapi_connection.execute(pragma)


def run(
    engine: Engine, jobs: tuple[ForecastJob, ...], forecast: Forecast, *, per_job: bool = True
) -> None:
    """Run `jobs` at their ticks from forecast.start to forecast.until (see the module doc).
    `required` is, per job, the tick by which it must run again.

    per_job (the default): a job must run at its next tick when a row changed since its last
    run began (its own writes included); a job that ran and found nothing to change, with no
    row changed after, need not run before the next instant a live row names. A job with a due
    rule (ForecastJob.due, kept next to its sweep) narrows both: after a change it runs at the
    tick of the first instant its sweep's selection holds a row (the next tick if one already
    does); after a run that changed nothing, at the first such instant after that run. Without
    per_job, the first rule applies to every job after any tick that wrote (a job that ran
    after the last write of its tick runs again too): the same results, more runs (a test
    compares them)."""
    factory = session_factory(engine)
    writes = _write_counter(engine)
    never = forecast.until + timedelta(seconds=1)
    ends = [(start, _advance(start, forecast.by)) for start in forecast.period_starts()]
    required = {job.name: next_tick(job, forecast.start) for job in jobs}
    # The write count when its last run began (or, with a due rule, when it last looked).
    seen = {job.name: writes[0] for job in jobs}
    instants = NextInstant(engine)
    last_event = _last_event_rowid(engine)
    while True:
        at = min(required.values())
        if forecast.progress is not None:
            forecast.progress(min(at, forecast.until))
        while ends and ends[0][1] <= min(at, never):
            forecast.active_at[ends.pop(0)[0]] = _active(engine)
        if at > forecast.until:
            break
        before = writes[0]
        ran = set()
        for job in jobs:
            if required[job.name] != at:
                continue
            seen[job.name] = writes[0]
            job.run(factory, at)
            forecast.ticks_run += 1
            if writes[0] != seen[job.name]:
                last_event = _collect_events(engine, forecast, job.name, last_event)
            required[job.name] = never
            ran.add(job.name)
        horizon: list[datetime | None] = []  # computed once, when a job needs it
        with factory() as session:
            session.connection(execution_options=READ_ONLY)
            for job in jobs:
                changed = writes[0] != (seen[job.name] if per_job else before)
                if per_job and job.due is not None:
                    if changed or job.name in ran:
                        # Rows changed since it last looked: when do they give it work? Else
                        # it has just looked at these rows and found none: when do they next?
                        seen[job.name] = writes[0]
                        instant = job.due(session, None if changed else at)
                        if instant is not None:
                            tick = _tick_from(job, at, instant)
                            required[job.name] = min(required[job.name], tick)
                elif changed:
                    required[job.name] = min(
                        required[job.name], next_tick(job, at, strictly_after=True)
                    )
                elif job.name in ran or not per_job:
                    if not horizon:
                        horizon.append(instants.after(at))
                    if horizon[0] is not None:
                        required[job.name] = min(required[job.name], next_tick(job, horizon[0]))
    for start, _end in ends:
        forecast.active_at[start] = _active(engine)


def _tick_from(job: ForecastJob, at: datetime, instant: datetime) -> datetime:
    """The job's first tick at `instant`, or its next one after `at` when that has passed."""
    return next_tick(job, instant) if instant > at else next_tick(job, at, strictly_after=True)


def final_state(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    with engine.connect() as connection:
        return {
            table.name: [dict(row._mapping) for row in connection.execute(select(table))]
            for table in (Subscription.__table__, PaymentTransaction.__table__)
        }


def _write_counter(engine: Engine) -> list[int]:
    """Counts the statements that changed rows: a tick that wrote nothing changed nothing. A
    bookkeeping write (db.BOOKKEEPING: when recovery last asked about an attempt) is not a
    change: counted, an attempt pending for good ran every job again after each pass."""
    writes = [0]

    @event.listens_for(engine, "after_cursor_execute")
    def counted(conn, cursor, statement, parameters, context, executemany) -> None:
        changing = (
            context is not None
            and (context.isinsert or context.isupdate or context.isdelete)
            and not context.execution_options.get("gymctl_bookkeeping")
        )
        if changing and cursor.rowcount != 0:
            writes[0] += 1

    return writes


def _last_event_rowid(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.scalar(text("SELECT coalesce(max(rowid), 0) FROM outbox_events"))


def _collect_events(engine: Engine, forecast: Forecast, job: str, after: int) -> int:
    outbox = OutboxEvent.__table__
    with engine.connect() as connection:
        rows = connection.execute(
            select(text("outbox_events.rowid"), outbox)
            .where(text("outbox_events.rowid > :after").bindparams(after=after))
            .order_by(text("outbox_events.rowid"))
        ).all()
    for row in rows:
        payload = row.payload or {}
        if row.aggregate_type == "subscription":
            subscription_id = row.aggregate_id
        else:
            subscription_id = payload.get("subscriptionId")
        at = ensure_utc(row.occurred_at)
        forecast.steps.append(Step(at, job, row.name, subscription_id, payload))
        after = max(after, row[0])
    return after


def _active(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.scalar(
            select(func.count()).where(
                Subscription.status == SubscriptionStatus.active,
                Subscription.deleted_at.is_(None),
            )
        )


class NextInstant:
    """The earliest instant after a given one that a live row names: any instant of a
    subscription not ended that a sweep may wait for (instant_columns), its grace day in debt,
    an ended plan's pay-later due day, an open page's expiry, the presale card age, a pending
    attempt's executing grace. A
    conservative bound: a sweep may find nothing to do then. The statements are built once per
    forecast (it asks after most ticks)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        subscriptions = Subscription.__table__
        after = bindparam("after", type_=UTCDateTime())
        live = and_(
            subscriptions.c.status.in_([s.value for s in LIVE]),  # an index probe per status
            subscriptions.c.deleted_at.is_(None),
        )
        # One index lookup per instant column (the scratch copy's indexes, tune_scratch), rather
        # than one scan of every live row per question.
        self.firsts = select(
            *(
                select(func.min(column)).where(column > after, live).scalar_subquery()
                for column in instant_columns()
            )
        )
        # The lifecycle's own defaults for an absent row or column (a grace of 0 days is 0).
        self.settings = select(
            func.coalesce(BillingSettings.billing_grace_days, lifecycle._DEFAULT_GRACE_DAYS),
            func.coalesce(BillingSettings.timezone, "UTC"),
        )
        # Oldest first: a grace end grows with its debt start, so the first end after the
        # instant asked about is the earliest one.
        self.debts = (
            select(Subscription.debt_since)
            .where(live, Subscription.status == SubscriptionStatus.debt)
            .where(Subscription.debt_since.is_not(None))
            .order_by(Subscription.debt_since)
        )
        self.others = select(
            select(func.min(Checkout.expires_at))
            .where(Checkout.status == CheckoutStatus.open, Checkout.expires_at > after)
            .scalar_subquery(),
            # An ended plan's pay-later balance falls due then (the lifecycle's payment_due).
            select(func.min(Subscription.payment_due_at))
            .where(
                Subscription.status.in_(ENDED),
                Subscription.deleted_at.is_(None),
                Subscription.debt_since.is_(None),
                Subscription.unpaid_amount_in_cents > 0,
                Subscription.payment_due_at > after,
            )
            .scalar_subquery(),
            select(func.min(PaymentTransaction.updated_at))
            .where(PaymentTransaction.status == TransactionStatus.pending)
            .scalar_subquery(),
            select(func.max(PaymentProviderConfig.terminal_since)).scalar_subquery(),
        )
        self._grace_ends: dict[tuple[datetime, int, str], datetime | None] = {}

    def after(self, after: datetime) -> datetime | None:
        candidates: list[datetime] = []
        with self.engine.connect() as connection:
            firsts = connection.execute(self.firsts, {"after": after}).one()
            candidates.extend(value for value in firsts if value is not None)
            grace, timezone = connection.execute(self.settings).first() or (
                lifecycle._DEFAULT_GRACE_DAYS,
                "UTC",
            )
            for since in connection.scalars(self.debts):
                ends = self._grace_end(since, grace, timezone)
                if ends is not None and ends > after:
                    candidates.append(ends)
                    break
            expiry, owed, pending, terminal = connection.execute(
                self.others, {"after": after}
            ).one()
        for value in (
            expiry,
            owed,
            pending and pending + attempts.EXECUTING_GRACE,
            terminal and terminal + attempts.PRESALE_CARD_AGE,
        ):
            if value is not None and value > after:
                candidates.append(value)
        return min((ensure_utc(v) for v in candidates), default=None)

    def _grace_end(self, since: datetime, grace: int, timezone: str) -> datetime | None:
        """The lifecycle's own rule: day N ends at the organization's midnight (spec B 3);
        remembered per debt start (a debt's rows are read at most every tick)."""
        key = (since, grace, timezone)
        if key not in self._grace_ends:
            self._grace_ends[key] = day_n_ends(since, grace, timezone)
        return self._grace_ends[key]
