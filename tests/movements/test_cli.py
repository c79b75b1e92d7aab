"""`gymctl movements ...` on the embedded default (SQLite, folder store, local model): the same
workflow as the admin routes, refusals as codes and exit 1."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.movements.conftest import DATA, LIBRARY_KEY
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)

OPERATOR = ("--operator", "user_demo_owner")


def audit_actors(home_env) -> dict[str, set]:  # noqa: F811
    """action -> the actors of its audit rows, read from the quick start's SQLite database."""
    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT a.action, u.identity_id FROM audit_log a LEFT JOIN users u"
            " ON u.id = a.actor_user_id WHERE a.action LIKE 'movements.%'"
        ).fetchall()
    actors: dict[str, set] = {}
    for action, actor in rows:
        actors.setdefault(action, set()).add(actor)
    return actors


def test_seed_duplicates_merge_and_alias_change_from_the_command_line(home_env):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    published = Path(home_env["GYMCTL_HOME"]) / "objects" / LIBRARY_KEY
    published.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA, published)

    nobody = gymctl(
        home_env, "movements", "seed", LIBRARY_KEY, "--operator", "user_nobody", check=False
    )
    assert nobody.returncode == 1
    assert "operator_user_required" in nobody.stderr
    assert audit_actors(home_env) == {}  # refused before any work
    # A key no object can be stored at ("", "../x", "a//b") was a crash in the store's check.
    for key in ("", "../x", "libraries//a.json"):
        malformed = gymctl(home_env, "movements", "seed", key, *OPERATOR, "--json", check=False)
        assert malformed.returncode == 1, malformed.stderr
        assert json.loads(malformed.stdout)["code"] == "library_file_not_found"
    seeded = json.loads(
        gymctl(home_env, "movements", "seed", LIBRARY_KEY, *OPERATOR, "--json").stdout
    )
    assert (seeded["created"], seeded["model"]) == (873, "wordllama-l2-supercat-256")

    report = json.loads(gymctl(home_env, "movements", "duplicates", "--json").stdout)
    pair = next(p for p in report["pairs"] if p["a"]["slug"] == "decline-smith-press")
    spec = f"{pair['a']['id']}:{pair['b']['id']}"
    dry = json.loads(
        gymctl(home_env, "movements", "merge", spec, *OPERATOR, "--dry-run", "--json").stdout
    )
    assert dry["pairs"][0]["outcome"] == "would_merge"
    # The dry run applies the pairs in order, as the real run: the second winner is the loser.
    back = f"{pair['b']['id']}:{pair['a']['id']}"
    both = gymctl(
        home_env, "movements", "merge", spec, back, *OPERATOR, "--dry-run", "--json", check=False
    )
    assert (both.returncode, json.loads(both.stdout)["code"]) == (1, "merge_winner_deleted")
    merged = json.loads(gymctl(home_env, "movements", "merge", spec, *OPERATOR, "--json").stdout)
    assert merged["pairs"][0]["outcome"] == "merged"

    change = gymctl(
        home_env,
        "movements",
        "alias-change",
        pair["a"]["id"],
        "Smith machine decline press",
        *OPERATOR,
        "--json",
    )
    assert json.loads(change.stdout)["after"] == []
    refused = gymctl(
        home_env,
        "movements",
        "alias-change",
        pair["a"]["id"],
        "no such alias",
        *OPERATOR,
        check=False,
    )
    assert refused.returncode == 1
    assert "alias_not_found" in refused.stderr

    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:  # a video to verify and demote
        connection.execute(
            "UPDATE movements SET video_url = 'https://v.example.test/1', video_status = 'auto'"
            " WHERE slug = 'decline-smith-press'"
        )
    mid = pair["a"]["id"]
    gymctl(home_env, "movements", "video", "verify", mid, *OPERATOR, "--json")
    gymctl(home_env, "movements", "video", "demote", mid, *OPERATOR, "--json")
    assert audit_actors(home_env) == {
        action: {"user_demo_owner"}
        for action in (
            "movements.library_seeded",
            "movements.merged",
            "movements.alias_changed",
            "movements.video_verified",
            "movements.video_demoted",
        )
    }

    collisions = json.loads(gymctl(home_env, "movements", "alias-collisions", "--json").stdout)
    assert any(c["term"] == "squatwithband" for c in collisions["aliasCollisions"])
    disabled = json.loads(
        gymctl(home_env, "movements", "video", "discover", *OPERATOR, "--json").stdout
    )
    assert disabled["disabled"].startswith("video search is disabled")
    table = gymctl(home_env, "movements", "duplicates")
    assert "1 candidate pairs" in table.stdout
    assert "squatwithband" in table.stdout


def test_a_malformed_pair_is_a_coded_refusal(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    refused = gymctl(home_env, "movements", "merge", "not-a-pair", *OPERATOR, check=False)
    assert refused.returncode == 1
    assert "merge_pair_invalid" in refused.stderr
