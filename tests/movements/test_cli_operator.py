"""`gymctl movements ...` as an operator runs it, on both engines: every command that writes the
library names its operator (refused before any work when that is no user) and is audited as
them; an alias change run again after a lost terminal answers that it is done."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from gymctl.db import get_engine
from tests.movements.conftest import LIBRARY_KEY
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)

OPERATOR = ("--operator", "user_demo_owner")
NOBODY = ("--operator", "user_nobody")
SLUG = "barbell-squat"


@pytest.fixture
def library(home_env, committed_database, fakes):  # noqa: F811
    """The quick start on the engine, its library seeded, every outside service the fakes."""
    fakes.requests.clear()
    fakes.videos.clear()
    fakes.scores.clear()
    fakes.videos["Barbell Squat demo"] = [("vid00000001", "chan", 60, 1000)]
    fakes.scores["vid00000001"] = 0.9
    home_env |= {
        "GYMCTL_DATABASE_URL": committed_database,
        "GYMCTL_VIDEO_SEARCH_URL": f"{fakes.url}/yt",
        "GYMCTL_VIDEO_SEARCH_KEY": "yt-key",
        "GYMCTL_LLM_URL": f"{fakes.url}/v1",
        "GYMCTL_LLM_KEY": "llm-key",
        "GYMCTL_IMAGE_GEN_URL": f"{fakes.url}/v1",
        "GYMCTL_IMAGE_GEN_KEY": "img-key",
        "GYMCTL_PUBLIC_IMAGES_BASE_URL": "https://images.example.test",
    }
    gymctl(home_env, "quickstart", "--json")
    gymctl(home_env, "movements", "seed", LIBRARY_KEY, *OPERATOR, "--json")
    with get_engine(committed_database).begin() as connection:  # one row left to illustrate
        connection.execute(
            text("UPDATE movements SET thumbnail_url = 'https://images.example.test/kept.png'"
                 " WHERE slug <> :slug"),
            {"slug": SLUG},
        )  # fmt: skip
    return home_env, committed_database, fakes


def audits(url: str) -> list[tuple[str, str | None]]:
    """(action, the actor's identity subject) of every library audit row but the seed's."""
    with get_engine(url).connect() as connection:
        return sorted(
            connection.execute(
                text(
                    "SELECT a.action, u.identity_id FROM audit_log a LEFT JOIN users u"
                    " ON u.id = a.actor_user_id WHERE a.action LIKE 'movements.%'"
                    " AND a.action <> 'movements.library_seeded'"
                )
            ).all()
        )


def library_state(url: str) -> list[tuple]:
    with get_engine(url).connect() as connection:
        return connection.execute(
            text(
                "SELECT slug, thumbnail_url, video_url, video_candidates, cues, aliases"
                " FROM movements ORDER BY slug"
            )
        ).all()


WRITES = [
    ("cues", "--limit", "1"),
    ("thumbnails",),
    ("video", "discover", "--slug", SLUG),
    ("video", "rank", "--slug", SLUG),
    ("video", "refresh", "--slug", SLUG),
]


def test_every_library_write_needs_an_operator_and_is_audited_as_them(library):
    """cues, thumbnails and video discover/rank/refresh wrote with no operator, and their audit
    rows (where they had one) named no actor."""
    env, url, fakes = library
    before = library_state(url)
    for command in WRITES:
        missing = gymctl(env, "movements", *command, "--json", check=False)
        assert missing.returncode == 2, (command, missing.stdout, missing.stderr)
        assert json.loads(missing.stdout)["message"] == "Missing option '--operator'."
        nobody = gymctl(env, "movements", *command, *NOBODY, "--json", check=False)
        assert nobody.returncode == 1, (command, nobody.stdout, nobody.stderr)
        assert json.loads(nobody.stdout)["code"] == "operator_user_required"
    assert library_state(url) == before  # refused before any work
    assert audits(url) == []
    assert fakes.requests == []

    for command in WRITES:
        done = gymctl(env, "movements", *command, *OPERATOR, "--json", check=False)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert audits(url) == [
        ("movements.cues_written", "user_demo_owner"),
        ("movements.thumbnail_generated", "user_demo_owner"),
        ("movements.videos_discovered", "user_demo_owner"),
        ("movements.videos_discovered", "user_demo_owner"),
        ("movements.videos_ranked", "user_demo_owner"),
        ("movements.videos_ranked", "user_demo_owner"),
    ]


def test_an_alias_change_run_again_answers_that_it_is_done(library):
    """Re-run after a lost terminal, the same alias change answered alias_not_found (exit 1),
    as if the operator had typed a term the movement never held."""
    env, url, _ = library
    report = json.loads(gymctl(env, "movements", "duplicates", "--json").stdout)
    pair = next(p for p in report["pairs"] if p["a"]["slug"] == "decline-smith-press")
    gymctl(env, "movements", "merge", f"{pair['a']['id']}:{pair['b']['id']}", *OPERATOR)
    change = ("movements", "alias-change", pair["a"]["id"], "Smith machine decline press")
    first = json.loads(gymctl(env, *change, *OPERATOR, "--json").stdout)
    before = library_state(url)

    again = gymctl(env, *change, *OPERATOR, "--json", check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (first["outcome"], first["after"]) == ("removed", [])
    answer = json.loads(again.stdout)
    assert (answer["outcome"], answer["removed"], answer["after"]) == ("already_removed", [], [])
    table = gymctl(env, *change[:-1], "smith machine decline presses", *OPERATOR)
    assert "already_removed" in table.stdout  # any spelling of the term
    assert library_state(url) == before
    assert [a for a, _ in audits(url)].count("movements.alias_changed") == 1

    unknown = gymctl(env, *change[:-1], "never an alias", *OPERATOR, "--json", check=False)
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["code"] == "alias_not_found"
