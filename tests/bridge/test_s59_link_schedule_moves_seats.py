"""`gymctl bridge link ORG schedule SESSION CLASS` is the owner's pick of a session's external
class by another door, so it does what that pick does (classes.link_class, decisions issue 18:
"the owner links one [...], which retries the session's parked bookings", and a pick that
replaces another moves the seats registered at the old class to the new one). It wrote the map
alone: the members' seats stayed registered at the old external class (counted there and never
at the new one), and the old class's own row was dropped from the map until the next poll."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from gymctl.bookings import schedule
from gymctl.bridge import entity_map
from gymctl.bridge.connection import connect
from gymctl.cli import app as gymctl_app
from gymctl.db import get_engine
from gymctl.models import User
from gymctl.models.bridge import EntityType
from tests import factories
from tests.bridge.conftest import API_KEY, run
from tests.bridge.test_classes import _registered_at, _seat_sent_to_the_first_of_two
from tests.conftest import NOW


@pytest.fixture
def world(committed_database, monkeypatch, frozen_clock, fake, bridge_settings):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_database)
    account = fake.add_account(API_KEY, box_id="777")
    session = Session(get_engine(committed_database), expire_on_commit=False)
    org = factories.organization(session, name="Iron Temple")
    session.add(User(identity_id="user_ops", email="ops@example.test", created_at=NOW,
                     updated_at=NOW))  # fmt: skip
    session.commit()
    connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    yield session, org, account
    session.close()


def test_an_operators_schedule_link_moves_the_seats_registered_at_the_old_class(
    world, fake, bridge_settings, frozen_clock
):
    session, org, account = world
    first, chosen, row = _seat_sent_to_the_first_of_two(
        session, org, fake, account, bridge_settings, frozen_clock
    )
    session.commit()
    (user_id,) = _registered_at(account, first)
    frozen_clock.set(NOW + timedelta(minutes=3))
    result = CliRunner().invoke(
        gymctl_app,
        ["bridge", "link", org.slug, "schedule", str(row.id), chosen,
         "--operator", "user_ops", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    session.expire_all()
    run(session, org.id, bridge_settings, frozen_clock)
    assert (_registered_at(account, first), _registered_at(account, chosen)) == ([], [user_id])
    old = entity_map.find_external(session, org.id, EntityType.schedule, first)
    assert old is not None
    assert old.platform_id is None  # back among the unclaimed classes
    assert json.loads(result.stdout)["seatsMoved"] == 1


def test_an_operators_schedule_link_to_a_class_never_polled_is_refused(world, frozen_clock):
    """As the owner's pick is: the map never names a class the poll has not seen."""
    session, org, _account = world
    kind = schedule.create_class_type(session, org.id, name="WOD", default_capacity=5,
                                      duration_minutes=60, now=NOW)  # fmt: skip
    row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=1), now=NOW)
    session.commit()
    result = CliRunner().invoke(
        gymctl_app,
        ["bridge", "link", org.slug, "schedule", str(row.id), "4242",
         "--operator", "user_ops", "--json"],
    )  # fmt: skip
    assert getattr(result.exception, "code", None) == "bridge_class_not_found", result.output
    assert entity_map.find(session, org.id, EntityType.schedule, row.id) is None
