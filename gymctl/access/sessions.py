"""Provider sessions seen on authenticated requests, kept for the ownership trail (spec A 4).

`record_session` runs on every authenticated API request, so it is throttled: a session's row is
written at most once per WRITE_INTERVAL, and a bounded in-process cache of recent writes spares
even the SELECT. The trail only needs "where and when was this session seen", not every request.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from gymctl.models import UserSession
from gymctl.models.integrity import UniqueViolation, unique_violation

WRITE_INTERVAL = timedelta(minutes=5)
CACHE_MAX_ENTRIES = 10_000

# Geo headers set by the load balancer in front of the API, first match wins. Our own edge sets
# X-Geo-City / X-Geo-Country; Cloudflare (with "Add visitor location headers") sends CF-IPCity /
# CF-IPCountry; CloudFront sends CloudFront-Viewer-City / CloudFront-Viewer-Country. Clients can
# forge these only where the edge does not overwrite them, so the values are evidence, not proof.
GEO_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-geo-city", "x-geo-country"),
    ("cf-ipcity", "cf-ipcountry"),
    ("cloudfront-viewer-city", "cloudfront-viewer-country"),
)
_UNKNOWN_COUNTRIES = frozenset({"", "XX", "ZZ"})  # Cloudflare's and CloudFront's "unknown"

# Column widths of user_sessions: longer values are cut rather than failing the request.
_IP_MAX, _CITY_MAX, _COUNTRY_MAX, _USER_AGENT_MAX = 64, 128, 64, 512


@dataclass(frozen=True, slots=True)
class _Written:
    at: datetime
    impersonated_by: str | None


class _RecentWrites:
    """A thread-safe LRU of (user_id, session_id) -> last write; bounded so memory stays flat."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._entries: OrderedDict[tuple[uuid.UUID, str], _Written] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[uuid.UUID, str]) -> _Written | None:
        with self._lock:
            written = self._entries.get(key)
            if written is not None:
                self._entries.move_to_end(key)
            return written

    def put(self, key: tuple[uuid.UUID, str], written: _Written) -> None:
        with self._lock:
            current = self._entries.get(key)
            if current is not None and current.at > written.at:
                written = _Written(current.at, written.impersonated_by or current.impersonated_by)
            self._entries[key] = written
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_recent = _RecentWrites(CACHE_MAX_ENTRIES)
_PENDING_KEY = "gymctl_recorded_sessions"


def clear_cache() -> None:
    """Forget recent writes (tests, or after restoring a database under a running process)."""
    _recent.clear()


def location_from_headers(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(city, country) from the load balancer's geo headers (GEO_HEADERS), None when absent.

    Header names are matched case-insensitively, so a plain dict works as well as request
    headers. Country is upper-cased; the providers' "unknown" codes become None.
    """
    lowered = {str(name).lower(): value for name, value in headers.items()}
    for city_header, country_header in GEO_HEADERS:
        city = _clean(lowered.get(city_header), _CITY_MAX)
        country = _clean(lowered.get(country_header), _COUNTRY_MAX)
        if country is not None:
            country = country.upper()
            if country in _UNKNOWN_COUNTRIES:
                country = None
        if city is not None or country is not None:
            return city, country
    return None, None


def impersonator_from_claims(claims: Mapping[str, Any]) -> str | None:
    """The impersonating operator's subject: the provider puts it in the token's act.sub."""
    act = claims.get("act")
    if isinstance(act, Mapping):
        sub = act.get("sub")
        if isinstance(sub, str) and sub:
            return sub
    return None


def record_session(
    session: Session,
    *,
    user_id: uuid.UUID,
    session_id: str,
    ip: str | None,
    user_agent: str | None,
    city: str | None,
    country: str | None,
    impersonated_by: str | None,
    now: datetime,
) -> None:
    """Upsert the (user_id, session_id) row: first sight inserts, later sights move last_seen_at.

    Skipped entirely (no SQL) when this process wrote the row less than WRITE_INTERVAL ago, and
    skipped after one SELECT when the row itself is that fresh; so ip, agent and location may lag
    by up to WRITE_INTERVAL. A newly seen impersonation marker is always written: the trail must
    never show an impersonated session as the user's own. Flushes, never commits.
    """
    key = (user_id, session_id)
    ip, user_agent = _clean(ip, _IP_MAX), _clean(user_agent, _USER_AGENT_MAX)
    cached = _recent.get(key)
    if cached is not None and _fresh(cached.at, now) and _covers(cached, impersonated_by):
        return

    values = {
        "ip": ip,
        "user_agent": user_agent,
        "city": _clean(city, _CITY_MAX),
        "country": _clean(country, _COUNTRY_MAX),
        "impersonated_by": impersonated_by,
    }
    row = _find(session, key)
    if row is None:
        try:
            # A savepoint, so losing the insert race to a concurrent request leaves the caller's
            # transaction usable; the winner's row is then updated like any existing one.
            with unique_violation("uq_user_sessions_user_id_session_id"), session.begin_nested():
                row = UserSession(
                    user_id=user_id,
                    session_id=session_id,
                    first_seen_at=now,
                    last_seen_at=now,
                    **values,
                )
                session.add(row)
        except UniqueViolation:
            row = _find(session, key)
            if row is None:  # the winner's row is gone again (its user erased): let it surface
                raise
            _update(session, row, values, now)
    else:
        _update(session, row, values, now)
    _remember_after_commit(session, key, _Written(row.last_seen_at, row.impersonated_by))


def _find(session: Session, key: tuple[uuid.UUID, str]) -> UserSession | None:
    return session.scalar(
        select(UserSession).where(UserSession.user_id == key[0], UserSession.session_id == key[1])
    )


def _update(session: Session, row: UserSession, values: dict[str, Any], now: datetime) -> None:
    marker = values["impersonated_by"]
    if _fresh(row.last_seen_at, now) and (marker is None or marker == row.impersonated_by):
        return  # written by someone less than WRITE_INTERVAL ago: nothing worth a write
    row.last_seen_at = max(row.last_seen_at, now)
    # A missing header keeps what was known, and a marker once recorded is never cleared.
    for name, value in values.items():
        if value is not None and getattr(row, name) != value:
            setattr(row, name, value)
    session.flush()


def _fresh(at: datetime, now: datetime) -> bool:
    return now - at < WRITE_INTERVAL


def _covers(cached: _Written, impersonated_by: str | None) -> bool:
    return impersonated_by is None or impersonated_by == cached.impersonated_by


def _clean(value: str | None, limit: int) -> str | None:
    """A header's text as the sign-in's record keeps it: what the client sent (a User-Agent, a
    geo header a proxy let through), its control characters dropped. A NUL reached PostgreSQL,
    which stores none, and answered every first request of the session 500."""
    if value is None:
        return None
    value = "".join(ch for ch in value if ch.isprintable()).strip()
    return value[:limit] or None


def _remember_after_commit(session: Session, key: tuple[uuid.UUID, str], written: _Written) -> None:
    """Cache the write once it is committed: a rolled-back write must not suppress the next one."""
    pending: dict[tuple[uuid.UUID, str], _Written] | None = session.info.get(_PENDING_KEY)
    if pending is None:
        pending = session.info[_PENDING_KEY] = {}
        # One listener pair per session, kept for its life (removing one while it runs is not
        # allowed); a rollback of any savepoint conservatively drops what is pending.
        event.listen(session, "after_commit", _publish_pending)
        event.listen(session, "after_rollback", _drop_pending)
    pending[key] = written


def _publish_pending(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint was released; the write is not committed yet
    pending = session.info.get(_PENDING_KEY)
    while pending:
        key, written = pending.popitem()
        _recent.put(key, written)


def _drop_pending(session: Session) -> None:
    pending = session.info.get(_PENDING_KEY)
    if pending:
        pending.clear()
