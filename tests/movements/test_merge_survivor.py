"""A merge names where the loser's references go (spec B 4.5 /merge): a loser already merged
into another movement is not reported as merged into this pair's winner."""

from __future__ import annotations

import pytest

from gymctl.errors import DomainError
from gymctl.models import Movement, Workout, WorkoutMovement
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.merge import merge_pairs
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

EMBEDDER = LocalEmbedder()


def canonical(session, slug) -> Movement:
    row = Movement(organization_id=None, slug=slug, name=slug.replace("-", " ").title())
    session.add(row)
    session.flush()
    return row


@pytest.fixture
def rows(session):
    a, b, c = (canonical(session, s) for s in ("push-up", "press-up", "pushup-kneeling"))
    workout = Workout(organization_id=factories.organization(session).id, title="WOD")
    session.add(workout)
    session.flush()
    session.add(WorkoutMovement(workout_id=workout.id, movement_id=b.id, position=0))
    session.commit()
    return a, b, c


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_loser_merged_into_another_movement_is_refused_not_reported_already_merged(
    session, rows, dry_run
):
    """B was merged into A; the operator then asks for C:B. It answered already_merged, as if
    B's workouts were C's, though they are A's and nothing moved: refused, naming A."""
    a, b, c = rows
    merge_pairs(session, EMBEDDER, [(a.id, b.id)], dry_run=False, now=NOW)
    session.commit()
    before = snapshot(session)

    with pytest.raises(DomainError) as refused:
        merge_pairs(session, EMBEDDER, [(c.id, b.id)], dry_run=dry_run, now=NOW)

    assert refused.value.code == "merge_loser_merged_elsewhere"
    assert refused.value.status == 409
    assert refused.value.details["mergedIntoId"] == str(a.id)
    session.rollback()
    assert snapshot(session) == before


def test_one_request_merging_a_loser_into_two_winners_is_refused(session, rows):
    """`A:B C:B`: the first pair merges B into A, the second reported already_merged."""
    a, b, c = rows
    before = snapshot(session)
    for dry_run in (True, False):
        with pytest.raises(DomainError) as refused:
            merge_pairs(session, EMBEDDER, [(a.id, b.id), (c.id, b.id)], dry_run=dry_run, now=NOW)
        assert refused.value.code == "merge_loser_merged_elsewhere"
        session.rollback()
        assert snapshot(session) == before


def test_a_loser_merged_into_the_winner_through_a_chain_is_already_merged(session, rows):
    """B into A, then A into C: C:B is done already (C is B's survivor)."""
    a, b, c = rows
    merge_pairs(session, EMBEDDER, [(a.id, b.id), (c.id, a.id)], dry_run=False, now=NOW)
    again = merge_pairs(session, EMBEDDER, [(c.id, b.id)], dry_run=True, now=NOW)
    assert again["pairs"][0]["outcome"] == "already_merged"
