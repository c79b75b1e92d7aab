"""A merge keeps the loser's video history (spec B 4.5 /merge, demote, member reports): the
videos it rejected stay rejected on the winner, and members' reports on its videos still count."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import Movement, MovementVideoReport
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.merge import merge_pairs
from gymctl.movements.ranking import demote, report_video
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

EMBEDDER = LocalEmbedder()


def url(video: str) -> str:
    return f"https://www.youtube.com/watch?v={video}"


def candidate(video: str, score: float) -> dict:
    return {"url": url(video), "videoId": video, "modelScore": score, "source": "youtube-search"}


def canonical(session, slug, **fields) -> Movement:
    row = Movement(slug=slug, name=slug.replace("-", " ").title(), **fields)
    session.add(row)
    session.flush()
    return row


def report(session, settings, org, movement, user):
    return report_video(
        session,
        settings,
        organization_id=org.id,
        movement_id=movement.id,
        user_id=user.id,
        negative=True,
        reason=None,
        now=NOW,
    )


def members(session, org, n):
    people = [factories.user(session) for _ in range(n)]
    for person in people:
        factories.membership(session, user=person, organization=org)
    return people


def test_a_merged_losers_rejected_videos_and_member_reports_stay_with_the_winner(
    session, library_settings
):
    """The loser had demoted "bad" and two members had reported "good", the video it showed.
    The merge gave the winner both candidates but not the rejection, so the operator's next
    demote of "good" brought "bad" back; and the two reports stayed on the loser (its route
    404 from then on), so a third member's report counted one."""
    org = factories.organization(session)
    winner = canonical(session, "push-up")
    loser = canonical(
        session,
        "press-up",
        video_url=url("good"),
        video_status="auto",
        video_candidates=[candidate("bad", 0.95), candidate("good", 0.8)],
        video_rejected_ids=["bad"],
    )
    first, second, third = members(session, org, 3)
    for person in (first, second):
        report(session, library_settings, org, loser, person)
    session.commit()

    merged = merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    session.commit()

    assert (winner.video_url, winner.video_rejected_ids) == (url("good"), ["bad"])
    third_report = report(session, library_settings, org, winner, third)
    assert (third_report["negativeReports"], third_report["demoted"]) == (3, True)
    assert winner.video_url is None  # "bad" stays rejected: nothing above it is left
    assert winner.video_rejected_ids == ["bad", "good"]
    assert merged["pairs"][0]["videoReports"] == 2


def test_a_video_the_winner_rejected_is_not_carried_from_the_loser(session, library_settings):
    winner = canonical(session, "push-up", video_rejected_ids=["bad"])
    loser = canonical(
        session,
        "press-up",
        video_url=url("bad"),
        video_status="auto",
        video_candidates=[candidate("bad", 0.9)],
    )
    session.commit()

    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)

    assert (winner.video_url, winner.video_status) == (None, "none")
    with pytest.raises(DomainError) as nothing:
        demote(session, winner.id, library_settings, now=NOW)
    assert nothing.value.code == "movement_video_missing"


def test_a_report_the_winner_already_holds_stays_on_the_loser(session, library_settings):
    """Both rows showed the same video and one member reported it on each: one report per
    person and video, so the winner keeps its own and the loser's stays where it was."""
    org = factories.organization(session)
    shown = {"video_url": url("v"), "video_status": "auto"}
    winner, loser = canonical(session, "push-up", **shown), canonical(session, "press-up", **shown)
    (person,) = members(session, org, 1)
    for row in (winner, loser):
        report(session, library_settings, org, row, person)
    session.commit()

    merged = merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)

    assert merged["pairs"][0]["videoReports"] == 0
    held = session.scalars(select(MovementVideoReport.movement_id)).all()
    assert sorted(held) == sorted([winner.id, loser.id])


def test_a_winner_showing_a_video_the_loser_rejected_shows_the_next_candidate(session):
    """The loser's members had demoted "w", which the winner showed as well: after the merge
    "w" is in the winner's rejected list, and the winner showed it all the same."""
    winner = canonical(
        session,
        "push-up",
        video_url=url("w"),
        video_status="auto",
        video_candidates=[candidate("w", 0.9), candidate("x", 0.8)],
    )
    loser = canonical(
        session, "press-up", video_candidates=[candidate("w", 0.9)], video_rejected_ids=["w"]
    )
    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    assert (winner.video_url, winner.video_status) == (url("x"), "auto")
    assert "w" in winner.video_rejected_ids


def test_a_video_a_person_chose_stays_though_the_loser_rejected_it(session):
    """A coach's or operator's own choice (manual) is never overridden by a ranking rule."""
    winner = canonical(
        session,
        "push-up",
        video_url=url("w"),
        video_status="manual",
        video_candidates=[candidate("x", 0.8)],
    )
    loser = canonical(session, "press-up", video_rejected_ids=["w"])
    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    assert (winner.video_url, winner.video_status) == (url("w"), "manual")


@pytest.mark.parametrize("status", ["manual", "reviewed", "auto"])
def test_a_winner_dropping_a_rejected_video_takes_the_losers_own(session, status):
    """The re-choice ran after the loser's video was handed over only to a winner showing
    none: the winner dropped its rejected video and showed nothing (or a lesser candidate),
    though the loser showed one, a person's choice among them."""
    winner = canonical(
        session,
        "push-up",
        video_url=url("w"),
        video_status="auto",
        video_candidates=[candidate("w", 0.9)],
    )
    loser = canonical(
        session,
        "press-up",
        video_url=url("m"),
        video_status=status,
        video_candidates=[candidate("w", 0.9)],
        video_rejected_ids=["w"],
    )
    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    assert (winner.video_url, winner.video_status) == (url("m"), status)
