"""A waitlisted member passed over for a debt past its grace pays it: the seat that freed
meanwhile is theirs, whichever payment restores the debt (the desk's, or the collector's retry,
which the member's own pay-debt runs too)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import collector
from gymctl.bookings import book, schedule
from gymctl.models import BookingStatus
from gymctl.models.billing import AttemptKind, PlanType
from tests.billing.cards import Sandbox, connect_card_provider, save_test_card
from tests.billing.factories import TEST_CIPHER, make_subscription
from tests.bookings.conftest import add_member, book_seat, cancel_own
from tests.conftest import NOW
from tests.factories import Gym
from tests.retention.conftest import pay_at_desk

pytestmark = pytest.mark.embedded

PAST_GRACE = NOW + timedelta(days=6)


def _passed_over(session, gym, **plan):
    """The member waits in a class of one seat, in debt since two days ago; past the debt's
    grace the seated member cancels, and the line passes them over: the seat stays free."""
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=10), now=NOW)
    other = add_member(session, gym.organization)
    make_subscription(session, Gym.of(other), PlanType.card)
    seated = book_seat(session, gym, row, other)
    owing = make_subscription(
        session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2), **plan
    )
    waiting = book_seat(session, gym, row)  # inside the grace: books, waitlisted
    assert waiting.status is BookingStatus.waitlisted
    cancel_own(session, gym, seated, at=PAST_GRACE)  # the seat frees: the debt blocks them
    session.expire_all()
    assert waiting.status is BookingStatus.waitlisted
    session.commit()
    return row, owing, waiting


def test_a_debt_paid_at_the_desk_gives_the_waiting_member_the_seat_left_free(engine, session, gym):
    """book.promote_waitlist: "A turn comes to one who may book now ... One who may not keeps
    their place in the line and is passed over". Paid, the debt refuses nothing: the member
    first in line took no seat until the class started and the closing pass cancelled them
    (waitlist_closed) beside the empty one."""
    row, owing, waiting = _passed_over(session, gym)

    pay_at_desk(session, gym, owing, now=PAST_GRACE + timedelta(hours=1))

    session.expire_all()
    assert waiting.status is BookingStatus.confirmed
    assert book.confirmed_count(session, row.id) == 1


def test_a_debt_the_collector_collects_gives_the_waiting_member_the_seat_left_free(
    engine, session, session_factory, gym, tmp_path
):
    sandbox = Sandbox(tmp_path)
    connect_card_provider(session, gym, since=NOW - timedelta(days=30))
    card = save_test_card(session, gym, sandbox.provider, sandbox.simulator)
    row, owing, waiting = _passed_over(
        session,
        gym,
        payment_method_id=card.id,
        current_period_start=NOW - timedelta(days=32),
        current_period_end=NOW - timedelta(days=2),
        next_charge_date=NOW - timedelta(days=2),  # the renewal it owes, retried
    )

    outcome = collector.collect_subscription(
        session_factory,
        owing.id,
        sandbox.provider,
        now=PAST_GRACE + timedelta(hours=1),
        cipher=TEST_CIPHER,
        summary=collector.Summary(),
        kind=AttemptKind.debt,
    )

    assert outcome == "charged"
    session.expire_all()
    assert waiting.status is BookingStatus.confirmed
    assert book.confirmed_count(session, row.id) == 1
