"""A class the external system removed gives back the pack sessions its ended seats kept, as a
class staff cancel does (bookings.quota.give_back_kept; s63): a seat staff cancelled after its
check-in at the door counted as used, but the class never took place."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import attendance, book
from gymctl.models import BookingStatus, Role
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from tests import factories
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bridge.test_inbound import STARTS, _class, _reconcile, _settle
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


def test_a_class_removed_there_gives_back_the_session_a_seat_ended_after_check_in_kept(
    session, org, connected, fake, account, bridge_settings, clock
):
    make_billing_settings(session, org, plan_required_to_book=True)
    user = factories.user(session, name="Dana Levi")
    member = factories.membership(session, user=user, organization=org, role=Role.member)
    pack = make_subscription(session, Gym.of(member), PlanType.pack, sessions_remaining=3)
    staff = factories.membership(
        session, user=factories.user(session, name="Coach Kim"), organization=org, role=Role.coach
    )
    row, external = _class(session, org, fake, account, capacity=5)
    seat = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()
    _settle(session, org, bridge_settings, clock)
    door = STARTS - timedelta(minutes=50)
    attendance.check_in(session, org.id, seat.id, method=CheckinMethod.staff,
                        actor_user_id=staff.user_id, now=door)  # fmt: skip
    book.cancel(session, org.id, seat.id, actor_user_id=staff.user_id, by_staff=True,
                now=door + timedelta(minutes=5))  # fmt: skip
    session.commit()
    assert (seat.status, pack.sessions_remaining) == (BookingStatus.cancelled, 2)

    account.classes.pop(external)
    account.registrations.clear()
    summary = _reconcile(session, connected, org, bridge_settings, clock)

    assert summary.polls["applied"]["class_removed:cancelled"] == 1
    session.expire_all()
    assert row.cancelled_at is not None
    assert pack.sessions_remaining == 3
