"""Exploration only: runs when GYMCTL_HUNT is set (skipped otherwise)."""

from __future__ import annotations

import os

import pytest

from tests.api import seed
from tests.billing.conftest import card_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(not os.environ.get("GYMCTL_HUNT"), reason="exploration only")


@pytest.mark.parametrize(
    "engine", [os.environ.get("GYMCTL_HUNT_ENGINE", "postgresql")], indirect=True
)
def test_explore(session, idp, suite_app, card_server, fake_gym, connection, clock):  # noqa: F811
    from tests.hunt_hostile.explore_fuzz import run

    client = suite_app.test_client()
    a = seed.make_tenant(session, idp, name="Gym A", tag="gyma")
    seed.seed(client, session, a, card_server, fake_gym)
    seed.loaded(session, a)
    session.close()
    found = run(client, connection, a, clock, idp, out=os.environ["GYMCTL_HUNT"])
    assert found == []
