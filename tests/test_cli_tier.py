"""`gymctl members tier ORG TIER --operator WHO` on the demo gym, both engines (s55): the
function of PUT /admin/organizations/:orgId/tier (tests/access/test_tiers.py)."""

from __future__ import annotations

import json

import pytest

from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)

OPERATOR = ("--operator", "user_demo_owner")


@pytest.fixture
def demo(home_env, committed_database):  # noqa: F811
    home_env["GYMCTL_DATABASE_URL"] = committed_database
    gymctl(home_env, "quickstart", "--json")
    return home_env


def test_an_operator_puts_the_demo_gym_on_a_tier(demo):
    first = json.loads(
        gymctl(demo, "members", "tier", "demo-gym", "elite", *OPERATOR, "--json").stdout
    )
    assert (first["tier"], first["changed"], first["activeMemberCap"]) == ("elite", True, None)
    again = json.loads(
        gymctl(demo, "members", "tier", "demo-gym", "elite", *OPERATOR, "--json").stdout
    )
    assert again["changed"] is False
    typo = gymctl(demo, "members", "tier", "demo-gym", "platinum", *OPERATOR, check=False)
    assert typo.returncode == 2, typo.stderr
    assert "'platinum' is not one of: starter, growth, elite" in typo.stderr
