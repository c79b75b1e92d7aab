"""`gymctl billing sweep` on the embedded default, in a subprocess."""

from __future__ import annotations

import json

from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_sweep_dry_run_and_unknown_sweep(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    report = json.loads(
        gymctl(home_env, "billing", "sweep", "catch-up", "--dry-run", "--json").stdout
    )
    assert report["dryRun"] is True
    assert report["organizations"] == []
    ran = json.loads(gymctl(home_env, "billing", "sweep", "recovery", "--json").stdout)
    assert ran["errors"] == 0
    # An unknown sweep is a usage mistake (exit 2) that still names its code and the sweeps.
    mistake = gymctl(home_env, "billing", "sweep", "nightly", "--json", check=False)
    assert mistake.returncode == 2
    answer = json.loads(mistake.stdout)
    assert answer["code"] == "usage_error"
    assert "unknown_sweep: 'nightly' is not one of: lifecycle, catch-up" in answer["message"]


def test_lifecycle_sweep_dry_run_moves_nothing(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    report = json.loads(
        gymctl(home_env, "billing", "sweep", "lifecycle", "--dry-run", "--json").stdout
    )
    assert report["dryRun"] is True
    assert report["expired"] == 0
