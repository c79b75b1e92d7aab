"""Sessions seen on authenticated requests: one row per provider session, written at most once per
five minutes, cheap when fresh, and safe when two first requests race."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.access import sessions as sessions_module
from gymctl.access.sessions import (
    WRITE_INTERVAL,
    clear_cache,
    impersonator_from_claims,
    location_from_headers,
    record_session,
)
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, UserSession
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait

UA_MAC = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 Chrome/120.0 Safari"
UA_PHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Version/17.1 Mobile/1 Safari/6"


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def _record(session: Session, user_id: Any, **overrides: Any) -> None:
    values: dict[str, Any] = {
        "session_id": "sess_1",
        "ip": "203.0.113.10",
        "user_agent": UA_MAC,
        "city": "Lisbon",
        "country": "PT",
        "impersonated_by": None,
        "now": NOW,
    }
    values.update(overrides)
    record_session(session, user_id=user_id, **values)


def _rows(session: Session, user_id: Any) -> list[UserSession]:
    session.expire_all()
    return list(session.scalars(select(UserSession).where(UserSession.user_id == user_id)))


@pytest.mark.embedded
def test_first_sight_of_a_session_inserts_its_row(session):
    user = factories.user(session)

    _record(session, user.id)

    [row] = _rows(session, user.id)
    assert (row.session_id, row.ip, row.user_agent, row.city, row.country) == (
        "sess_1",
        "203.0.113.10",
        UA_MAC,
        "Lisbon",
        "PT",
    )
    assert row.first_seen_at == row.last_seen_at == NOW
    assert row.impersonated_by is None


@pytest.mark.embedded
def test_a_sight_after_five_minutes_moves_last_seen_and_takes_the_new_details(session):
    user = factories.user(session)
    _record(session, user.id)
    session.commit()
    later = NOW + WRITE_INTERVAL

    _record(session, user.id, ip="198.51.100.7", user_agent=UA_PHONE, city="Porto", now=later)

    [row] = _rows(session, user.id)
    assert (row.first_seen_at, row.last_seen_at) == (NOW, later)
    assert (row.ip, row.user_agent, row.city, row.country) == (
        "198.51.100.7",
        UA_PHONE,
        "Porto",
        "PT",
    )


@pytest.mark.embedded
def test_a_missing_header_keeps_what_was_known(session):
    user = factories.user(session)
    _record(session, user.id)

    _record(session, user.id, city=None, country=None, user_agent=None, now=NOW + WRITE_INTERVAL)

    [row] = _rows(session, user.id)
    assert (row.city, row.country, row.user_agent) == ("Lisbon", "PT", UA_MAC)


@pytest.mark.embedded
def test_within_five_minutes_of_a_committed_write_no_sql_runs_at_all(session, statements):
    user = factories.user(session)
    _record(session, user.id)
    session.commit()
    statements.seen.clear()

    _record(session, user.id, ip="198.51.100.7", now=NOW + timedelta(minutes=4, seconds=59))

    assert statements.seen == []
    [row] = _rows(session, user.id)
    assert (row.last_seen_at, row.ip) == (NOW, "203.0.113.10")


@pytest.mark.embedded
def test_a_fresh_row_unknown_to_this_process_costs_one_select_and_no_write(session, statements):
    user_id = factories.user(session).id
    _record(session, user_id)
    session.commit()
    clear_cache()  # as if another process had written the row
    statements.seen.clear()

    _record(session, user_id, ip="198.51.100.7", now=NOW + timedelta(minutes=2))

    assert statements.seen == ["SELECT"]
    [row] = _rows(session, user_id)
    assert (row.last_seen_at, row.ip) == (NOW, "203.0.113.10")
    session.commit()
    statements.seen.clear()
    _record(session, user_id, now=NOW + timedelta(minutes=3))
    assert statements.seen == []  # the fresh row it read is now cached


@pytest.mark.embedded
def test_a_rolled_back_write_does_not_suppress_the_next_one(session):
    user = factories.user(session)
    session.commit()
    _record(session, user.id)
    session.rollback()

    _record(session, user.id, now=NOW + timedelta(minutes=1))

    [row] = _rows(session, user.id)
    assert row.first_seen_at == NOW + timedelta(minutes=1)


@pytest.mark.embedded
def test_impersonation_is_recorded_at_once_and_never_cleared(session):
    user = factories.user(session)
    _record(session, user.id)
    session.commit()

    _record(session, user.id, impersonated_by="user_operator", now=NOW + timedelta(minutes=1))
    session.commit()
    _record(session, user.id, impersonated_by=None, now=NOW + timedelta(minutes=10))

    [row] = _rows(session, user.id)
    assert row.impersonated_by == "user_operator"
    assert row.last_seen_at == NOW + timedelta(minutes=10)


@pytest.mark.embedded
def test_sessions_are_kept_per_provider_session(session):
    user = factories.user(session)

    _record(session, user.id, session_id="sess_a")
    _record(session, user.id, session_id="sess_b")

    assert sorted(row.session_id for row in _rows(session, user.id)) == ["sess_a", "sess_b"]


def test_overlong_values_are_cut_to_the_columns(session):
    user = factories.user(session)

    _record(session, user.id, user_agent="x" * 2000, city="c" * 300, ip="1" * 100)

    [row] = _rows(session, user.id)
    assert (len(row.user_agent), len(row.city), len(row.ip)) == (512, 128, 64)


def test_the_cache_of_recent_writes_is_bounded():
    recent = sessions_module._RecentWrites(3)
    for n in range(5):
        recent.put((n, "s"), sessions_module._Written(NOW, None))  # type: ignore[arg-type]

    assert len(recent) == 3
    assert recent.get((0, "s")) is None  # type: ignore[arg-type]
    assert recent.get((4, "s")) is not None  # type: ignore[arg-type]


def test_two_first_sights_at_once_end_with_one_row_and_a_usable_transaction(committed_pg):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as setup:
        user_id = factories.user(setup).id
        setup.commit()
    later = NOW + timedelta(minutes=6)
    failures: list[BaseException] = []

    first = factory()
    _record(first, user_id, session_id="sess_race")  # inserted, not yet committed

    def second() -> None:
        try:
            with factory() as other:
                other.add(AuditLog(at=later, action="test.same_transaction", data={}))
                # Sees no committed row, inserts, waits on the first's uncommitted one, then
                # loses the race: the savepoint turns it into an update.
                _record(other, user_id, session_id="sess_race", ip="198.51.100.7", now=later)
                other.commit()
        except BaseException as error:  # surfaced in the test thread below
            failures.append(error)

    thread = threading.Thread(target=second)
    thread.start()
    try:
        wait_for_a_lock_wait(engine)
    finally:
        first.commit()
        first.close()
        thread.join(timeout=30)

    assert failures == []
    with factory() as check:
        [row] = check.scalars(select(UserSession).where(UserSession.user_id == user_id)).all()
        assert (row.first_seen_at, row.last_seen_at, row.ip) == (NOW, later, "198.51.100.7")
        kept = check.scalar(select(func.count()).where(AuditLog.action == "test.same_transaction"))
        assert kept == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-Geo-City": "Lisbon", "X-Geo-Country": "pt"}, ("Lisbon", "PT")),
        ({"x-geo-city": " Porto ", "x-geo-country": "PT"}, ("Porto", "PT")),
        ({"CF-IPCity": "Berlin", "CF-IPCountry": "DE"}, ("Berlin", "DE")),
        ({"CF-IPCountry": "XX"}, (None, None)),
        ({"CF-IPCountry": "T1"}, (None, "T1")),
        (
            {"CloudFront-Viewer-City": "Paris", "CloudFront-Viewer-Country": "FR"},
            ("Paris", "FR"),
        ),
        (
            {"X-Geo-City": "Lisbon", "X-Geo-Country": "PT", "CF-IPCity": "Berlin"},
            ("Lisbon", "PT"),
        ),
        ({"User-Agent": "curl/8"}, (None, None)),
        ({}, (None, None)),
    ],
)
def test_location_comes_from_the_load_balancer_geo_headers(headers, expected):
    assert location_from_headers(headers) == expected


def test_location_reads_case_insensitive_request_headers():
    from werkzeug.datastructures import Headers

    assert location_from_headers(Headers({"Cf-Ipcity": "Madrid", "Cf-Ipcountry": "ES"})) == (
        "Madrid",
        "ES",
    )


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"sub": "user_a", "act": {"sub": "user_operator"}}, "user_operator"),
        ({"sub": "user_a"}, None),
        ({"sub": "user_a", "act": "user_operator"}, None),
        ({"sub": "user_a", "act": {"sub": ""}}, None),
    ],
)
def test_the_impersonator_is_the_act_claims_subject(claims, expected):
    assert impersonator_from_claims(claims) == expected
