"""A merge request run again after its winner merged on (a hunt in s63): the pair itself was
merged, so it answers already_merged, not that the loser went elsewhere."""

from __future__ import annotations

import pytest

from gymctl.movements.merge import merge_pairs
from tests.conftest import NOW
from tests.movements.test_merge_survivor import EMBEDDER, rows  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_very_pair_merged_before_reports_already_merged_after_its_winner_merged_on(
    session,
    rows,  # noqa: F811
    dry_run,
):
    """spec B 4.5 /merge: "an already-merged pair reports already_merged". B was merged into A
    (B.merged_into_id is A), then A into C. The operator re-runs the first request A:B: that
    very pair was merged (it was refused 409 merge_loser_merged_elsewhere, whose message said B
    went to another movement)."""
    a, b, c = rows
    merge_pairs(session, EMBEDDER, [(a.id, b.id)], dry_run=False, now=NOW)
    merge_pairs(session, EMBEDDER, [(c.id, a.id)], dry_run=False, now=NOW)
    session.commit()
    assert b.merged_into_id == a.id

    again = merge_pairs(session, EMBEDDER, [(a.id, b.id)], dry_run=dry_run, now=NOW)

    assert again["pairs"][0]["outcome"] == "already_merged"
