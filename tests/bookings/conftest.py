"""A gym with a class type and a session tomorrow morning; helpers to add members."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import schedule
from gymctl.models import Membership, Role
from tests import factories
from tests.billing.factories import make_gym
from tests.conftest import NOW

TOMORROW = NOW + timedelta(days=1)


def add_member(session, organization) -> Membership:
    user = factories.user(session)
    return factories.membership(session, user=user, organization=organization, role=Role.member)


@pytest.fixture
def gym(session):
    return make_gym(session)


@pytest.fixture
def class_type(session, gym):
    return schedule.create_class_type(
        session,
        gym.organization.id,
        name="Strength 101",
        default_capacity=2,
        duration_minutes=60,
        now=NOW,
    )


@pytest.fixture
def class_session(session, class_type):
    return schedule.schedule_session(session, class_type, starts_at=TOMORROW, now=NOW)
