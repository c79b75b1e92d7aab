"""Spec A 2.14: per-platform state says where each platform's release stands now, one row per
platform. Its first write may come from two places at once (two dispatches for one platform,
an operator's and a retried one; a dispatch and a job's report): the second records its state
on the first's row instead of failing with a unique-key error (a 500 to the CI, a crash to the
operator)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.db import get_engine, session_factory
from gymctl.models.releases import ReleaseCandidate, ReleasePlatformState, ReleaseRequest
from gymctl.releases import evidence, operations
from tests.conftest import NOW
from tests.releases import test_operation_results
from tests.releases.helpers import inserted_candidate, miss_first_get, race_writes, two_writers

candidate = test_operation_results.candidate  # the fixture: a current candidate

LATER = NOW + timedelta(minutes=1)


def _states(session):
    session.expire_all()
    return [(row.platform, row.state) for row in session.scalars(select(ReleasePlatformState))]


@pytest.mark.embedded
def test_a_dispatch_whose_platform_row_a_rival_wrote_first_updates_it(
    session, settings, gym, candidate, monkeypatch, engine
):
    operations.dispatch(session, settings, gym.id, kind="build", platform="ios", now=NOW)
    session.commit()
    # This dispatch's look for the platform's row ran just before the rival's was committed.
    get = miss_first_get(monkeypatch, session, ReleasePlatformState)
    operations.dispatch(session, settings, gym.id, kind="smoke", platform="ios", now=LATER)
    session.commit()
    monkeypatch.undo()
    assert get.missed
    assert _states(session) == [("ios", "smoke_dispatched")]


def _set_state(session, candidate_id, state, at):
    of = session.get(ReleaseCandidate, candidate_id)
    request = session.get(ReleaseRequest, of.release_request_id)
    return evidence.set_state(session, request, of, "ios", state, now=at)


def test_two_first_writes_of_one_platform_at_once_keep_one_row(committed_pg):
    engine = get_engine(committed_pg)
    with engine.begin() as connection:
        _, candidate_id = inserted_candidate(connection, {"generation": 1})
    factory = session_factory(engine)
    with two_writers(engine) as (first, second):
        _set_state(first, candidate_id, "build_dispatched", NOW)
        assert second.get(ReleaseCandidate, candidate_id) is not None

        def second_write() -> None:
            _set_state(second, candidate_id, "smoke_dispatched", LATER)
            second.commit()

        assert race_writes(engine, first, second_write) == []
    with factory() as session:
        rows = session.scalars(select(ReleasePlatformState)).all()
        assert [(r.platform, r.state, r.updated_at) for r in rows] == [
            ("ios", "smoke_dispatched", LATER)
        ]
