"""One person, one vote on a movement's video: "A member's report on the video a movement shows;
one per person and video" (models.MovementVideoReport; spec B 4.5 member reports, three people
demote a video). A link folds the login row into the gym's profile (access.ownership.link_profiles,
access.folding.fold_person), but leaves the login row's reports on the retired row
(folding._NOT_MOVED) where they still count: the same person reporting again from the row that
goes on is counted twice, and two people demote the video three reports were needed for."""

from __future__ import annotations

import pytest

from gymctl.access.ownership import link_profiles
from gymctl.models import Movement
from gymctl.movements.ranking import report_video
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _url(video: str) -> str:
    return f"https://www.youtube.com/watch?v={video}"


def _report(session, settings, org, movement, user):
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


def test_a_person_whose_rows_were_linked_reports_a_video_once(session, settings):
    org = factories.organization(session)
    movement = Movement(
        slug="push-up",
        name="Push Up",
        video_url=_url("good"),
        video_status="auto",
        video_candidates=[
            {"url": _url("good"), "videoId": "good", "modelScore": 0.9, "source": "youtube-search"}
        ],
    )
    session.add(movement)
    # The gym's profile of Pat (made at its desk) and Pat's own proven login, both members.
    profile = factories.user(session, identity_id=None, email="pat@example.test", name="Pat")
    factories.membership(session, user=profile, organization=org)
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
    factories.membership(session, user=login, organization=org)
    other = factories.user(session)
    factories.membership(session, user=other, organization=org)
    session.flush()

    _report(session, settings, org, movement, login)  # Pat reports from the login
    kept = link_profiles(session, login, now=NOW)  # the next /users/me links the rows
    assert kept.id == profile.id
    session.flush()
    again = _report(session, settings, org, movement, kept)  # Pat reports again
    third = _report(session, settings, org, movement, other)

    assert again["negativeReports"] == 1, "one person counted twice"
    assert third["demoted"] is False, "two people demoted a video that needs three"
