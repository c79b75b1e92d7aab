"""The dispatcher: sends each organization's queue to the external system.

Any number of dispatcher processes run; each serves an organization only while it holds that
organization's lock (a PostgreSQL session-level advisory lock on the connection doing the work,
so it is released the moment the process dies; a process lock on the embedded SQLite default).
The holder owns the organization's token bucket, so every call for it (ops, the schedule poll,
the booking reconcile, a pending key check) is paced by one bucket. It rescues in-flight ops of
the organization at once (no one else can be working on them), claims due heads in short
transactions, and never holds a transaction open across an HTTP call.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, exists, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gymctl import clock as default_clock
from gymctl.bridge import classes, inbound, queue
from gymctl.bridge.client import (
    CallFailure,
    ConnectionPool,
    ExternalCallError,
    Throttle,
)
from gymctl.bridge.connection import (
    ACTIVE_ACCOUNT,
    ORGANIZATION_DELETED,
    Disconnected,
    account_in_use,
    activate,
    check_account,
    find_connection,
    on_account,
    open_client,
    still_connected,
    wind_down,
)
from gymctl.bridge.operations import (
    Defer,
    Erased,
    OpContext,
    Park,
    Retry,
    perform,
)
from gymctl.bridge.polling import serve_polls
from gymctl.clock import Clock
from gymctl.config import Settings
from gymctl.db import READ_ONLY, session_lock
from gymctl.errors import DomainError
from gymctl.events import EventKind, emit, emit_many
from gymctl.models.bridge import (
    WAITING,
    ConnectionStatus,
    IntegrationConnection,
    OpStatus,
    SyncOp,
)
from gymctl.models.integrity import UniqueViolation, unique_violation

logger = logging.getLogger("gymctl.bridge")

PENDING_CHECK_EVERY = timedelta(minutes=1)
ASK_AGAIN_AFTER = 5.0  # seconds: how long an answer of which organizations are due is used


@dataclass(frozen=True)
class Policy:
    rate: float | None = 2.0  # requests per second per organization; None lifts it
    batch: int = 10
    lease: timedelta = timedelta(minutes=5)
    ladder: tuple[timedelta, ...] = queue.LADDER
    timeout: float = 10.0
    workers: int = 16
    slice_seconds: float = 30.0  # then the organization is let go, so none starves
    idle_seconds: float = 0.5
    pause_on_429: float = 1.0  # when the 429 carries no Retry-After

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Policy:
        return cls(rate=settings.bridge_rate, **overrides)


@dataclass
class RunSummary:
    organization_id: str
    correlation_id: str
    runner: str
    rescued: int = 0
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    parked: int = 0
    released: int = 0
    withdrawn: int = 0  # user ops an erasure scrubbed meanwhile (queue.record), never sent again
    requests: int = 0
    polls: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    claim_seconds: list[float] = field(default_factory=list, repr=False)

    def count(self, status: OpStatus) -> None:
        """An op written back: by its new status (pending: its lease released)."""
        match status:
            case OpStatus.succeeded:
                self.succeeded += 1
            case OpStatus.failed:
                self.failed += 1
            case OpStatus.parked:
                self.parked += 1
            case OpStatus.pending:
                self.released += 1
            case _:
                raise KeyError(status)  # written back in flight: never

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("claim_seconds")
        return data


def drain(
    session: Session,
    organization_id: uuid.UUID,
    *,
    settings: Settings,
    policy: Policy,
    runner: str,
    clock: Clock = default_clock,
    stop: threading.Event | None = None,
    pool: ConnectionPool | None = None,
) -> RunSummary:
    """Serve one organization until nothing is due or its slice ends. The caller holds the
    organization's lock; `session` commits step by step; `pool`: the process's connections."""
    summary = RunSummary(str(organization_id), uuid.uuid4().hex, runner)
    started = time.monotonic()
    summary.rescued = queue.rescue_organization(session, organization_id, now=clock.now())
    session.commit()
    # A deleted gym's bridge sends what is queued, polls nothing, and is then disconnected
    # (at once when its key is refused or unverified). Revoked before this run, it is not
    # connected, as any other.
    was = session.scalar(
        select(IntegrationConnection.status).where(
            IntegrationConnection.organization_id == organization_id
        )
    )
    deleted = wind_down(session, organization_id, now=clock.now())
    session.commit()
    connection = find_connection(session, organization_id)
    if (
        deleted
        and connection is not None
        and was is not ConnectionStatus.revoked
        and connection.status is ConnectionStatus.revoked
    ):
        summary.stopped = ORGANIZATION_DELETED
        return summary
    if connection is None or connection.status not in (
        ConnectionStatus.active,
        ConnectionStatus.pending,
    ):
        summary.stopped = "not_connected"
        return summary
    throttle = Throttle(policy.rate)
    try:
        with open_client(connection, settings, throttle, policy.timeout, pool) as client:
            key = connection.credentials_ciphertext  # the client's: what its answers are about
            context = OpContext(
                session, client, connection, clock.now, key, connection.external_account_id
            )
            client.around_call = context.calling  # the key check's calls too
            if connection.status is ConnectionStatus.pending and not _check_pending(context, clock):
                summary.stopped = "disconnected" if context.disconnected else "pending"
                return summary
            sent = Outcomes(context, summary, clock)
            throttle.before_wait = sent.write
            while not (stop and stop.is_set()):
                if time.monotonic() - started > policy.slice_seconds:
                    summary.stopped = "slice"
                    break
                claim_started = time.perf_counter()
                ops = queue.claim(
                    session,
                    organization_id,
                    now=clock.now(),
                    limit=policy.batch,
                    lease=policy.lease,
                    owner=summary.correlation_id,
                )
                summary.claim_seconds.append(time.perf_counter() - claim_started)
                if not ops:
                    break
                summary.claimed += len(ops)
                context.prefetch(ops)
                for position, op in enumerate(ops):
                    _run_op(context, op, policy, throttle, sent)
                    if (
                        sent.broken
                        or context.disconnected
                        or (context.connection.status is ConnectionStatus.error)
                    ):
                        for rest in ops[position + 1 :]:
                            sent.add(rest, queue.released(rest, run_after=clock.now()))
                        break
                sent.write()
                if context.disconnected:
                    summary.stopped = "disconnected"
                    break
                if context.connection.status is ConnectionStatus.error:
                    summary.stopped = "unauthorized"
                    break
            if summary.stopped is None and not deleted:
                summary.polls = _polls(context, clock, summary)
        if deleted:
            wind_down(session, organization_id, now=clock.now())
            session.commit()
            if connection.status is ConnectionStatus.revoked:
                summary.stopped = ORGANIZATION_DELETED
    finally:
        summary.requests = throttle.calls
        _record_run(session, organization_id, summary, clock.now())
    return summary


def _check_pending(context: OpContext, clock: Clock) -> bool:
    """A key stored while the external system was down: check it now (spec B 5); whether it
    is active now. An account another gym is active on errs the connection
    (bridge_account_in_use), as any refusal of the check does. A disconnect or a new key
    committed meanwhile stands: the check's calls stop at it (the calls lock), and its
    outcome is written only to a connection still as the run found it (`_as_found`; the
    activation overwrote a revoke that landed during the calls: active, its key purged)."""
    session, connection = context.session, context.connection
    session.commit()  # the connection was read: no transaction stays open across the calls
    try:
        account = check_account(context.client, connection.bridge_membership_type_id)
        if not _as_found(context):
            return False
        activate(session, connection, account, now=clock.now())
        with unique_violation(ACTIVE_ACCOUNT):
            session.commit()
        context.account = connection.external_account_id
    except Disconnected:
        return False
    except ExternalCallError as error:
        if error.kind == CallFailure.unauthorized:
            _lose(context, "the external system refused the api-key (401)", clock.now())
        elif _as_found(context):
            connection.last_error = f"key check unfinished: {error}"
            connection.updated_at = clock.now()
    except DomainError as error:
        _lose(context, error.message, clock.now())
    except UniqueViolation:  # another gym's check activated the account first
        session.rollback()
        _lose(context, account_in_use().message, clock.now())
    session.commit()
    return connection.status is ConnectionStatus.active and not context.disconnected


def _as_found(context: OpContext) -> bool:
    """The run's connection read again under its row lock (a transaction left open for the
    write that follows): still connected with the key the run's client holds. Else the
    transaction ends, and the run is to stop (context.disconnected): a disconnect or a new
    key committed since stands, whatever an answer to the old key said."""
    return _goes_on(context, still_connected(context.session, context.connection, context.key))


def _on_account(context: OpContext) -> bool:
    """The run's connection read again under its row lock: still on the external account the
    run's answers came from (connection.on_account). Else, as `_as_found`: the gym was
    switched to another account since (its key replaced, too)."""
    return _goes_on(context, on_account(context.session, context.connection, context.account))


def _goes_on(context: OpContext, found: bool) -> bool:
    """A check's answer; one that failed ends the transaction and stops the run."""
    if not found:
        context.session.commit()
        context.disconnected = True
    return found


def _lose(context: OpContext, message: str, now: datetime) -> None:
    """The key refused (or its check): the connection errs, if it is still as the run found
    it (`_as_found`)."""
    if _as_found(context):
        connection = context.connection
        connection.status = ConnectionStatus.error
        connection.last_error = message
        connection.updated_at = now


class Outcomes:
    """The batch's outcomes, held until one short transaction writes them with the links and
    events they carry (write-behind): at the end of each claimed batch, and whenever the
    throttle makes a call wait, so under a rate limit every op is written before the next call.

    Nothing is lost by holding them: until written, their ops are in flight under our lease.
    Should this process die, or a rollback drop the session's links, those ops go back to
    pending with the attempt counted, and their next attempt searches the external system
    before it sends (as after any crash)."""

    def __init__(self, context: OpContext, summary: RunSummary, clock: Clock) -> None:
        self.context = context
        self.summary = summary
        self.clock = clock
        self.held: list[tuple[SyncOp, dict[str, Any], dict[str, Any] | None]] = []
        self.broken = False  # a rollback dropped what the session held: the batch stops

    def add(self, op: SyncOp, values: dict[str, Any], report: dict[str, Any] | None = None) -> None:
        """`report`: what the attempt did, for its bridge sync op event (none if not run)."""
        self.held.append((op, values, report))

    def write(self) -> None:
        now = self.clock.now()
        owner = self.summary.correlation_id
        if self.held and not _on_account(self.context):
            # Answered by the account the gym was switched away from: its links are not
            # written, and the ops it took are sent again, to the new account (searched first).
            self.drop()
        self.context.write_links()
        written = set(
            queue.record(
                self.context.session,
                [(op, values) for op, values, _ in self.held],
                owner=owner,
                now=now,
            )
        )
        for op in written:
            if op.status is OpStatus.superseded:
                self.summary.withdrawn += 1
            else:
                self.summary.count(op.status)
        emit_many(
            self.context.session,
            EventKind.analytics,
            "bridge.sync_op",
            at=now,
            aggregate_type="bridge_sync_op",
            organization_id=self.context.organization_id,
            payloads={
                str(op.id): {
                    "correlationId": owner,
                    "opId": op.id,
                    "opType": op.op_type.value,
                    "status": op.status.value,
                    "attempts": op.attempts,
                    **report,
                }
                for op, _, report in self.held
                if report is not None and op in written
            },
        )
        self.context.session.commit()
        self.held.clear()
        self.broken = False

    def drop(self) -> None:
        """After a rollback (or a switch of account): the links of the ops that succeeded so
        far are gone, so those ops are rescued (pending, attempt counted: they search first),
        not recorded as done. A failed, parked or released op keeps its outcome (its next
        attempt searches anyway)."""
        now = self.clock.now()
        self.context.forget_writes()
        self.held = [
            (op, queue.rescued(op, now=now), report and {**report, "outcome": "rescued"})
            if values["status"] is OpStatus.succeeded
            else (op, values, report)
            for op, values, report in self.held
        ]
        self.broken = True


def _run_op(
    context: OpContext, op: SyncOp, policy: Policy, throttle: Throttle, sent: Outcomes
) -> None:
    """Send one op and hold its outcome; writes nothing itself unless something broke."""
    now = context.now
    calls_before = throttle.calls
    outcome: str | None = None
    http_status: int | None = None
    if queue.erased(op.op_type, op.payload):
        # Scrubbed by an erasure while an earlier attempt was in flight, whose worker died
        # (rescued): nothing of the person is left to send. Withdrawn, unsent.
        sent.add(op, queue.withdrawn(op, now=now(), payload=op.payload),
                 {"outcome": "withdrawn", "httpStatus": None, "requests": 0})  # fmt: skip
        return
    context.sending = op
    try:
        outcome = perform(context, op)
        values = queue.succeeded(op, now=now())
    except Erased as erased:
        # Erased after the claim, before this call: it never left.
        outcome = "withdrawn"
        values = queue.withdrawn(op, now=now(), payload=erased.payload)
    except Park as parked:
        outcome = parked.issue
        values = queue.parked(op, issue=parked.issue, error=str(parked))
    except Retry as later:
        outcome = "retry"
        values = queue.failed(op, now=now(), error=str(later), ladder=policy.ladder)
    except Defer as later:
        outcome = "deferred"
        values = {**queue.released(op, run_after=later.until), "last_error": str(later)}
    except Disconnected:
        outcome = "disconnected"  # not sent: waits, uncharged, for a new connect
        values = queue.released(op, run_after=now())
    except ExternalCallError as error:
        outcome, http_status = error.kind, error.status
        if error.kind == CallFailure.unauthorized:
            values = queue.released(op, run_after=now())
            _lose(context, "the external system refused the api-key (401)", now())
        elif error.kind == CallFailure.rate_limited:
            pause = error.retry_after or policy.pause_on_429
            throttle.pause(pause)
            values = queue.released(op, run_after=now() + timedelta(seconds=pause))
        elif error.transient:
            values = queue.failed(op, now=now(), error=str(error), ladder=policy.ladder)
        else:
            values = queue.parked(op, issue="rejected", error=str(error))
    except Exception as error:  # a bug in one op must not stop the others
        logger.exception("bridge op %s failed unexpectedly", op.id)
        if isinstance(error, SQLAlchemyError):  # only a database error needs the rollback
            context.session.rollback()
            sent.drop()
        outcome = "internal_error"
        values = queue.failed(op, now=now(), error=type(error).__name__, ladder=policy.ladder)
    finally:
        context.sending = None
    report = {"outcome": outcome, "httpStatus": http_status,
              "requests": throttle.calls - calls_before}  # fmt: skip
    sent.add(op, values, report)


def _polls(context: OpContext, clock: Clock, summary: RunSummary) -> dict[str, Any]:
    session, connection = context.session, context.connection
    try:
        result = serve_polls(
            session,
            connection,
            context.client,
            clock.now,
            apply=lambda noticed: inbound.apply(session, connection, noticed, clock.now()),
            as_read=lambda: _on_account(context),
        )
        if context.disconnected:
            summary.stopped = "disconnected"
            return {}
        if "schedule" in result:
            result["schedule"]["matched"] = classes.match_window(
                session, connection, now=clock.now()
            )
            session.commit()
        return result
    except Disconnected:
        session.rollback()
        summary.stopped = "disconnected"
        return {}
    except ExternalCallError as error:
        session.rollback()
        if error.kind == CallFailure.unauthorized:
            _lose(context, "the external system refused the api-key (401)", clock.now())
            summary.stopped = "unauthorized"
        elif _as_found(context):  # stays due: the next run polls again
            connection.last_error = f"poll: {error}"
            if error.kind == CallFailure.rate_limited:
                summary.stopped = "rate_limited"
        if context.disconnected:
            summary.stopped = "disconnected"
        session.commit()
        return {"error": str(error)}


def _record_run(
    session: Session, organization_id: uuid.UUID, summary: RunSummary, now: datetime
) -> None:
    """The bridge sync run event (a correlation id, counts, no personal data) and the
    connection's last run, for `gymctl bridge status`."""
    session.rollback()
    run = {**summary.as_dict(), "at": now.isoformat()}
    connection = find_connection(session, organization_id)
    if connection is not None and (summary.claimed or summary.polls or summary.rescued):
        connection.last_run = run
        emit(
            session,
            EventKind.analytics,
            "bridge.sync_run",
            at=now,
            aggregate_type="integration_connection",
            aggregate_id=connection.id,
            organization_id=organization_id,
            payload={"correlationId": summary.correlation_id, **summary.as_dict()},
        )
    session.commit()


# -- which organizations have work ----------------------------------------------------------


def due_organizations(session: Session, *, now: datetime) -> list[uuid.UUID]:
    """Organizations with a claimable head op, a due poll or reconcile, or a pending key."""
    head_due = exists().where(
        SyncOp.organization_id == IntegrationConnection.organization_id,
        SyncOp.status.in_(WAITING),
        SyncOp.run_after <= now,
        ~queue.blocked(),
    )
    active = and_(
        IntegrationConnection.status == ConnectionStatus.active,
        or_(
            IntegrationConnection.schedule_poll_due_at <= now,
            IntegrationConnection.reconcile_due_at <= now,
            head_due,
        ),
    )
    pending = and_(
        IntegrationConnection.status == ConnectionStatus.pending,
        IntegrationConnection.updated_at <= now - PENDING_CHECK_EVERY,
    )
    session.connection(execution_options=READ_ONLY)  # SQLite: no write lock for a read
    rows = session.scalars(
        select(IntegrationConnection.organization_id).where(or_(active, pending))
    )
    result = list(rows)
    session.rollback()
    return result


# -- the organization lock --------------------------------------------------------------------


def organization_lock(
    engine: Engine, organization_id: uuid.UUID, *, wait_seconds: float = 0.0
) -> AbstractContextManager[Connection | None]:
    """A connection holding the organization's dispatch lock, or None if another holds it
    (after waiting up to `wait_seconds`). Commits on the connection keep the lock."""
    return session_lock(engine, f"bridge:dispatch:{organization_id}", wait_seconds=wait_seconds)


# -- the process ----------------------------------------------------------------------------


def process_label() -> str:
    """Which dispatcher made a run (host and process id), as events and `status` show it."""
    return f"{socket.gethostname()}:{os.getpid()}"[:64]


def run_dispatcher(
    engine: Engine,
    settings: Settings,
    policy: Policy,
    *,
    runner: str,
    once: bool = False,
    stop: threading.Event | None = None,
    clock: Clock = default_clock,
) -> list[RunSummary]:
    """Serve due organizations with up to `policy.workers` threads until `stop`; with `once`,
    serve each organization due at the start (or becoming due meanwhile) once and return.

    Which organizations are due is asked when the last answer has been served or is
    `ASK_AGAIN_AFTER` old, not each time a worker frees: asking scans every connection, and
    asked per finished run it cost PostgreSQL more than the claims (measured). The answer is
    shuffled, so dispatcher processes rarely reach for the same organization; one another
    process served meanwhile costs an empty run."""
    stop = stop or threading.Event()
    summaries: list[RunSummary] = []
    busy: dict[uuid.UUID, Future[RunSummary | None]] = {}
    attempted: set[uuid.UUID] = set()
    candidates: list[uuid.UUID] = []
    asked_at = 0.0
    # Organizations another dispatcher held when we reached for them, left alone for a moment:
    # reaching again at once would spin on their locks while that dispatcher works.
    elsewhere: dict[uuid.UUID, float] = {}
    connections = ConnectionPool(settings.bridge_api_url or "")
    with connections, ThreadPoolExecutor(policy.workers, thread_name_prefix="bridge") as pool:
        while not stop.is_set():
            for organization_id, future in list(busy.items()):
                if future.done():
                    busy.pop(organization_id)
                    result = future.result()
                    if result is not None:
                        summaries.append(result)
                    else:
                        elsewhere[organization_id] = time.monotonic() + policy.idle_seconds
            if len(busy) < policy.workers and (
                not candidates or time.monotonic() - asked_at > ASK_AGAIN_AFTER
            ):
                with Session(engine) as session:
                    due = due_organizations(session, now=clock.now())
                asked_at = time.monotonic()
                candidates = [
                    o for o in due
                    if not (once and o in attempted) and elsewhere.get(o, 0.0) <= asked_at
                ]  # fmt: skip
                random.shuffle(candidates)
                if once and not busy and not candidates:
                    break
            while candidates and len(busy) < policy.workers:
                organization_id = candidates.pop()
                if organization_id in busy:
                    continue
                attempted.add(organization_id)
                busy[organization_id] = pool.submit(
                    _serve, engine, organization_id, settings, policy, runner, clock, stop,
                    connections,
                )  # fmt: skip
            if busy:
                wait(busy.values(), timeout=policy.idle_seconds, return_when=FIRST_COMPLETED)
            else:
                stop.wait(policy.idle_seconds)
        for future in busy.values():
            result = future.result()
            if result is not None:
                summaries.append(result)
    return summaries


def _serve(
    engine: Engine,
    organization_id: uuid.UUID,
    settings: Settings,
    policy: Policy,
    runner: str,
    clock: Clock,
    stop: threading.Event,
    connections: ConnectionPool,
) -> RunSummary | None:
    try:
        with organization_lock(engine, organization_id) as connection:
            if connection is None:
                return None  # another dispatcher serves it
            with Session(bind=connection, expire_on_commit=False) as session:
                return drain(
                    session,
                    organization_id,
                    settings=settings,
                    policy=policy,
                    runner=runner,
                    clock=clock,
                    stop=stop,
                    pool=connections,
                )
    except Exception:
        logger.exception("bridge dispatch of organization %s failed", organization_id)
        return None
