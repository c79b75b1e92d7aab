"""A movement job's unit writes onto the row as stored when its answer comes back, and only
if the row still takes it (a helper's audit of stale reads, s61).

The cues and the video discovery pick their rows and build their requests in the job's first
transaction, then commit before each outside call (units.py). The cues wrote the model's text
onto a row filled meanwhile (a merge carrying the loser's cues, another run) or merged away,
against "without rebuild only rows short of a count are filled"; the discovery appended
candidates to a row made manual meanwhile ("a manual video is never touched"). Both now check
the row as stored (`fresh`), as ranking already did."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from gymctl.models import Movement
from gymctl.movements.cues import write_cues
from tests.conftest import NOW
from tests.movements.test_videos import movement, run_discover

pytestmark = pytest.mark.embedded

ANSWER = {"cues": ["c1", "c2", "c3"], "commonFaults": ["f1", "f2"], "scalingOptions": ["s1", "s2"]}
CURATED = {"cues": ["keep A", "keep B", "keep C"], "common_faults": ["x", "y"],
           "scaling_options": ["p", "q"]}  # fmt: skip


class Answers:
    """The model: the same valid cues for every movement."""

    model = "stub"

    def complete_json(self, _prompt, _user):
        return dict(ANSWER), {}

    def cost_micros(self, _usage):
        return 0


def test_cues_leave_a_row_filled_or_merged_away_while_the_job_ran(session, session_factory):
    _, filled, merged = (movement(session, f"m{n}") for n in range(3))
    session.commit()
    changed: list[bool] = []

    def checkpoint() -> None:  # the job's: its transaction ends before each model call
        session.commit()
        if not changed:  # meanwhile, another writer (a merge, a rebuilt seed)
            changed.append(True)
            with session_factory() as other:
                other.execute(update(Movement).where(Movement.id == filled.id).values(**CURATED))
                other.execute(
                    update(Movement).where(Movement.id == merged.id).values(deleted_at=NOW)
                )
                other.commit()

    result = write_cues(session, Answers(), now=NOW, checkpoint=checkpoint)
    session.commit()

    assert result["filled"] == 1
    assert [row["slug"] for row in result["report"]] == ["m0"]
    stored = dict(session.execute(select(Movement.slug, Movement.cues)).all())
    assert stored == {"m0": ANSWER["cues"], "m1": CURATED["cues"], "m2": []}


def test_discovery_leaves_a_row_made_manual_while_it_searched(
    session, session_factory, library_settings, fake
):
    row = movement(session, "air-squat", name="Air Squat")
    session.commit()
    fake.videos["Air Squat demo"] = [("found", "c", 60, 1)]

    def checkpoint() -> None:
        session.commit()
        with session_factory() as other:  # staff set the video by hand meanwhile
            other.execute(
                update(Movement)
                .where(Movement.id == row.id)
                .values(video_status="manual", video_url="https://v.example.test/m")
            )
            other.commit()

    result = run_discover(session, library_settings, checkpoint=checkpoint)
    session.commit()

    assert result["candidatesAdded"] == 0
    assert session.scalar(select(Movement.video_candidates).where(Movement.id == row.id)) in (
        None,
        [],
    )
