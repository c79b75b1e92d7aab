"""Roster imports over HTTP: the request checks and queues the rows, the daemons register them.

A roster CSV may be 5 MB, tens of thousands of rows, and registering a row takes about 6 ms
(its reads, its user, membership, audit and event rows, and for a login the request asking the
person to link, emailed by a sweep once its chunk commits): one request registered some 4,500 rows
before gunicorn's 30 s ended it and its transaction rolled back, so a large gym could not
import at all. Now the request does what is refused up front (each row's syntax, the tier's
cap on active members: spec A 8) and stores the rows; the `member_imports` daemon job
registers them CHUNK_ROWS a transaction, each chunk's outcomes stored with it. The CLI's
import queues its rows the same way and runs the same steps itself (import_here). The queue's
rules (turns, retries, the asker's rights at each step) are gymctl.access.staff_queue's.

The cap is checked again with each chunk: members who joined meanwhile can fill it, and the
import then stops there (member_cap_exceeded), keeping what it registered.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access import codes, staff_queue
from gymctl.access.erased import is_erased_address
from gymctl.access.invitations import Outreach
from gymctl.access.permissions import Action, Module
from gymctl.access.registrations import (
    OUTCOMES,
    ImportResults,
    Registrar,
    check_cap,
    hold_registrations,
    import_row,
    imports_in_flight,
    plan_import,
)
from gymctl.db import READ_ONLY, organization_row
from gymctl.errors import DomainError, not_found, too_many_requests, unprocessable
from gymctl.models import MemberImport, MemberImportRow, Membership

logger = logging.getLogger(__name__)

CHUNK_ROWS = 50  # a transaction's rows: about 0.3 s of the daemon's, and its locks
CHUNK_SECONDS = 2.0  # ... or fewer, when the rows are slow (a loaded database)
MAX_ROWS = 50_000  # an import's rows: the request checks and stores them in a few seconds
UNFINISHED_PER_ORGANIZATION = 3
QUEUED, FINISHED = staff_queue.QUEUED, staff_queue.FINISHED
FAILED = "failed"  # an import stopped short; a row whose own step failed four times
ERASED = "erased"  # a row whose person the gym erased while it waited


def queue_import(
    session: Session,
    registrar: Registrar,
    actor: Membership,
    rows: list[dict[str, str]],
    *,
    now: datetime,
) -> MemberImport:
    """Check and queue the rows; the caller commits. Refused up front (the cap:
    member_cap_exceeded, nothing queued), counting the rows the gym's other queued
    imports have yet to register; rows refused by themselves are listed."""
    organization = registrar.organization
    if len(rows) > MAX_ROWS:
        raise unprocessable(
            codes.IMPORT_INVALID, f"an import takes at most {MAX_ROWS:,} rows: split the roster"
        )
    # Serializes the gym's imports (HTTP's and the CLI's): the count of unfinished imports and
    # of their waiting rows, then the insert.
    unfinished, waiting = imports_in_flight(session, organization.id)
    if len(unfinished) >= UNFINISHED_PER_ORGANIZATION:
        raise too_many_requests(
            codes.MEMBER_IMPORT_QUEUE_FULL,
            f"{len(unfinished)} imports of this gym are still running: ask again when one has "
            "finished",
        )
    plan = plan_import(session, organization, rows, waiting=waiting)
    job = MemberImport(
        id=ids.new_id(),
        organization_id=organization.id,
        actor_membership_id=actor.id,
        ip=registrar.ip,
        path=registrar.path[:300],
        total=len(plan.rows),
        done=0,
        invalid=plan.invalid,
        status=QUEUED if plan.rows else FINISHED,
        failures=0,
        created_at=now,
        finished_at=None if plan.rows else now,
    )
    session.add(job)
    session.flush()
    if plan.rows:
        session.execute(
            insert(MemberImportRow),
            [
                {"import_id": job.id, "position": n, "email": email, "name": name}
                for n, (email, name) in enumerate(plan.rows)
            ],
        )
    return job


def find_import(session: Session, organization_id: uuid.UUID, import_id: uuid.UUID) -> MemberImport:
    job = organization_row(session, MemberImport, organization_id, import_id)
    if job is None:
        raise not_found(codes.MEMBER_IMPORT_NOT_FOUND, "no such import")
    return job


def import_view(session: Session, job: MemberImport) -> dict[str, Any]:
    """An import as the API and the CLI show it: its results so far (the rows done, by outcome, in
    CSV order), the rows the gym erased meanwhile and the rows that failed by themselves when
    there are any, and why the import stopped short when it did."""
    results = ImportResults(invalid=job.invalid)
    erased: list[str] = []
    failed: list[dict[str, str]] = []
    done = session.execute(
        select(MemberImportRow.outcome, MemberImportRow.email)
        .where(MemberImportRow.import_id == job.id, MemberImportRow.outcome.is_not(None))
        .order_by(MemberImportRow.position)
    )
    for outcome, email in done:
        if outcome in OUTCOMES:
            results.add(outcome, email)
        elif outcome == ERASED:
            erased.append(email)
        else:
            failed.append({"email": email, "reason": outcome})
    view = results.as_dict()
    if erased:
        view["members"]["erased"] = erased
    if failed:
        view["members"]["failed"] = failed
    return {
        "id": str(job.id),
        "organizationId": str(job.organization_id),
        "status": job.status,
        "total": job.total,
        "done": job.done,
        "results": view,
        "error": {"code": job.error_code} if job.error_code else None,
        "createdAt": job.created_at,
        "finishedAt": job.finished_at,
    }


def import_here(
    factory: sessionmaker[Session],
    registrar: Registrar,
    actor_membership_id: uuid.UUID,
    rows: list[dict[str, str]],
    *,
    now: Callable[[], datetime],
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The CLI's import: queued as the HTTP door queues one (refused up front the same way),
    then registered here a chunk at a time with the daemon's own step, each chunk its own
    transaction. One transaction for the whole roster held the gym's locks, and on the embedded
    default the database's one write lock, for all of it: 1,200 rows kept every other writer
    of every gym out for 8 s, 4,000 past the 30 s busy timeout (the API answered 503). A step
    that fails waits for its retry here, as the daemons' job would (a lost try counted as
    theirs is); a daemon may take a chunk meanwhile (the import's lock takes turns). The import
    as the API shows it (import_view); `progress(done, total)` after each chunk."""
    with factory() as session:
        actor = session.get(Membership, actor_membership_id)
        job = queue_import(session, registrar, actor, rows, now=now())
        session.commit()
        import_id, total = job.id, job.total
    while True:
        with factory() as session:
            session.connection(execution_options=READ_ONLY)  # a look: no write lock
            job = session.get(MemberImport, import_id)
            if progress is not None:
                progress(job.done, total)
            if job.status != QUEUED:
                return import_view(session, job)
            retry_at = job.retry_at
        at = now()
        if retry_at is not None and retry_at > at:
            sleep((retry_at - at).total_seconds())
            at = max(now(), retry_at)
        try:
            import_next(factory, registrar.outreach, import_id, now=at)
        except Exception:
            logger.exception("import %s: a step failed", import_id)
            _lost_try(factory, import_id, now=at)


# --- The daemon's side -------------------------------------------------------------------------


def work_imports(
    factory: sessionmaker[Session],
    outreach: Outreach,
    *,
    now: datetime,
    budget_seconds: float = staff_queue.PASS_BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """One pass: the imports due take turns, a chunk each (gymctl.access.staff_queue)."""
    done = staff_queue.run_pass(
        factory,
        MemberImport,
        lambda import_id: import_next(factory, outreach, import_id, now=now),
        lambda import_id: _lost_try(factory, import_id, now=now),
        now=now,
        budget_seconds=budget_seconds,
        monotonic=monotonic,
    )
    return done.summary("imports")


def import_next(
    factory: sessionmaker[Session],
    outreach: Outreach,
    import_id: uuid.UUID,
    *,
    now: datetime,
    monotonic: Callable[[], float] = time.monotonic,
) -> Counter[str] | None:
    """Register the import's next rows and store their outcomes, in one transaction (a step of
    gymctl.access.staff_queue), each row in a savepoint of its own: up to CHUNK_ROWS rows, or
    CHUNK_SECONDS of work (the transaction's locks, on the embedded default the database's
    write lock, are held meanwhile). A row whose own statements fail keeps the rows before it
    and is tried again; its fourth failure is its outcome, and the rows after it go on. A
    login's row asks the person to link: the `link_requests` sweep emails it once the chunk
    is committed, so an import reads the same whether the address has a login or the mail
    server answers."""
    with factory() as session:
        job = _locked(session, import_id, now)
        if job is None:
            return None
        try:
            organization, actor = staff_queue.check_asker(
                session, job.organization_id, job.actor_membership_id, Module.members, Action.manage
            )
        except DomainError as error:
            return _stopped(session, job, error.code, now=now)
        registrar = Registrar(organization, actor.user_id, job.ip, job.path, outreach)
        rows = list(
            session.scalars(
                select(MemberImportRow)
                .where(MemberImportRow.import_id == job.id, MemberImportRow.position >= job.done)
                .order_by(MemberImportRow.position)
                .limit(CHUNK_ROWS)
            )
        )
        try:
            hold_registrations(session, organization.id)  # members registered meanwhile counted
            check_cap(
                session, organization, [r.email for r in rows if not is_erased_address(r.email)]
            )
        except DomainError as error:  # the cap, filled since the import was asked for
            return _stopped(session, job, error.code, now=now)
        done: Counter[str] = Counter()
        started = monotonic()
        for row in rows:
            if done and monotonic() - started >= CHUNK_SECONDS:
                break
            try:
                with session.begin_nested():
                    row.outcome = _register(session, registrar, row, now=now)
            except DomainError as error:
                row.outcome = error.code  # a refusal of the row itself
            except SQLAlchemyError:
                # The row's own statements failed and its savepoint rolled back: the rows before
                # it stay. It is tried again, and its fourth failure is its outcome. A
                # connection gone fails the commit: a lost try.
                logger.exception("import %s: row %d failed", job.id, row.position)
                if not staff_queue.failed_try(job, now=now):
                    done[staff_queue.DEFERRED] += 1
                    break
                row.outcome = FAILED
            except Exception:
                # A defect met by this row alone must not hold the rest of the roster back.
                logger.exception("import %s: row %d failed", job.id, row.position)
                row.outcome = FAILED
            done[row.outcome] += 1
            job.done += 1
            staff_queue.stepped(job)
        if job.done >= job.total or not rows:
            job.status, job.finished_at = FINISHED, now
        session.commit()
    return done


def _register(
    session: Session, registrar: Registrar, row: MemberImportRow, *, now: datetime
) -> str:
    if is_erased_address(row.email):
        return ERASED  # the gym erased the person while the row waited
    return import_row(session, registrar, row.email, row.name, now=now)


def _locked(session: Session, import_id: uuid.UUID, now: datetime) -> MemberImport | None:
    """The import under its lock, if it has rows to register now."""
    job = session.scalar(
        select(MemberImport)
        .where(MemberImport.id == import_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if job is None or job.status != QUEUED:
        return None
    if job.retry_at is not None and job.retry_at > now:
        return None
    return job


def _stopped(session: Session, job: MemberImport, code: str, *, now: datetime) -> Counter[str]:
    """The import ends here: what it registered stays, the rest is not imported."""
    job.status, job.error_code, job.finished_at = FAILED, code, now
    staff_queue.stepped(job)
    session.commit()
    return Counter([code])


def _lost_try(
    factory: sessionmaker[Session], import_id: uuid.UUID, *, now: datetime
) -> Counter[str] | None:
    """Counts a try whose transaction was lost (its commit, the database, a defect outside the
    rows), in a transaction of its own, blaming no row; the fourth stops the import (failed),
    keeping the rows it registered."""
    with factory() as session:
        job = _locked(session, import_id, now)
        if job is None:
            return None
        if staff_queue.failed_try(job, now=now):
            return _stopped(session, job, FAILED, now=now)
        session.commit()
    return Counter([staff_queue.DEFERRED])
