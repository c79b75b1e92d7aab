"""Spec A 2.14: a release candidate is an immutable snapshot, and "evidence is append-only and
separate from per-platform state". A job of a candidate that was since replaced may still
report its outcome (its executor access lives 15 minutes): that is evidence of the old
candidate, recorded as such, but it says nothing about where the current candidate stands. The
tracker shows the current candidate's platform states, as it shows its evidence."""

from __future__ import annotations

import pytest

from gymctl.releases import operations, switches
from tests.conftest import NOW
from tests.releases import test_operation_results
from tests.releases.helpers import cut, owner_call
from tests.releases.test_operation_results import _claimed, _evidence, _result

candidate = test_operation_results.candidate  # the fixture: a current candidate

NEW_COMMIT = "a" * 40


def _tracker(client, session, gym):
    switches.set_switch(session, gym.id, switches.RELEASE_TRACKER, True, now=NOW)
    session.commit()
    response = owner_call(client, gym, "GET", "/releases")
    assert response.status_code == 200, response.json
    return response.json


@pytest.mark.embedded
def test_a_late_result_of_a_replaced_candidate_leaves_the_current_ones_state(
    client, session, store, settings, gym, candidate, ci, engine
):
    old, headers = _claimed(client, session, settings, gym, ci, "build")
    replacement = cut(session, store, settings, gym, commit=NEW_COMMIT)
    assert replacement.generation == candidate.generation + 1
    operations.dispatch(session, settings, gym.id, kind="build", platform="ios", now=NOW)
    session.commit()

    late = _result(client, old, headers, "failed")

    assert late.json == {"operationId": str(old.id), "status": "failed"}
    assert _evidence(session, old) == ["failed"]  # recorded, as the old candidate's
    tracker = _tracker(client, session, gym)
    assert tracker["candidate"]["generation"] == replacement.generation
    assert tracker["platforms"] == {"ios": "build_dispatched", "android": None}
    assert tracker["evidence"] == []


@pytest.mark.embedded
def test_the_tracker_shows_no_state_of_a_replaced_candidate(
    client, session, store, settings, gym, candidate, ci, engine
):
    _claimed(client, session, settings, gym, ci, "build")
    assert _tracker(client, session, gym)["platforms"] == {
        "ios": "build_dispatched",
        "android": None,
    }
    cut(session, store, settings, gym, commit=NEW_COMMIT)

    tracker = _tracker(client, session, gym)

    # Nothing was dispatched for the new snapshot yet: the old build is not its build.
    assert tracker["platforms"] == {"ios": None, "android": None}
