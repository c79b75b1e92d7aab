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
    refused = gymctl(home_env, "billing", "sweep", "nightly", check=False)
    assert refused.returncode == 1
    assert "unknown_sweep" in refused.stderr + refused.stdout


def test_lifecycle_sweep_dry_run_moves_nothing(home_env):  # noqa: F811
    gymctl(home_env, "db", "upgrade")
    report = json.loads(
        gymctl(home_env, "billing", "sweep", "lifecycle", "--dry-run", "--json").stdout
    )
    assert report["dryRun"] is True
    assert report["expired"] == 0
