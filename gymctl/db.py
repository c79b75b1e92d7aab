"""Engine, sessions, transactions and locks.

One session per request, command or job, committed at the edge (`session_scope`); domain code
flushes but never commits. Locks are PostgreSQL's advisory locks: transaction-level
(`advisory_lock`), or session-level on a connection of its own for work that commits as it goes
(`session_lock`, `job_lock`). On the embedded SQLite default a process lock stands in for the
first (the transaction's write lock excludes other processes) and a file lock beside the
database for the others (the API, the daemons and operators' commands are processes of their
own on one file). Linux and macOS only (flock); Windows is not a target.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from gymctl.clock import day_n_ends
from gymctl.config import get_settings

logger = logging.getLogger("gymctl.db")


def is_postgres(bind: Engine | Session) -> bool:
    return (
        bind.get_bind().dialect.name == "postgresql"
        if isinstance(bind, Session)
        else (bind.dialect.name == "postgresql")
    )


def upsert_for(session: Session) -> Callable[..., Any]:
    """The engine's own INSERT, the one with ON CONFLICT (both dialects spell it alike)."""
    return postgresql.insert if is_postgres(session) else sqlite.insert


# url -> the process's engine for it; an engine -> its session factory. Kept until released.
_engines: dict[str, Engine] = {}
_sessionmakers: dict[Engine, sessionmaker[Session]] = {}
_engines_guard = threading.Lock()


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url` (default: the configured database, read now)."""
    url = url or get_settings().resolved_database_url
    with _engines_guard:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = _engine(url)
        return engine


def release_engine(url: str) -> None:
    """Dispose of the engine for `url` and forget it and its session factory: for a database
    its caller drops (the forecast's scratch file), so the process keeps nothing of it."""
    with _engines_guard:
        engine = _engines.pop(url, None)
        if engine is not None:
            _sessionmakers.pop(engine, None)
    if engine is not None:
        engine.dispose()


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, hide_parameters=True
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        event.listen(engine, "commit", _sqlite_end)
        event.listen(engine, "rollback", _sqlite_end)
        event.listen(engine.pool, "reset", _sqlite_reset)
        event.listen(engine.pool, "invalidate", _sqlite_reset)
        return engine
    # hide_parameters: a database error's message (logged, sent to error tracking) never
    # carries the statement's values, such as a member's email.
    return create_engine(
        url, pool_pre_ping=True, pool_size=10, max_overflow=10, hide_parameters=True
    )


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # Let SQLAlchemy emit BEGIN itself (pysqlite's own handling breaks SAVEPOINT).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
    # SQLite has no time zones: the day counting SQL (gymctl.billing.days) calls Python's.
    dbapi_connection.create_function("gymctl_day_n_ends", 3, _sqlite_day_n_ends, deterministic=True)


@functools.lru_cache(maxsize=65536)
def _sqlite_day_n_ends(since: str | None, days: int | None, timezone: str | None) -> str | None:
    """day_n_ends over SQLite's stored text ("YYYY-MM-DD HH:MM:SS.ffffff", UTC), answered in
    the same format so it compares with bound instants as text. Remembered: the hourly
    lifecycle asks it again for every debt row, whose start does not change (5 us a call)."""
    if since is None or days is None:
        return None
    at = datetime.fromisoformat(since).replace(tzinfo=UTC)
    ends = day_n_ends(at, int(days), timezone or "UTC")
    return ends.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


READ_ONLY = {"gymctl_read_only": True}
# An engine's option: a file only this process's one thread writes (the forecast's scratch
# copy). Its writer waits for no one, so it is never paced.
UNSHARED = {"gymctl_unshared": True}
# A statement's option: a write that only records when a sweep last looked (it changes what no
# sweep decides), which the forecast does not count as a change that makes its jobs run again.
BOOKKEEPING = {"gymctl_bookkeeping": True}


class SecondWriterError(RuntimeError):
    """A thread began a second write transaction on the embedded default while its first one
    still holds SQLite's write lock: the second would wait on the first for the whole busy
    timeout and then fail. One unit of work, one transaction (STYLE 13): a helper that must
    write joins the caller's session, or the caller ends its transaction before handing over."""


# DBAPI connection id -> thread id, for every connection holding SQLite's write lock.
_sqlite_writers: dict[int, int] = {}
_sqlite_writers_guard = threading.Lock()


class _WriterPace(threading.local):
    """One thread's share of SQLite's write lock over the current window."""

    def __init__(self) -> None:
        self.window_start = 0.0
        self.held = 0.0
        self.began: dict[int, float] = {}  # DBAPI connection id -> when its write lock was taken


_pace = _WriterPace()
# SQLite's lock is not fair: a waiter (another process, another thread) sleeps in its busy
# handler and polls, at most 100 ms apart, while a loop that commits and begins again takes the
# lock back within microseconds. A daemon working a queue a unit per transaction (a bulk
# invite's addresses) held it 95% of the time and every other writer waited out its 30 s
# busy_timeout ("database is locked"). So a thread that held the lock more than half of the
# last second pauses longer than one poll before it takes it again: every waiter polls in the
# pause. A thread that writes now and then (a request, a test) never pauses.
PACE_WINDOW_SECONDS = 1.0
PACE_SHARE = 0.5
PACE_PAUSE_SECONDS = 0.15


def _pace_writer() -> None:
    elapsed = time.monotonic() - _pace.window_start
    if elapsed >= PACE_WINDOW_SECONDS:
        if _pace.held > PACE_SHARE * elapsed:
            time.sleep(PACE_PAUSE_SECONDS)
        _pace.window_start, _pace.held = time.monotonic(), 0.0


_CHANGES = "gymctl_changes_at_begin"  # connection.info: SQLite's total_changes at BEGIN


def _sqlite_begin(connection) -> None:
    # IMMEDIATE takes the write lock up front: concurrent writers wait (busy_timeout) instead of
    # failing on a lock upgrade. The embedded default trades concurrency for that safety. A
    # session that only reads (READ_ONLY execution options) begins deferred and never waits on
    # a writer (WAL).
    options = connection.get_execution_options()
    if options.get("gymctl_read_only"):
        connection.exec_driver_sql("BEGIN")
        return
    dbapi = id(connection.connection.dbapi_connection)
    thread = threading.get_ident()
    with _sqlite_writers_guard:
        if any(t == thread and c != dbapi for c, t in _sqlite_writers.items()):
            raise SecondWriterError(
                "this thread already holds the embedded database's write lock in another "
                "transaction; a second one would wait on it (end the first, or join it)"
            )
    shared = not options.get("gymctl_unshared")  # others may wait for it: pace (UNSHARED)
    if shared:
        _pace_writer()
    connection.exec_driver_sql("BEGIN IMMEDIATE")
    connection.info[_CHANGES] = connection.connection.dbapi_connection.total_changes
    if shared:
        _pace.began[dbapi] = time.monotonic()  # held from here (waiting for it is not holding)
    with _sqlite_writers_guard:
        _sqlite_writers[dbapi] = thread


def _sqlite_end(connection) -> None:
    began = _pace.began.pop(id(connection.connection.dbapi_connection), None)
    if began is not None:
        _pace.held += time.monotonic() - began
    with _sqlite_writers_guard:
        _sqlite_writers.pop(id(connection.connection.dbapi_connection), None)


def _sqlite_reset(dbapi_connection, _record, _state) -> None:
    # A connection returned to the pool (or thrown away) with its transaction still open.
    with _sqlite_writers_guard:
        _sqlite_writers.pop(id(dbapi_connection), None)


def release_for_outside_call(session: Session) -> None:
    """Before a call to an outside system (the card provider), on the embedded default: a
    transaction that has written nothing ends, so the database's one write lock is not held
    for the call; every writer of every process waited on it (a request, a command, the
    daemons' jobs, which failed at the 30 s busy timeout). One that wrote keeps it: its
    caller stores its attempt and commits before the call. PostgreSQL holds only the rows a
    transaction locked, which are its claim: its transactions stay as they are. Written is
    read from SQLite's own count of changed rows (since the BEGIN, _sqlite_begin): watching
    each statement from Python cost the forecast a quarter of its time. One that took an
    advisory lock keeps it too: the lock is the transaction's to its end (its caller
    serialized on it), and ending the transaction would free it mid-work."""
    if is_postgres(session) or not session.in_transaction():
        return
    if session.new or session.dirty or session.deleted:
        return
    if session.info.get(_HELD):
        return  # an advisory lock is the transaction's to its end: ending it here would free it
    connection = session.connection()
    if connection.connection.dbapi_connection.total_changes != connection.info.get(_CHANGES):
        return
    session.rollback()


_WROTE = "gymctl_transaction_wrote"  # session.info: the open transaction has written


@event.listens_for(Session, "after_flush")
def _flushed(session: Session, _context: Any) -> None:
    session.info[_WROTE] = True


@event.listens_for(Session, "do_orm_execute")
def _executed(state: Any) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        state.session.info[_WROTE] = True


@event.listens_for(Session, "after_transaction_end")
def _ended(session: Session, transaction: Any) -> None:
    if transaction.parent is None:
        session.info.pop(_WROTE, None)


def transaction_wrote(session: Session) -> bool:
    """The session's open transaction holds writes (flushed or not): a helper that commits
    would commit its caller's writes with its own, and the caller's later failure could no
    longer take them back (one unit of work, one transaction)."""
    return bool(session.new or session.dirty or session.deleted or session.info.get(_WROTE))


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    engine = engine or get_engine()
    with _engines_guard:
        factory = _sessionmakers.get(engine)
        if factory is None:
            factory = _sessionmakers[engine] = sessionmaker(bind=engine, expire_on_commit=False)
        return factory


@contextmanager
def session_scope(factory: sessionmaker[Session] | None = None) -> Iterator[Session]:
    """A unit of work: commit when the block ends normally, roll back on any error."""
    session = (factory or session_factory())()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def each_committed(
    factory: sessionmaker[Session],
    keys: list[Any],
    work: Callable[[Session, Any], str],
    counts: dict[str, int],
    *,
    what: str,
) -> dict[str, int]:
    """`work` for each key in a transaction of its own, its outcome (a key of `counts`) counted:
    "failed", or an error (logged: one key's fault holds back no other), rolls that key's
    transaction back, to be retried next run; any other outcome commits it. A run stopped
    midway keeps what it committed (a member's email or push is not sent again)."""
    for key in keys:
        with factory() as session:
            try:
                outcome = work(session, key)
            except Exception:
                logger.exception("%s %s failed, retried next run", what, key)
                outcome = "failed"
            if outcome == "failed":
                session.rollback()
            else:
                session.commit()
        counts[outcome] += 1
    return counts


Row = TypeVar("Row")


def organization_row(
    session: Session, model: type[Row], organization_id: Any, row_id: Any, *, lock: bool = False
) -> Row | None:
    """A row of `model` only if it belongs to the organization (None otherwise: the caller
    answers its own 404, so another gym's ids are indistinguishable from missing ones). `lock`
    takes its row lock and reads it fresh."""
    query = select(model).where(model.id == row_id, model.organization_id == organization_id)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    return session.scalar(query)


def locked_row(session: Session, model: type[Row], row_id: Any) -> Row | None:
    """The row of `model` with that id, under its row lock and read as it stands: after an
    outside call made with no transaction open (release_for_outside_call), or a wait for
    another writer, what this session read before is stale."""
    return session.scalar(
        select(model)
        .where(model.id == row_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for an advisory lock name (same in every process)."""
    return int.from_bytes(
        hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True
    )


_process_locks: dict[str, threading.Lock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(name: str) -> threading.Lock:
    with _process_locks_guard:
        return _process_locks.setdefault(name, threading.Lock())


def advisory_lock(session: Session, name: str, *, wait: bool = True) -> bool:
    """Take the lock `name` until the session's transaction ends; False if not `wait` and it is
    held.

    PostgreSQL: pg_advisory_xact_lock / pg_try_advisory_xact_lock, released by commit or
    rollback. SQLite (embedded default): a process lock released the same way, and no lock
    file: every caller takes it in a write transaction and does its locked work there, which
    holds the database's one write lock from its BEGIN IMMEDIATE to its end, so no other
    process's writer runs beside it. Across processes `wait=False` thus answers True and the
    rival waits on the write lock instead (the runner then finds the tick's job_runs row). A
    lock file would leave a file per name (a rate limit's keys are unbounded), and one taken
    before the write lock, with a rival holding that lock waiting for the file, stalls both
    for the 30 s busy timeout. Not for a READ_ONLY transaction: it holds no write lock.
    """
    if is_postgres(session):
        fn = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        result = session.execute(text(f"SELECT {fn}(:key)"), {"key": lock_key(name)}).scalar()
        return True if wait else bool(result)
    if _held_here(session, name):
        return True
    lock = _process_lock(name)
    if not lock.acquire(blocking=wait):
        return False
    _until_transaction_end(session, name, lock.release)
    return True


# session.info: the locks the embedded default took for the session's transaction, by name,
# with how to release each.
_HELD = "gymctl_process_locks"


def _held_here(session: Session, name: str) -> bool:
    """The session's transaction holds the lock `name` already: a second take is the first
    (PostgreSQL's advisory locks stack too)."""
    return session.in_transaction() and name in session.info.get(_HELD, {})


def _until_transaction_end(session: Session, name: str, release: Callable[[], Any]) -> None:
    """A lock the embedded default took for the session's transaction, released at its end."""
    if not session.in_transaction():
        session.begin()  # so that commit, rollback or close ends a transaction and releases
    if _HELD not in session.info:
        session.info[_HELD] = {}
        # The listener stays for the session's life: removing one while it runs is not allowed.
        event.listen(session, "after_transaction_end", _release_process_locks)
    session.info[_HELD][name] = release


@contextmanager
def session_lock(
    bind: Engine | Connection, name: str, *, wait_seconds: float = 0.0
) -> Iterator[Connection | None]:
    """A connection holding the lock `name` for the block, or None if another holds it (after
    waiting up to `wait_seconds`), for work that commits as it goes. PostgreSQL: a
    session-level advisory lock (pg_try_advisory_lock), so no transaction stays open while the
    work runs (an idle_in_transaction_session_timeout cannot end it halfway) and the lock goes
    with the server session if the process dies; commits on the connection keep it. The
    embedded default: the process lock `advisory_lock` takes for the same name, and the
    name's lock file for other processes (`_named_lock_held`). `bind`: an engine (a
    connection of its own, closed after), or a connection its caller keeps (the lock is taken
    and released on it; its settings and a transaction open there are its caller's)."""
    engine = bind.engine
    borrowed = isinstance(bind, Connection)
    deadline = time.monotonic() + wait_seconds
    if engine.dialect.name != "postgresql":
        with _named_lock_held(engine, name, wait_seconds) as held:
            if not held:
                yield None
            elif borrowed:
                yield bind
            else:
                with engine.connect() as connection:
                    yield connection
        return
    connection = bind if borrowed else engine.connect()
    ends = not connection.in_transaction()  # else the caller's, left to it
    key = lock_key(name)
    # An idle_session_timeout (PostgreSQL 14+) would end this idle session, and the lock with it.
    keeps_idle = not borrowed and connection.dialect.server_version_info >= (14,)
    try:
        if keeps_idle:
            connection.execute(text("SET idle_session_timeout = 0"))
            connection.commit()
        while True:
            held = connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            if ends:
                connection.commit()
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not held:
            yield None
            return
        try:
            yield connection
        finally:
            _unlock(connection, key, name, keeps_idle=keeps_idle, ends=ends)
    finally:
        if not borrowed:
            connection.close()


def transaction_lock(session: Session, name: str, *, wait_seconds: float) -> bool:
    """The lock `name` that session_lock's holders take, held by the session's transaction to
    its end; False if another held it all of `wait_seconds`. PostgreSQL: the transaction-level
    advisory lock (pg_try_advisory_xact_lock, tried until the deadline). The embedded default:
    session_lock's process lock and the name's lock file (its holders may be other processes),
    released when the transaction ends. Unlike `advisory_lock`, the holders it waits for are
    not writers: a session_lock holder that waits for this transaction's write lock meanwhile
    would stall both (up to `wait_seconds`)."""
    deadline = time.monotonic() + wait_seconds
    if is_postgres(session):
        key = {"key": lock_key(name)}
        while not session.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), key).scalar():
            if time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_POLL_SECONDS)
        return True
    if _held_here(session, name):
        return True
    held = ExitStack()
    if not held.enter_context(_named_lock_held(session.get_bind().engine, name, wait_seconds)):
        held.close()
        return False
    _until_transaction_end(session, name, held.close)
    return True


@contextmanager
def job_lock(engine: Engine, name: str) -> Iterator[bool]:
    """session_lock for a holder that needs no connection of its own (a daemon's job that
    commits as it goes): whether it is held. The embedded default takes its process and file
    locks alone; a pooled connection held idle for the whole job, in each of the scheduler's
    threads, with each job's own, ran the pool dry (QueuePool limit reached)."""
    if engine.dialect.name != "postgresql":
        with _named_lock_held(engine, name, 0.0) as held:
            yield held
        return
    with session_lock(engine, name) as connection:
        yield connection is not None


LOCK_POLL_SECONDS = 0.05  # how often a waiter for another process's lock file tries again


@contextmanager
def _named_lock_held(engine: Engine, name: str, wait_seconds: float) -> Iterator[bool]:
    """The embedded default's lock `name`, waiting up to `wait_seconds`: the process lock (the
    process's threads), then the name's lock file (every process on the database file: the
    API, two daemons, an operator running the same sweep by hand; a threading lock alone let
    each of them run it at once). The kernel drops a dead process's flock, so a crashed
    daemon leaves nothing held. An in-memory database is one process's own: no file."""
    deadline = time.monotonic() + wait_seconds
    lock = _process_lock(name)
    if not (lock.acquire(timeout=wait_seconds) if wait_seconds > 0 else lock.acquire(False)):
        yield False
        return
    try:
        path = _lock_file(engine, name)
        descriptor = None if path is None else _flock(path, deadline)
        if path is not None and descriptor is None:
            yield False
            return
        try:
            yield True
        finally:
            if descriptor is not None:
                os.close(descriptor)  # its last descriptor closed: the flock is released
    finally:
        lock.release()


def _lock_file(engine: Engine, name: str) -> Path | None:
    """`<database file>.locks/<sha256 of name>.lock`; None for an in-memory database."""
    database = engine.url.database
    if not database or database == ":memory:" or engine.url.query.get("mode") == "memory":
        return None
    digest = hashlib.sha256(name.encode()).hexdigest()
    return Path(f"{os.path.abspath(database)}.locks") / f"{digest}.lock"


def _flock(path: Path, deadline: float) -> int | None:
    """A descriptor holding the exclusive flock of `path`, or None if another open file holds
    it past `deadline`. flock, not lockf: its lock belongs to the open file, so two opens in
    one process exclude each other too. The files stay (removing one races its next taker)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return descriptor
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                time.sleep(min(LOCK_POLL_SECONDS, remaining))
    except BaseException:
        os.close(descriptor)
        raise
    os.close(descriptor)
    return None


def _unlock(connection: Connection, key: int, name: str, *, keeps_idle: bool, ends: bool) -> None:
    """Release a session_lock; a lock found gone was lost while held (its server session
    ended: another holder may have run meanwhile), which is logged. A connection that cannot
    be unlocked is thrown away, never returned to the pool holding the lock. `ends`: the
    transactions on the connection are session_lock's (not a caller's it was taken in)."""
    try:
        if ends:
            connection.rollback()
        held = connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key}).scalar()
        if keeps_idle:
            connection.execute(text("RESET idle_session_timeout"))
        if ends:
            connection.commit()
    except Exception:
        connection.invalidate()  # closing the server session releases the lock
        logger.error("lock %s: its session ended while the lock was held", name)
        return
    except BaseException:  # interrupted while unlocking: the lock must not reach the pool
        connection.invalidate()
        raise
    if not held:
        logger.error("lock %s was no longer held when released", name)


def _release_process_locks(session: Session, transaction) -> None:
    if transaction.parent is not None:
        return  # a savepoint ended; the transaction (and the lock) goes on
    held = session.info.get(_HELD, {})
    while held:
        held.popitem()[1]()  # the last taken first


def server_version(connection: Connection) -> str:
    """The database server's version string; raises when the database is unreachable."""
    if connection.dialect.name == "postgresql":
        return connection.execute(text("SHOW server_version")).scalar_one()
    return "sqlite " + connection.execute(text("SELECT sqlite_version()")).scalar_one()


def storable_text(text: str) -> bool:
    """PostgreSQL text holds neither NUL nor a lone surrogate (a `\\ud800` escape is valid
    JSON but not Unicode), and no client has a reason to send either."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
