"""A cancelled class gives back the pack sessions its ended seats kept (bookings.quota: "The
session is given back (+1) when the booking ends unused: ... or its class cancelled"; s57: a
class cancelled after a check-in at the door never took place). A hunt in s63 found a seat
staff cancelled (or removed) after its check-in, which keeps its session as used, losing that
session for good when the class was then cancelled: the cancel gave back only the active
seats', and the row can never be revived into a cancelled class."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import attendance, book, cancel_class, schedule
from gymctl.errors import DomainError
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import book_seat
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

STARTS = NOW + timedelta(hours=2)
DOOR = STARTS - timedelta(minutes=50)  # check-in opens an hour before the class


def _staff_cancel(session, gym, seat):
    book.cancel(session, gym.organization.id, seat.id, actor_user_id=gym.owner.id,
                by_staff=True, now=DOOR + timedelta(minutes=5))  # fmt: skip


def _staff_remove(session, gym, seat):
    book.remove(session, gym.organization.id, seat.id, actor_user_id=gym.owner.id,
                now=DOOR + timedelta(minutes=5))  # fmt: skip


@pytest.mark.parametrize("ended_by", [_staff_cancel, _staff_remove])
def test_a_class_cancelled_gives_back_the_session_a_seat_ended_after_check_in_kept(
    session, gym, ended_by
):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=3)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=STARTS, now=NOW)
    seat = book_seat(session, gym, row)
    attendance.check_in(session, gym.organization.id, seat.id, method=CheckinMethod.staff,
                        actor_user_id=gym.owner.id, now=DOOR)  # fmt: skip
    ended_by(session, gym, seat)
    assert pack.sessions_remaining == 2  # a seat ended after its check-in is a seat used

    cancel_class.cancel_session(
        session,
        gym.organization.id,
        row.id,
        actor_user_id=gym.owner.id,
        now=DOOR + timedelta(minutes=20),
    )
    session.commit()

    session.expire_all()
    assert pack.sessions_remaining == 3
    assert seat.subscription_id is None  # given back once
    with pytest.raises(DomainError) as refused:
        cancel_class.cancel_session(
            session, gym.organization.id, row.id, actor_user_id=gym.owner.id, now=DOOR
        )
    assert refused.value.code == "session_cancelled"
    session.rollback()
    assert pack.sessions_remaining == 3
