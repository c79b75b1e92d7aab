"""Spec A 3: each of the four owner business checks of a target and generation is missing,
passing or failing. The owner's app may send the same check twice at once (a double tap, a
retry): the second write records the owner's observation on the one row instead of answering
500 with a unique-key error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.db import get_engine, session_factory
from gymctl.models.releases import BusinessCheck, ReleaseCandidate, ReleaseRequest
from gymctl.releases import checks
from tests.conftest import NOW
from tests.releases.helpers import inserted_candidate, miss_first_get, race_writes, two_writers

LATER = NOW + timedelta(minutes=1)


def _record(session, candidate_id, status, at=NOW):
    candidate = session.get(ReleaseCandidate, candidate_id)
    request = session.get(ReleaseRequest, candidate.release_request_id)
    return checks.record(
        session,
        request,
        candidate,
        target="ios",
        check="store_listing_confirmed",
        status=status,
        actor_user_id=None,
        now=at,
    )


@pytest.mark.embedded
def test_a_check_whose_row_a_rival_wrote_first_is_updated(connection, session, monkeypatch, engine):
    _, candidate_id = inserted_candidate(connection, {"generation": 1})
    _record(session, candidate_id, "passing")
    session.commit()
    # This writer's look for the row ran just before the rival's row was committed.
    get = miss_first_get(monkeypatch, session, BusinessCheck)
    row = _record(session, candidate_id, "failing", at=LATER)
    session.commit()
    assert get.missed
    assert (row.status, row.observed_at) == ("failing", LATER)
    monkeypatch.undo()
    session.expire_all()
    rows = session.scalars(select(BusinessCheck)).all()
    assert [(r.check, r.status) for r in rows] == [("store_listing_confirmed", "failing")]


def test_the_same_check_recorded_twice_at_once_keeps_one_row(committed_pg):
    engine = get_engine(committed_pg)
    with engine.begin() as connection:
        _, candidate_id = inserted_candidate(connection, {"generation": 1})
    factory = session_factory(engine)
    with two_writers(engine) as (first, second):
        _record(first, candidate_id, "passing")
        assert second.get(ReleaseCandidate, candidate_id) is not None

        def second_write() -> None:
            _record(second, candidate_id, "failing", at=LATER)
            second.commit()

        assert race_writes(engine, first, second_write) == []
    with factory() as session:
        rows = session.scalars(select(BusinessCheck)).all()
        assert [(r.check, r.status) for r in rows] == [("store_listing_confirmed", "failing")]
