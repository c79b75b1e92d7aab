"""Members' reports a merge brings together (spec B 4.5 report route: "three negative reports
auto-demote unless the video is verified or manual"; docs/decisions.md s50: the loser's reports
follow to the winner so the votes already cast still count toward a demotion)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gymctl.models import MovementVideoReport
from gymctl.movements.merge import merge_pairs
from tests import factories
from tests.conftest import NOW
from tests.movements.test_merge_videos import EMBEDDER, candidate, canonical, members, report, url

pytestmark = pytest.mark.embedded


def test_a_merge_gathering_three_negative_reports_on_the_shown_video_demotes_it(
    session, library_settings
):
    """Both rows showed the automatic video "v": one member reported it on the winner, two
    others on the loser. After the merge the winner holds three negative reports from three
    distinct people on the video it shows, and showed it still: the demotion waited for a fourth
    person, a report by any of the three a repeat that changed nothing. It is demoted at the
    merge, the next candidate shown."""
    org = factories.organization(session)
    shown = {
        "video_url": url("v"),
        "video_status": "auto",
        "video_candidates": [candidate("v", 0.9), candidate("next", 0.7)],
    }
    winner, loser = canonical(session, "push-up", **shown), canonical(session, "press-up", **shown)
    first, second, third = members(session, org, 3)
    report(session, library_settings, org, winner, first)
    for person in (second, third):
        report(session, library_settings, org, loser, person)
    session.commit()

    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    session.commit()

    negatives = session.scalar(
        select(func.count()).where(
            MovementVideoReport.movement_id == winner.id,
            MovementVideoReport.video_url == url("v"),
        )
    )
    assert negatives == 3
    session.expire_all()
    assert (winner.video_url, winner.video_status) == (url("next"), "auto")
    assert "v" in winner.video_rejected_ids
