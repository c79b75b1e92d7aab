"""The one rate limiter: every limit of the project is one of the helpers here.

- `spend` / `hit` / `refused`: what callers can trigger (logins, join forms, webhooks, uploads),
  fixed windows counted in the database, so every API process and worker shares them. A refused
  attempt still spends its budget.
- `take`: pacing our own calls to a provider whose limit is per provider instance (identity
  invitations, spec A 8): a sliding window over the same table, shared by every process; a
  refusal is not counted (no call was made). `take_apart` takes it in a transaction of its
  own on PostgreSQL, committed before the call it paces; `give_back_apart` returns it when the
  call failed.
- `LocalWindow` and `Backoff`: the two in-memory pieces, for limits that are per process by
  nature (the key-set cache lives in each process, so must its refetch pacing; the user reads of
  GET /users/me's fallback). They take `now` and hold no clock, so tests drive them exactly.

The database helpers count inside the caller's session and never open one of their own: on the
embedded SQLite default the caller's transaction holds the write lock, and a second session
would wait on it (spec of the house: one session per request). The HTTP door commits right after
counting, so a refused request still spends its budget and the lock is not held through the work
it guards. The one exception is `take_apart`, for a slot taken in the middle of a caller's work:
on PostgreSQL, where a second transaction waits for no one, it commits the slot apart; on the
embedded default too when the caller has no transaction open (it ended its own before the
call: `db.release_for_outside_call`), so the write lock is not held while the peer answers.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import Engine, delete, select, text, update
from sqlalchemy.orm import Session

from gymctl import codes
from gymctl.clock import ensure_utc
from gymctl.db import advisory_lock, is_postgres, upsert_for
from gymctl.errors import DomainError, too_many_requests
from gymctl.models import RateWindow

KEY_CHARS = 256  # rate_windows.key
LONGEST_WINDOW = timedelta(days=1)  # the longest any limit counts over (`prune` keeps it whole)
T = TypeVar("T")
APART_LOCK_TIMEOUT = "10s"  # take_apart's wait for the key (a slot is taken in milliseconds)


@dataclass(frozen=True)
class Spent:
    """One attempt counted: the window's count so far and the seconds until it ends."""

    count: int
    retry_after: int


def spend(session: Session, key: str, *, window: timedelta, now: datetime) -> Spent:
    """Count one attempt under `key` in the current window (an atomic upsert, so concurrent
    workers never lose a count)."""
    _within_longest(window)
    now = ensure_utc(now)
    span = int(window.total_seconds() * 1000)
    start_ms = int(now.timestamp() * 1000) // span * span
    window_start = datetime.fromtimestamp(start_ms / 1000, now.tzinfo)
    insert = upsert_for(session)
    statement = insert(RateWindow).values(key=key[:KEY_CHARS], window_start=window_start, count=1)
    count = session.execute(
        statement.on_conflict_do_update(
            index_elements=["key", "window_start"],
            set_={"count": RateWindow.count + 1},
        ).returning(RateWindow.count)
    ).scalar_one()
    retry_after = max(1, math.ceil((window_start + window - now).total_seconds()))
    return Spent(count, retry_after)


def _within_longest(window: timedelta) -> None:
    if window > LONGEST_WINDOW:
        raise ValueError(f"a window of {window} outlives what prune keeps ({LONGEST_WINDOW})")


def refused(spent: Spent) -> DomainError:
    """The 429 of an attempt over its limit; the HTTP door turns retryAfter into Retry-After.
    It is `audited`: the door commits the refused attempt's count (limits are counted before
    anything else is written)."""
    return too_many_requests(
        codes.RATE_LIMITED,
        "too many attempts; try again shortly",
        audited=True,
        retryAfter=spent.retry_after,
    )


def hit(session: Session, key: str, *, limit: int, window: timedelta, now: datetime) -> Spent:
    """Count one attempt; DomainError rate_limited (429) past `limit` in the current window."""
    spent = spend(session, key, window=window, now=now)
    if spent.count > limit:
        raise refused(spent)
    return spent


def take(
    session: Session, key: str, *, limit: int, window: timedelta, now: datetime
) -> Spent | None:
    """Take one of `limit` slots in any span of `window` (a sliding log: one row per instant the
    slot was taken), shared by every process. None when taken; otherwise the refusal (the slots in
    use, the seconds until one frees), and nothing is counted.

    Serialized per key until the caller's transaction ends (an advisory lock on PostgreSQL; the
    write lock, and a process lock, on SQLite), so two workers never both take the last slot."""
    _within_longest(window)
    now = ensure_utc(now)
    key = key[:KEY_CHARS]
    advisory_lock(session, f"ratelimit:{key}")
    rows = session.execute(
        select(RateWindow.window_start, RateWindow.count)
        .where(RateWindow.key == key, RateWindow.window_start > now - window)
        .order_by(RateWindow.window_start)
    ).all()
    used = sum(count for _, count in rows)
    if used >= limit:
        # The slot frees when enough of the oldest leave the window to bring it under the limit.
        left = used
        for taken_at, count in rows:
            left -= count
            if left < limit:
                wait = (ensure_utc(taken_at) + window - now).total_seconds()
                return Spent(used, max(1, math.ceil(wait)))
    insert = upsert_for(session)
    session.execute(
        insert(RateWindow)
        .values(key=key, window_start=now, count=1)
        .on_conflict_do_update(
            index_elements=["key", "window_start"], set_={"count": RateWindow.count + 1}
        )
    )
    return None


def take_apart(
    session: Session, key: str, *, limit: int, window: timedelta, now: datetime
) -> Spent | None:
    """`take`, for a slot spent on a call outside the database made in the middle of the
    caller's work: in a transaction of its own, committed before the call (`_apart`). `take`
    serializes every caller of the key until its transaction ends, so in the caller's
    transaction the key's lock would be held through the call and all that follows it (the
    identity provider's round trip, the invitee's email, the commit): every gym's
    invitations, one at a time. The slot stays spent whatever the caller's transaction does
    next (the peer acted on the call); `give_back_apart` returns it when the call failed."""
    return _apart(session, lambda s: take(s, key, limit=limit, window=window, now=now))


def give_back_apart(session: Session, key: str, *, now: datetime) -> None:
    """Return the slot `take_apart` took at `now`: the call it paced failed, so the peer did
    not act on it (a lost answer of a call it did act on is under-counted by one, which its
    own limit answers)."""

    def give_back(s: Session) -> None:
        at = ensure_utc(now)
        slot = (RateWindow.key == key[:KEY_CHARS], RateWindow.window_start == at)
        s.execute(update(RateWindow).where(*slot).values(count=RateWindow.count - 1))
        s.execute(delete(RateWindow).where(*slot, RateWindow.count <= 0))

    _apart(session, give_back)


def _apart(session: Session, work: Callable[[Session], T]) -> T:
    """`work` in a transaction of its own, committed on return: on PostgreSQL, and on the
    embedded default when the caller has no transaction open (a slot taken in the caller's
    would hold the database's one write lock through the call it paces). In the caller's
    where there is no second one to have: on the embedded default inside a transaction (its
    one writer is the caller), and for a caller that hands in a connection rather than an
    engine (it owns the transaction). A key the caller's own transaction had locked would
    make the second one wait for ever (no deadlock PostgreSQL can see): it gives up after
    APART_LOCK_TIMEOUT."""
    bind = session.get_bind()
    if not isinstance(bind, Engine):
        return work(session)
    postgres = is_postgres(bind)
    if not postgres and session.in_transaction():
        return work(session)
    with Session(bind) as own:
        if postgres:
            own.execute(text(f"SET LOCAL lock_timeout = '{APART_LOCK_TIMEOUT}'"))
        result = work(own)
        own.commit()
    return result


class LocalWindow:
    """At most `limit` takes in any span of `per`, in this process's memory; thread-safe.
    For limits that are per process by nature (see the module's docstring)."""

    def __init__(self, limit: int, per: timedelta) -> None:
        self.limit = limit
        self.per = per
        self._times: deque[datetime] = deque()
        self._lock = threading.Lock()

    def take(self, now: datetime) -> int | None:
        """None when taken; otherwise the seconds until a slot frees (nothing counted)."""
        with self._lock:
            while self._times and self._times[0] <= now - self.per:
                self._times.popleft()
            if len(self._times) >= self.limit:
                return max(1, math.ceil((self._times[0] + self.per - now).total_seconds()))
            self._times.append(now)
            return None


class Backoff:
    """The negative cache after failures, in this process's memory: no attempt for `first`
    after a failure, doubling with each further failure up to `cap`; a success resets it.
    Thread-safe."""

    def __init__(self, first: timedelta, cap: timedelta) -> None:
        self.first = first
        self.cap = cap
        self._failures = 0
        self._retry_at: datetime | None = None
        self._lock = threading.Lock()

    def ready(self, now: datetime) -> bool:
        """True when an attempt may be made at `now`."""
        with self._lock:
            return self._retry_at is None or now >= self._retry_at

    def failed(self, now: datetime) -> timedelta:
        """Record a failure at `now`; returns the pause before the next attempt."""
        with self._lock:
            self._failures += 1
            # The exponent stops growing at the cap: a long outage must not overflow timedelta.
            pause = self.first
            for _ in range(self._failures - 1):
                if pause >= self.cap:
                    break
                pause *= 2
            pause = min(pause, self.cap)
            self._retry_at = now + pause
            return pause

    def succeeded(self) -> None:
        with self._lock:
            self._failures, self._retry_at = 0, None


def prune(session: Session, *, now: datetime) -> int:
    """Windows that began LONGEST_WINDOW ago have ended, and are never read again: pruned
    an hour after they began, an invitation's day of resends was counted afresh each hour (18 in
    a day against 10)."""
    return session.execute(
        delete(RateWindow).where(RateWindow.window_start < now - LONGEST_WINDOW)
    ).rowcount
