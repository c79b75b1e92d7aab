"""Video discovery, ranking, demotion and member reports (spec B 3, 4.5, 8) against the search
API and chat model fakes on loopback."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import AuditLog, Movement, MovementVideoReport, VideoSearchQuota
from gymctl.movements.clients import chat_model_from_settings, video_search_from_settings
from gymctl.movements.discovery import DISABLED, discover
from gymctl.movements.ranking import demote, rank, report_video, verify
from tests import factories
from tests.conftest import NOW
from tests.movements.conftest import keyed


def movement(session, slug, **fields) -> Movement:
    row = Movement(slug=slug, name=fields.pop("name", slug.replace("-", " ").title()), **fields)
    session.add(row)
    session.flush()
    return row


def candidate(video_id, *, score=None, model_score=None, trusted=False, seconds=60, views=100):
    return {
        "url": f"https://www.youtube.com/watch?v={video_id}",
        "videoId": video_id,
        "trusted": trusted,
        "durationSeconds": seconds,
        "viewCount": views,
        "score": score,
        "modelScore": model_score,
        "source": "youtube-search",
    }


def run_discover(session, settings, **kwargs):
    return discover(session, video_search_from_settings(settings), settings, now=NOW, **kwargs)


def run_rank(session, settings, **kwargs):
    return rank(session, chat_model_from_settings(settings), settings, now=NOW, **kwargs)


def test_discovery_queries_name_demo_then_how_to_then_first_alias_plus_trusted_channels(
    session, settings, fake
):
    row = movement(session, "front-squat", name="Front Squat", aliases=["Clean Grip Squat"])
    configured = keyed(
        settings, fake, video_queries_per_movement=3, video_trusted_channels=["chan-trusted"]
    )
    fake.videos["Front Squat"] = [("trusted1", "chan-trusted", 45, 10)]
    run_discover(session, configured)
    queries = [(q["q"], q.get("channelId")) for q in fake.calls("/yt/search")]
    assert queries == [
        ("Front Squat demo", None),
        ("how to do Front Squat", None),
        ("Clean Grip Squat", None),
        ("Front Squat", "chan-trusted"),  # beyond the cap of 3
    ]
    assert row.video_candidates[0]["trusted"] is True


def test_discovery_keeps_15s_to_4min_skips_known_and_rejected_and_saves(
    session, library_settings, fake
):
    row = movement(
        session,
        "air-squat",
        name="Air Squat",
        video_candidates=[candidate("known")],
        video_rejected_ids=["rejected"],
    )
    fake.videos["Air Squat demo"] = [
        ("short", "c", 14, 1),
        ("low", "c", 15, 1),
        ("high", "c", 240, 1),
        ("long", "c", 241, 1),
        ("known", "c", 60, 1),
        ("rejected", "c", 60, 1),
    ]
    result = run_discover(session, library_settings, force=True)
    assert [c["videoId"] for c in row.video_candidates] == ["known", "low", "high"]
    assert result["candidatesAdded"] == 2
    assert (result["covered"], result["remaining"], result["searchesUsed"]) == (1, 0, 1)
    assert session.get(VideoSearchQuota, NOW.date()).units_used == 101  # search + details


def test_discovery_skips_covered_rows_unless_forced_and_never_touches_manual(
    session, library_settings, fake
):
    movement(session, "covered", video_candidates=[candidate("a")])
    movement(session, "manual", video_status="manual", video_url="https://v.example.test/m")
    movement(session, "bare")
    result = run_discover(session, library_settings)
    assert [q["q"] for q in fake.calls("/yt/search")] == ["Bare demo"]
    assert (result["covered"], result["remaining"]) == (1, 1)


def test_discovery_stops_at_max_searches_and_at_the_daily_quota(session, settings, fake):
    for n in range(5):
        movement(session, f"move-{n}")
    capped = keyed(settings, fake, video_max_searches=2)
    result = run_discover(session, capped)
    assert (result["searchesUsed"], result["quotaExhausted"], result["remaining"]) == (2, False, 5)
    quota = session.get(VideoSearchQuota, NOW.date())
    quota.units_used = 9_850
    result = run_discover(session, keyed(settings, fake))
    assert result["searchesUsed"] == 1
    assert result["quotaExhausted"] is True
    assert quota.units_used == 9_950  # one search found nothing: no details call


def test_an_api_quota_error_stops_discovery_and_keeps_what_was_saved(
    session, library_settings, fake
):
    movement(session, "first")
    fake.quota_exceeded = True
    result = run_discover(session, library_settings)
    assert result["quotaExhausted"] is True
    assert (
        session.get(VideoSearchQuota, NOW.date()).units_used == library_settings.video_daily_quota
    )


def test_discovery_without_a_search_key_answers_disabled(session, settings):
    movement(session, "bare")
    result = run_discover(session, settings)
    assert result["disabled"] == DISABLED
    assert result["searchesUsed"] == 0


def test_rank_reads_model_score_only_and_breaks_ties_trusted_shorter_viewed(
    session, library_settings, fake
):
    legacy = movement(
        session,
        "legacy",
        video_candidates=[
            candidate("old", score=0.99, model_score=0.5),
            candidate("new", model_score=0.8),
        ],
    )
    ties = movement(
        session,
        "ties",
        video_candidates=[
            candidate("long", model_score=0.9, seconds=200),
            candidate("views", model_score=0.9, seconds=60, views=10),
            candidate("most", model_score=0.9, seconds=60, views=900),
            candidate("trust", model_score=0.9, seconds=220, trusted=True),
        ],
    )
    shorter = movement(
        session,
        "shorter",
        video_candidates=[
            candidate("a", model_score=0.9, seconds=200),
            candidate("b", model_score=0.9, seconds=60, views=10),
        ],
    )
    run_rank(session, library_settings)
    assert legacy.video_url.endswith("new")
    assert ties.video_url.endswith("trust")
    assert shorter.video_url.endswith("b")


def test_rank_scores_unscored_candidates_and_reports_outcomes_and_cost(
    session, library_settings, fake
):
    fake.scores.update(good=0.9, weak=0.2)
    filled = movement(session, "filled", video_candidates=[candidate("good"), candidate("weak")])
    cleared = movement(
        session,
        "cleared",
        video_url="https://www.youtube.com/watch?v=weak",
        video_status="auto",
        video_candidates=[candidate("weak")],
    )
    unscored = movement(session, "unscored", video_candidates=[candidate("nobody-scored")])
    manual = movement(
        session,
        "manual",
        video_status="manual",
        video_url="https://v.example.test/m",
        video_candidates=[candidate("good")],
    )
    movement(session, "uncovered")
    result = run_rank(session, library_settings)
    outcomes = {r["slug"]: r["outcome"] for r in result["report"]}
    assert outcomes == {"cleared": "cleared", "filled": "filled", "unscored": "still_none"}
    assert filled.video_url.endswith("good")
    assert filled.video_status == "auto"
    assert cleared.video_url is None
    assert unscored.video_url is None
    assert manual.video_url == "https://v.example.test/m"  # never touched
    summary = result["summary"]
    assert (summary["filled"], summary["cleared"], summary["still_none"], summary["uncovered"]) == (
        1,
        1,
        1,
        1,
    )
    # three scoring calls, 1000 in and 100 out tokens each, at 0.15 and 0.60 USD per M tokens
    assert summary["costUsdMicros"] == 3 * (150 + 60)
    assert result["skippedUncovered"] == 1
    row = next(r for r in result["report"] if r["slug"] == "filled")
    assert row["chosen"]["modelScore"] == 0.9
    assert row["rejected"][0]["modelScore"] == 0.2
    assert (row["previousUrl"], row["covered"], row["candidateCount"]) == (None, True, 2)


def test_rank_dry_run_writes_nothing_and_rows_used_by_workouts_come_first(
    session, library_settings, fake
):
    fake.scores.update(x=0.9)
    first = movement(session, "a-first", video_candidates=[candidate("x")])
    used = movement(session, "z-used", video_candidates=[candidate("x")])
    from gymctl.models import Workout, WorkoutMovement

    workout = Workout(organization_id=factories.organization(session).id, title="W")
    session.add(workout)
    session.flush()
    session.add(WorkoutMovement(workout_id=workout.id, movement_id=used.id))
    session.flush()
    result = run_rank(session, library_settings, dry_run=True, limit=1)
    assert [r["slug"] for r in result["report"]] == ["z-used"]
    assert result["report"][0]["outcome"] == "filled"
    assert result["summary"]["dryRun"] is True
    assert used.video_url is None
    assert used.video_candidates[0]["modelScore"] is None
    assert first.video_url is None


def test_rank_with_include_uncovered_clears_an_unsupported_video(session, library_settings):
    row = movement(
        session, "orphan", video_url="https://www.youtube.com/watch?v=z", video_status="auto"
    )
    result = run_rank(session, library_settings, include_uncovered=True)
    assert result["report"][0]["outcome"] == "cleared"
    assert row.video_url is None


def test_rank_without_an_llm_key_is_disabled_and_changes_nothing(session, settings):
    row = movement(
        session, "x", video_candidates=[candidate("a")], video_url="u", video_status="auto"
    )
    assert "disabled" in run_rank(session, settings)
    assert row.video_url == "u"


def test_demote_falls_through_to_the_next_scored_candidate_above_threshold_then_none(
    session, library_settings
):
    row = movement(
        session,
        "demoted",
        video_url="https://www.youtube.com/watch?v=best",
        video_status="auto",
        video_candidates=[
            candidate("best", model_score=0.95),
            candidate("next", model_score=0.7),
            candidate("weak", model_score=0.3),
        ],
    )
    first = demote(session, row.id, library_settings, now=NOW)
    assert (first["outcome"], row.video_url) == ("changed", "https://www.youtube.com/watch?v=next")
    second = demote(session, row.id, library_settings, now=NOW)
    assert second["outcome"] == "cleared"
    assert row.video_url is None
    assert row.video_rejected_ids == ["best", "next"]
    with pytest.raises(DomainError) as refused:
        demote(session, row.id, library_settings, now=NOW)
    assert (refused.value.code, refused.value.status) == ("movement_video_missing", 409)
    assert session.scalar(select(AuditLog).where(AuditLog.action == "movements.video_demoted"))


def reporters(session, gym_org, n):
    people = []
    for _ in range(n):
        user = factories.user(session)
        factories.membership(session, user=user, organization=gym_org)
        people.append(user)
    return people


@pytest.mark.parametrize(
    ("status", "demoted"), [("auto", True), ("reviewed", False), ("manual", False)]
)
def test_third_negative_report_demotes_unless_verified_or_manual(
    session, library_settings, status, demoted
):
    org = factories.organization(session)
    row = movement(
        session,
        "reported",
        video_url="https://www.youtube.com/watch?v=bad",
        video_status=status,
        video_candidates=[candidate("bad", model_score=0.9), candidate("alt", model_score=0.8)],
    )
    people = reporters(session, org, 3)
    results = [
        report_video(
            session,
            library_settings,
            organization_id=org.id,
            movement_id=row.id,
            user_id=p.id,
            negative=True,
            reason=None,
            now=NOW,
        )
        for p in people
    ]
    assert [r["demoted"] for r in results] == [False, False, demoted]
    assert row.video_url.endswith("alt" if demoted else "bad")


def test_a_repeated_report_by_one_person_counts_once(session, library_settings):
    org = factories.organization(session)
    row = movement(session, "r", video_url="https://www.youtube.com/watch?v=v", video_status="auto")
    (person,) = reporters(session, org, 1)
    for _ in range(3):
        result = report_video(
            session,
            library_settings,
            organization_id=org.id,
            movement_id=row.id,
            user_id=person.id,
            negative=True,
            reason="blurry",
            now=NOW,
        )
    assert (result["recorded"], result["negativeReports"], result["demoted"]) == (False, 1, False)
    assert len(session.scalars(select(MovementVideoReport)).all()) == 1


def test_another_gyms_movement_is_404_to_a_reporter(session, library_settings):
    mine, theirs = factories.organization(session), factories.organization(session)
    row = movement(session, "private", organization_id=theirs.id, video_url="u")
    (person,) = reporters(session, mine, 1)
    with pytest.raises(DomainError) as refused:
        report_video(
            session,
            library_settings,
            organization_id=mine.id,
            movement_id=row.id,
            user_id=person.id,
            negative=True,
            reason=None,
            now=NOW,
        )
    assert (refused.value.code, refused.value.status) == ("movement_not_found", 404)


def test_verify_marks_reviewed_and_rank_keeps_a_reviewed_video(session, library_settings, fake):
    fake.scores.update(mine=0.1, other=0.99)
    row = movement(
        session,
        "verified",
        video_url="https://www.youtube.com/watch?v=mine",
        video_status="auto",
        video_candidates=[candidate("mine"), candidate("other")],
    )
    assert verify(session, row.id, now=NOW)["videoStatus"] == "reviewed"
    result = run_rank(session, library_settings)
    assert result["report"][0]["outcome"] == "kept"
    assert row.video_url.endswith("mine")


def test_a_failing_search_api_stops_discovery_with_its_error(session, library_settings, fake):
    movement(session, "first")
    fake.fail_status["/yt/search"] = 500
    result = run_discover(session, library_settings)
    assert result["error"] == "answered 500"
    assert result["searched"] == 0


def test_a_model_failure_keeps_what_was_scored_reports_the_movement_and_a_rerun_resumes(
    session, library_settings, fake
):
    """One failure of the language model used to discard the whole run, scores already paid
    for included: now it costs only its movement, and the next run scores only what is left."""
    fake.scores.update(good=0.9, fine=0.8)
    first = movement(session, "first", name="First", video_candidates=[candidate("good")])
    broken = movement(session, "second", name="Second", video_candidates=[candidate("fine")])
    fake.failing_movements.add("Second")
    result = run_rank(session, library_settings)
    outcomes = {r["slug"]: r["outcome"] for r in result["report"]}
    assert outcomes == {"first": "filled", "second": "failed"}
    failed = next(r for r in result["report"] if r["slug"] == "second")
    assert failed["error"]["code"] == "llm_unavailable"
    assert (result["summary"]["filled"], result["summary"]["failed"]) == (1, 1)
    assert first.video_url.endswith("good")
    assert first.video_candidates[0]["modelScore"] == 0.9
    assert broken.video_candidates[0]["modelScore"] is None
    assert broken.video_url is None

    fake.failing_movements.clear()
    fake.requests.clear()
    again = run_rank(session, library_settings)
    (call,) = fake.calls("/v1/chat/completions")  # only the movement left unscored
    assert json.loads(call["messages"][1]["content"])["movement"] == "Second"
    assert {r["slug"]: r["outcome"] for r in again["report"]}["second"] == "filled"
    assert broken.video_url.endswith("fine")


def test_after_three_model_failures_the_rest_wait_for_the_next_run(session, library_settings, fake):
    for index in range(5):
        movement(session, f"m{index}", name=f"M{index}", video_candidates=[candidate(f"v{index}")])
        fake.failing_movements.add(f"M{index}")
    result = run_rank(session, library_settings)
    assert (result["summary"]["failed"], result["summary"]["pending"]) == (3, 2)
    assert len(fake.calls("/v1/chat/completions")) == 3


def test_a_view_count_too_long_to_read_is_no_views_not_an_exception(
    session, library_settings, fake
):
    """The search API's viewCount is text: 4,301 digits raised ValueError out of int() and
    ended the discovery pass."""
    row = movement(session, "air-squat", name="Air Squat")
    fake.videos["Air Squat demo"] = [("huge", "c", 60, "9" * 4301), ("fine", "c", 60, "120")]

    run_discover(session, library_settings)

    views = {c["videoId"]: c["viewCount"] for c in row.video_candidates}
    assert views == {"huge": 0, "fine": 120}
