"""s55 (a hunter's test): a card plan's term bought online and at the desk (spec B 2.1, 3: a
plan holds "a period"; "pack or drop-in past validity -> expired")."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded


def test_a_plan_of_ten_days_bought_online_runs_ten_days_as_at_the_desk(life):  # noqa: F811
    """A card plan with validityDays 10 and no renewal interval: sold at the desk it runs 10
    days (plans.term_from reads validity_days first); bought through its hosted page it runs a
    calendar month (attempts.grant_period read only interval_months, `or 1`): the online
    buyer was granted three times what the plan sells. Now its validity, as at the desk."""
    plan = create_plan(life.client, life.org, name="Ten days", intervalMonths=None, validityDays=10)
    sub_id = life.buy(plan)
    online = life.subscription(sub_id)
    assert online.current_period_end - online.current_period_start == timedelta(days=10)
