"""Engine, sessions, transactions and locks.

One session per request, command or job, committed at the edge (`session_scope`); domain code
flushes but never commits. Locks are PostgreSQL's transaction-level advisory locks; on the embedded
SQLite default a process lock stands in (SQLite serializes writers anyway).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.orm import Session, sessionmaker

from gymctl.clock import day_n_ends
from gymctl.config import get_settings


def is_postgres(bind: Engine | Session) -> bool:
    return (
        bind.get_bind().dialect.name == "postgresql"
        if isinstance(bind, Session)
        else (bind.dialect.name == "postgresql")
    )


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url` (default: the configured database, read now)."""
    return _engine(url or get_settings().resolved_database_url)


@functools.cache
def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)


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


def _sqlite_day_n_ends(since: str | None, days: int | None, timezone: str | None) -> str | None:
    """day_n_ends over SQLite's stored text ("YYYY-MM-DD HH:MM:SS.ffffff", UTC), answered in
    the same format so it compares with bound instants as text."""
    if since is None or days is None:
        return None
    at = datetime.fromisoformat(since).replace(tzinfo=UTC)
    ends = day_n_ends(at, int(days), timezone or "UTC")
    return ends.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


READ_ONLY = {"gymctl_read_only": True}


def _sqlite_begin(connection) -> None:
    # IMMEDIATE takes the write lock up front: concurrent writers wait (busy_timeout) instead of
    # failing on a lock upgrade. The embedded default trades concurrency for that safety. A
    # session that only reads (READ_ONLY execution options) begins deferred and never waits on
    # a writer (WAL).
    read_only = connection.get_execution_options().get("gymctl_read_only")
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


@functools.cache
def _sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    return _sessionmaker(engine or get_engine())


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
    """Take the lock `name` until the session's transaction ends; False if `wait` and it is held.

    PostgreSQL: pg_advisory_xact_lock / pg_try_advisory_xact_lock, released by commit or
    rollback. SQLite (embedded default, one process): a process lock released the same way.
    """
    if is_postgres(session):
        fn = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        result = session.execute(text(f"SELECT {fn}(:key)"), {"key": lock_key(name)}).scalar()
        return True if wait else bool(result)
    lock = _process_lock(name)
    if not lock.acquire(blocking=wait):
        return False
    if not session.in_transaction():
        session.begin()  # so that commit, rollback or close ends a transaction and releases
    if "gymctl_process_locks" not in session.info:
        session.info["gymctl_process_locks"] = []
        # The listener stays for the session's life: removing one while it runs is not allowed.
        event.listen(session, "after_transaction_end", _release_process_locks)
    session.info["gymctl_process_locks"].append(lock)
    return True


def _release_process_locks(session: Session, transaction) -> None:
    if transaction.parent is not None:
        return  # a savepoint ended; the transaction (and the lock) goes on
    held = session.info.get("gymctl_process_locks", [])
    while held:
        held.pop().release()


def server_version(connection: Connection) -> str:
    """The database server's version string; raises when the database is unreachable."""
    if connection.dialect.name == "postgresql":
        return connection.execute(text("SHOW server_version")).scalar_one()
    return "sqlite " + connection.execute(text("SELECT sqlite_version()")).scalar_one()
