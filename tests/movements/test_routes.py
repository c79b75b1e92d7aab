"""The library's HTTP doors (spec B 4.5): platform-admin routes enqueue long work that the
daemon's sweep runs; the rest answers at once. Refusals carry the spec's code and change
nothing."""

from __future__ import annotations

import io
import uuid

import pytest
from sqlalchemy import select

from daemons.jobs import JOBS, movement_jobs
from gymctl.models import Movement, MovementJob, Role
from gymctl.movements.jobs import MAX_ATTEMPTS, work_jobs
from gymctl.movements.services import library_from_settings
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.movements.conftest import LIBRARY_KEY
from tests.movements.fakes import png_bytes

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

A = "/admin/exercises/canonical"


def work(session, session_factory, settings, store):
    """The daemon's sweep: on what the test's session wrote, a job per transaction of its own;
    the test's session reads what the jobs wrote."""
    session.commit()
    done = work_jobs(session_factory, library_from_settings(settings, store=store), now=NOW)
    session.expire_all()
    return done


def by_slug(session, slug):
    return session.scalar(select(Movement).where(Movement.slug == slug))


def test_library_routes_need_a_platform_admin(client, gym):
    for method, path in [("post", f"{A}/seed"), ("post", f"{A}/duplicates"), ("get", f"{A}/jobs")]:
        response = getattr(client, method)(path, json={}, headers=gym[Role.owner].headers)
        assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")


def test_seed_is_enqueued_run_by_the_worker_and_its_return_value_read_back(
    client, session, session_factory, platform_admin, library_settings, store
):
    headers = platform_admin.headers
    response = client.post(f"{A}/seed", json={"r2Key": LIBRARY_KEY, "rpm": 600}, headers=headers)
    assert response.status_code == 202
    assert response.json["status"] == "queued"
    job_id = response.json["id"]
    assert work(session, session_factory, library_settings, store)["succeeded"] == 1
    job = client.get(f"{A}/jobs/seed/{job_id}", headers=headers).json
    assert job["status"] == "succeeded"
    assert job["returnValue"]["created"] == 873
    listed = client.get(f"{A}/jobs", query_string={"queue": "seed"}, headers=headers).json
    assert [j["id"] for j in listed["jobs"]] == [job_id]
    missing = client.get(f"{A}/jobs/videos/{job_id}", headers=headers)
    assert (missing.status_code, missing.json["code"]) == (404, "job_not_found")
    unset = {"queue": "", "status": ""}  # a form's unset filters
    every = client.get(f"{A}/jobs", query_string=unset, headers=headers).json
    assert [j["id"] for j in every["jobs"]] == [job_id]


@pytest.mark.parametrize(
    "query",
    [{"status": "bogus"}, {"queue": "seeds"}, {"status": "done"}, {"page": "2"}],
)
def test_a_job_filter_the_library_has_not_is_refused_not_an_empty_list(
    client, platform_admin, query
):
    """An unknown status or queue matched no job and answered an empty list, as if nothing
    had been queued: a 400 that names the parameter."""
    refused = client.get(f"{A}/jobs", query_string=query, headers=platform_admin.headers)
    assert (refused.status_code, refused.json["code"]) == (400, "invalid_query")
    assert [f["field"] for f in refused.json["fields"]] == list(query)


def test_seeding_a_missing_key_is_404_and_enqueues_nothing(client, session, platform_admin):
    response = client.post(f"{A}/seed", json={"r2Key": "nope.json"}, headers=platform_admin.headers)
    assert (response.status_code, response.json["code"]) == (404, "library_file_not_found")
    assert session.scalars(select(MovementJob)).all() == []


def test_duplicates_merge_and_alias_change_through_http(client, session, seeded, platform_admin):
    headers = platform_admin.headers
    report = client.post(f"{A}/duplicates", json={"limit": 5}, headers=headers).json
    pair = next(p for p in report["pairs"] if p["a"]["slug"] == "decline-smith-press")
    body = {"pairs": [{"winnerId": pair["a"]["id"], "loserId": pair["b"]["id"]}]}
    before = snapshot(session)
    dry = client.post(f"{A}/merge", json={**body, "dryRun": True}, headers=headers)
    assert dry.json["pairs"][0]["outcome"] == "would_merge"
    assert snapshot(session) == before
    merged = client.post(f"{A}/merge", json=body, headers=headers)
    assert merged.status_code == 200
    assert merged.json["pairs"][0]["outcome"] == "merged"
    again = client.post(f"{A}/merge", json=body, headers=headers)
    assert again.json["pairs"][0]["outcome"] == "already_merged"
    change = client.post(
        f"{A}/alias-change",
        json={"sourceId": pair["a"]["id"], "alias": "smith machine decline presses"},
        headers=headers,
    )
    assert change.status_code == 200
    assert change.json["after"] == []
    collisions = client.get(f"{A}/alias-collisions", headers=headers).json["aliasCollisions"]
    assert any(c["term"] == "squatwithband" for c in collisions)


def test_http_merge_refusals_change_nothing(client, session, seeded, platform_admin):
    headers = platform_admin.headers
    row = by_slug(session, "decline-smith-press")
    before = snapshot(session)
    cases = [
        ({"pairs": [{"winnerId": str(row.id), "loserId": str(row.id)}]}, 400, "merge_pair_invalid"),
        (
            {"pairs": [{"winnerId": str(row.id), "loserId": str(uuid.uuid4())}]},
            404,
            "movement_not_found",
        ),
        ({"pairs": []}, 400, "invalid_body"),
        ({"pairs": [{"winnerId": "x\u0000", "loserId": "y"}]}, 400, "invalid_body"),
    ]
    for body, status, code in cases:
        response = client.post(f"{A}/merge", json=body, headers=headers)
        assert (response.status_code, response.json["code"]) == (status, code)
    assert snapshot(session) == before


def test_thumbnails_enqueue_one_job_per_row_missing_one_then_store_them(
    client, session, session_factory, platform_admin, library_settings, store
):
    for slug in ("a", "b"):
        session.add(Movement(slug=slug, name=slug))
    session.add(Movement(slug="c", name="c", thumbnail_url="https://images.example.test/c.png"))
    session.commit()
    response = client.post(f"{A}/thumbnails", json={}, headers=platform_admin.headers)
    assert response.status_code == 202
    assert response.json["enqueued"] == 2
    again = client.post(f"{A}/thumbnails", json={}, headers=platform_admin.headers)
    assert again.json["enqueued"] == 0  # already queued
    assert work(session, session_factory, library_settings, store)["succeeded"] == 2
    assert by_slug(session, "a").thumbnail_url.endswith("/movements/thumbnails/a.png")


def test_video_routes_enqueue_and_the_worker_discovers_and_ranks(
    client, session, session_factory, platform_admin, library_settings, store, fake
):
    session.add(Movement(slug="air-squat", name="Air Squat"))
    session.commit()
    fake.videos["Air Squat demo"] = [("v1", "c", 30, 5)]
    fake.scores["v1"] = 0.9
    headers = platform_admin.headers
    refresh = client.post(f"{A}/video/refresh", json={"slugs": ["air-squat"]}, headers=headers)
    assert refresh.status_code == 202
    work(session, session_factory, library_settings, store)
    result = client.get(f"{A}/jobs/videos/{refresh.json['id']}", headers=headers).json[
        "returnValue"
    ]
    assert result["discover"]["covered"] == 1
    assert result["rank"]["summary"]["filled"] == 1
    row = by_slug(session, "air-squat")
    demoted = client.post(f"{A}/{row.id}/video/demote", headers=headers)
    assert demoted.json["outcome"] == "cleared"
    missing = client.post(f"{A}/{row.id}/video/verify", headers=headers)
    assert (missing.status_code, missing.json["code"]) == (409, "movement_video_missing")


def test_without_keys_discover_rank_and_cues_answer_disabled(
    session, platform_admin, settings, session_factory, clock, store
):
    from webhooks.app import create_app

    client = create_app(
        settings, session_factory=session_factory, clock=clock, store=store
    ).test_client()
    headers = platform_admin.headers
    for path in ("video/discover", "video/refresh", "video/rank", "cues"):
        response = client.post(f"{A}/{path}", json={}, headers=headers)
        assert response.status_code == 200, path
        assert "disabled" in response.json, path
    thumbnails = client.post(f"{A}/thumbnails", json={}, headers=headers)
    assert thumbnails.json["enqueued"] == 0
    assert "disabled" in thumbnails.json
    assert session.scalars(select(MovementJob)).all() == []


def test_a_failing_job_is_retried_then_failed_with_its_error(
    session, session_factory, library_settings, store, fake
):
    from gymctl.movements.jobs import enqueue

    session.add(Movement(slug="x", name="x"))
    job = enqueue(session, "cues", {}, now=NOW)
    fake.fail_status["/v1/chat/completions"] = 500
    library = library_from_settings(library_settings, store=store)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        job.run_after = NOW
        session.commit()
        work_jobs(session_factory, library, now=NOW)
        session.refresh(job)
        assert job.attempts == attempt
    assert job.status == "failed"
    assert job.error.startswith("llm_unavailable")


def test_a_job_records_when_it_really_started_and_finished(
    session, session_factory, library_settings, store
):
    """Start and finish used to be the same instant (the sweep's now) whatever the job took."""
    from gymctl.movements.jobs import enqueue

    session.add(Movement(slug="x", name="x"))
    jobs = [enqueue(session, "cues", {"dryRun": True}, now=NOW) for _ in range(2)]
    ticks = iter(range(100))  # each reading of the sweep's stopwatch is one second later
    library = library_from_settings(library_settings, store=store)
    session.commit()
    work_jobs(session_factory, library, now=NOW, monotonic=lambda: float(next(ticks)))
    session.expire_all()
    first, second = sorted(jobs, key=lambda job: job.started_at)
    assert NOW < first.started_at < first.finished_at <= second.started_at < second.finished_at
    # Three readings: the claim, the lease renewed before the model's answer, the finish.
    assert (first.finished_at - first.started_at).total_seconds() == 2


def test_the_daemon_row_works_the_queue(session, session_factory, library_settings, fake):
    from gymctl.movements.jobs import enqueue

    assert "movement_jobs" in {job.name for job in JOBS}
    session.add(Movement(slug="x", name="x"))
    job = enqueue(session, "cues", {"dryRun": True}, now=NOW)
    session.commit()
    assert movement_jobs(session_factory, NOW, library_settings) == {
        "succeeded": 1,
        "retried": 0,
        "failed": 0,
    }
    session.refresh(job)
    assert job.result["filled"] == 1


def test_a_worker_stopped_midway_keeps_the_jobs_it_finished(
    session, session_factory, library_settings, store, monkeypatch
):
    """A job per transaction: a worker killed in its second job has committed the first
    one's result (read at once at GET /jobs), and the second, claimed in a transaction of its
    own, stays running with nothing of its work written until its lease ends (then the next
    sweep takes it again: tests/movements/test_job_lease.py). In one transaction for the
    sweep, the kill forgot the finished job too."""
    from gymctl.movements import jobs as queue

    session.add(Movement(slug="x", name="x"))
    jobs = {queue.enqueue(session, "cues", {"dryRun": True}, now=NOW) for _ in range(2)}
    session.commit()
    real, runs = queue.run_job, []

    def stopped_in_the_second(session, library, job, now, checkpoint):
        runs.append(job.id)
        if len(runs) == 2:
            raise SystemExit("the daemon was stopped")
        return real(session, library, job, now, checkpoint)

    monkeypatch.setattr(queue, "run_job", stopped_in_the_second)
    library = library_from_settings(library_settings, store=store)
    with pytest.raises(SystemExit):
        work_jobs(session_factory, library, now=NOW)
    session.expire_all()
    [first] = [job for job in jobs if job.id == runs[0]]
    [second] = [job for job in jobs if job.id == runs[1]]
    assert (first.status, first.result["filled"]) == ("succeeded", 1)
    assert (second.status, second.attempts, second.result) == ("running", 1, None)
    assert second.run_after > NOW  # leased: no sweep takes it before the lease ends


def own_movement(session, gym, **fields):
    row = Movement(slug="house-special", name="House Special", organization_id=gym.id, **fields)
    session.add(row)
    session.commit()
    return row


def put_thumbnail(client, gym, movement_id, data, by=Role.coach):
    return client.put(
        f"/organizations/{gym.id}/exercises/{movement_id}/thumbnail",
        data={"file": (io.BytesIO(data), "t.png")},
        headers=gym[by].headers,
        content_type="multipart/form-data",
    )


def test_a_gym_uploads_its_own_movements_thumbnail(client, session, gym, store):
    row = own_movement(session, gym)
    response = put_thumbnail(client, gym, row.id, png_bytes((300, 200)))
    assert response.status_code == 200, response.json
    url = response.json["thumbnailUrl"]
    assert url.startswith(
        f"https://images.example.test/movements/thumbnails/{gym.id}/house-special-"
    )
    assert store.get(url.removeprefix("https://images.example.test/")).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("canonical", 403, "movement_not_owned"),
        ("gif", 400, "movement_thumbnail_invalid"),
        ("huge", 413, "movement_thumbnail_too_large"),
        ("member", 403, "permission_denied"),
        ("other_gym", 404, "movement_not_found"),
    ],
)
def test_thumbnail_upload_refusals_change_nothing(client, session, gym, case, status, code):
    row = own_movement(session, gym)
    target, data, by = row.id, png_bytes(), Role.coach
    if case == "canonical":
        canonical = Movement(slug="canonical", name="Canonical")
        session.add(canonical)
        session.commit()
        target = canonical.id
    elif case == "gif":
        data = b"GIF89a" + b"\x00" * 100
    elif case == "huge":
        data = b"\x89PNG\r\n\x1a\n" + b"\x00" * (5 * 1024 * 1024)
    elif case == "member":
        by = Role.member
    elif case == "other_gym":
        other = Movement(
            slug="theirs", name="Theirs", organization_id=factories.organization(session).id
        )
        session.add(other)
        session.commit()
        target = other.id
    before = snapshot(session)
    response = put_thumbnail(client, gym, target, data, by=by)
    assert (response.status_code, response.json["code"]) == (status, code)
    assert snapshot(session) == before


def test_members_report_a_video_and_the_third_demotes(client, session, gym):
    row = own_movement(
        session,
        gym,
        video_url="https://www.youtube.com/watch?v=bad",
        video_status="auto",
        video_candidates=[],
    )
    people = [gym[Role.member], gym[Role.coach], gym[Role.admin]]
    answers = [
        client.post(
            f"/organizations/{gym.id}/exercises/{row.id}/video/report",
            json={"reason": "wrong movement"},
            headers=person.headers,
        ).json
        for person in people
    ]
    assert [a["demoted"] for a in answers] == [False, False, True]
    assert answers[-1]["videoUrl"] is None


def test_a_thumbnail_upload_needs_one_file_part(client, session, gym):
    row = own_movement(session, gym)
    response = client.put(
        f"/organizations/{gym.id}/exercises/{row.id}/thumbnail",
        json={"file": "x"},
        headers=gym[Role.coach].headers,
    )
    assert (response.status_code, response.json["code"]) == (400, "movement_thumbnail_multipart")


def test_a_thumbnail_upload_without_a_public_base_is_409(
    session, gym, settings, session_factory, clock, store
):
    from webhooks.app import create_app

    client = create_app(
        settings, session_factory=session_factory, clock=clock, store=store
    ).test_client()
    row = own_movement(session, gym)
    before = snapshot(session)
    response = put_thumbnail(client, gym, row.id, png_bytes())
    assert (response.status_code, response.json["code"]) == (409, "thumbnails_disabled")
    assert snapshot(session) == before
