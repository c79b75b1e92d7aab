"""`gymctl movements ...` on the embedded default (SQLite, folder store, local model): the same
workflow as the admin routes, refusals as codes and exit 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.movements.conftest import DATA, LIBRARY_KEY
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_seed_duplicates_merge_and_alias_change_from_the_command_line(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    published = Path(home_env["GYMCTL_HOME"]) / "objects" / LIBRARY_KEY
    published.parent.mkdir(parents=True)
    shutil.copy(DATA, published)

    seeded = json.loads(gymctl(home_env, "movements", "seed", LIBRARY_KEY, "--json").stdout)
    assert (seeded["created"], seeded["model"]) == (873, "wordllama-l2-supercat-256")

    report = json.loads(gymctl(home_env, "movements", "duplicates", "--json").stdout)
    pair = next(p for p in report["pairs"] if p["a"]["slug"] == "decline-smith-press")
    spec = f"{pair['a']['id']}:{pair['b']['id']}"
    dry = json.loads(gymctl(home_env, "movements", "merge", spec, "--dry-run", "--json").stdout)
    assert dry["pairs"][0]["outcome"] == "would_merge"
    merged = json.loads(gymctl(home_env, "movements", "merge", spec, "--json").stdout)
    assert merged["pairs"][0]["outcome"] == "merged"

    change = gymctl(
        home_env,
        "movements",
        "alias-change",
        pair["a"]["id"],
        "Smith machine decline press",
        "--json",
    )
    assert json.loads(change.stdout)["after"] == []
    refused = gymctl(
        home_env,
        "movements",
        "alias-change",
        pair["a"]["id"],
        "Smith machine decline press",
        check=False,
    )
    assert refused.returncode == 1
    assert "alias_not_found" in refused.stderr

    collisions = json.loads(gymctl(home_env, "movements", "alias-collisions", "--json").stdout)
    assert any(c["term"] == "squatwithband" for c in collisions["aliasCollisions"])
    disabled = json.loads(gymctl(home_env, "movements", "video", "discover", "--json").stdout)
    assert disabled["disabled"].startswith("video search is disabled")
    table = gymctl(home_env, "movements", "duplicates")
    assert "1 candidate pairs" in table.stdout
    assert "squatwithband" in table.stdout


def test_a_malformed_pair_is_a_coded_refusal(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    refused = gymctl(home_env, "movements", "merge", "not-a-pair", check=False)
    assert refused.returncode == 1
    assert "merge_pair_invalid" in refused.stderr
