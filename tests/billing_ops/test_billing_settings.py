"""An organization's billing settings and its charge-date schedule over HTTP (spec B 2.5, 4.3):
finance reads, the owner changes the settings, finance moves a renewal's charge date; every
refusal answers its code and changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gymctl.billing import attempts, org_settings
from gymctl.bookings import schedule
from gymctl.errors import DomainError
from gymctl.models import Role
from gymctl.models.billing import PlanType
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import audit_rows
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym  # the access tests' gym: one person per role, real tokens


@pytest.fixture
def billing(session, gym):
    """The gym on the card provider."""
    connect_card_provider(session, gym, since=NOW - timedelta(days=30))
    return gym


def _settings(gym) -> str:
    return f"/organizations/{gym.id}/billing/settings"


def _renewal(session, billing, *, due: datetime):
    return bf.make_subscription(
        session,
        billing,
        payment_method_id=bf.make_card(session, billing).id,
        next_charge_date=due,
        current_period_end=due,
    )


def test_finance_reads_the_settings_and_only_the_owner_changes_them(client, session, gym):
    defaults = client.get(_settings(gym), headers=gym[Role.admin].headers)
    assert defaults.status_code == 200
    assert defaults.json["data"] == {
        "billingGraceDays": 7,
        "billingLifecycleDay": None,
        "timezone": "UTC",
        "planRequiredToBook": False,
        "openingDay": None,
    }
    for role in (Role.coach, Role.member):
        assert client.get(_settings(gym), headers=gym[role].headers).status_code == 403
    before = snapshot(session)
    by_admin = client.patch(
        _settings(gym), json={"billingGraceDays": 3}, headers=gym[Role.admin].headers
    )
    assert (by_admin.status_code, by_admin.json["code"]) == (403, "owner_required")
    assert snapshot(session) == before

    changed = client.patch(
        _settings(gym),
        json={"billingGraceDays": 3, "billingLifecycleDay": 5, "timezone": "Pacific/Kiritimati"},
        headers=gym[Role.owner].headers,
    )

    assert changed.status_code == 200, changed.json
    expected = {
        "billingGraceDays": 3,
        "billingLifecycleDay": 5,
        "timezone": "Pacific/Kiritimati",
        "planRequiredToBook": False,
        "openingDay": None,
    }
    assert changed.json["data"] == expected
    assert client.get(_settings(gym), headers=gym[Role.admin].headers).json["data"] == expected
    [audit] = audit_rows(session, "billing.settings_changed")
    assert audit.data["after"] == expected
    assert audit.data["before"]["billingGraceDays"] == 7
    # a partial change keeps the rest; clearing the lifecycle day is a change
    cleared = client.patch(
        _settings(gym), json={"billingLifecycleDay": None}, headers=gym[Role.owner].headers
    )
    assert cleared.json["data"] == {**expected, "billingLifecycleDay": None}
    same = client.patch(
        _settings(gym), json={"billingGraceDays": 3}, headers=gym[Role.owner].headers
    )
    assert same.status_code == 200
    assert len(audit_rows(session, "billing.settings_changed")) == 2  # no change, no audit


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"timezone": "Mars/Olympus_Mons"}, 422, "timezone_invalid"),
        # Leap-second zones: PostgreSQL's AT TIME ZONE and Python's disagree by 27 s a midnight.
        ({"timezone": "right/UTC"}, 422, "timezone_invalid"),
        ({"timezone": "posix/Asia/Jerusalem"}, 422, "timezone_invalid"),
        ({"timezone": "Factory"}, 422, "timezone_invalid"),
        ({"timezone": "localtime"}, 422, "timezone_invalid"),
        ({"timezone": None}, 400, "invalid_body"),
        ({"billingGraceDays": 61}, 422, "billing_grace_days_invalid"),
        ({"billingGraceDays": -1}, 422, "billing_grace_days_invalid"),
        ({"billingGraceDays": None}, 400, "invalid_body"),
        ({"billingGraceDays": True}, 400, "invalid_body"),
        ({"billingGraceDays": "3"}, 400, "invalid_body"),
        ({"billingLifecycleDay": 29}, 422, "billing_lifecycle_day_invalid"),
        ({"billingLifecycleDay": 0}, 422, "billing_lifecycle_day_invalid"),
        ({"graceDays": 3}, 400, "invalid_body"),
        ({"billingGraceDays": 3, "timezone": "Nowhere/Else"}, 422, "timezone_invalid"),
        ({"planRequiredToBook": "yes"}, 400, "invalid_body"),
        ({"planRequiredToBook": 1}, 400, "invalid_body"),
        ({"planRequiredToBook": None}, 400, "invalid_body"),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(client, session, gym, body, status, code):
    before = snapshot(session)
    answer = client.patch(_settings(gym), json=body, headers=gym[Role.owner].headers)
    assert (answer.status_code, answer.json["code"]) == (status, code)
    assert snapshot(session) == before


def test_the_owner_requires_a_plan_to_book_and_a_drop_in_then_books_once(client, session, gym):
    """The setting the booking rules read (a plan required; a pack or drop-in spends a
    session a booking, gymctl.bookings.quota) is the owner's to change, over HTTP as from the
    command line: without a door it was read by the rules and set by nothing."""
    class_type = schedule.create_class_type(
        session, gym.id, name="Open Gym", default_capacity=5, duration_minutes=60, now=NOW
    )
    first, second = (
        schedule.schedule_session(session, class_type, starts_at=NOW + timedelta(hours=h), now=NOW)
        for h in (2, 4)
    )
    member = gym[Role.member]
    drop_in = bf.make_subscription(session, gym, PlanType.drop_in, membership=member.membership)
    session.commit()

    def book(row):
        url = f"/organizations/{gym.id}/sessions/{row.id}/book"
        return client.post(url, headers=member.headers)

    turned_on = client.patch(
        _settings(gym), json={"planRequiredToBook": True}, headers=gym[Role.owner].headers
    )
    assert turned_on.json["data"]["planRequiredToBook"] is True
    [audit] = audit_rows(session, "billing.settings_changed")
    assert (
        audit.data["before"]["planRequiredToBook"],
        audit.data["after"]["planRequiredToBook"],
    ) == (False, True)

    booked = book(first)
    # The booking says which plan paid its seat.
    assert (booked.status_code, booked.json["data"]["subscriptionId"]) == (201, str(drop_in.id))
    before = snapshot(session)
    again = book(second)
    assert (again.status_code, again.json["code"]) == (409, "plan_sessions_used_up")
    assert snapshot(session) == before


def test_the_schedule_lists_charges_by_the_organizations_own_days(client, session, gym, billing):
    bf.make_billing_settings(session, gym.organization, timezone="Pacific/Kiritimati")
    late_evening = datetime(2026, 11, 22, 9, 30, tzinfo=UTC)  # Nov 22 23:30 in Kiritimati
    next_day = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)  # Nov 23 00:30 in Kiritimati
    overdue = _renewal(session, billing, due=NOW - timedelta(hours=1))
    first = _renewal(session, billing, due=late_evening)
    second = _renewal(session, billing, due=next_day)
    _renewal(session, billing, due=NOW + timedelta(days=40))  # beyond the window
    session.commit()

    answer = client.get(
        f"/organizations/{gym.id}/billing/charge-schedule",
        query_string={"days": 30},
        headers=gym[Role.admin].headers,
    )

    assert answer.status_code == 200, answer.json
    data = answer.json["data"]
    assert [item["subscriptionId"] for item in data["items"]] == [
        str(row.id) for row in (overdue, first, second)
    ]
    assert [item["localDate"] for item in data["items"]] == [
        "2026-11-21",
        "2026-11-22",
        "2026-11-23",
    ]
    assert data["items"][0]["overdue"] is True
    assert data["days"][1] == {"localDate": "2026-11-22", "count": 1, "amounts": {"ILS": 9900}}
    assert data["truncated"] is False
    # '\u00b2' (superscript two) passed str.isdigit() and int() refused it: a 500. Other
    # scripts' digits ('\u0967' is Devanagari one) were read as the number they stand for.
    for days in ("0", "93", "abc", "-1", "\u00b2", "\u0967", "\u0663\u0660"):
        bad = client.get(
            f"/organizations/{gym.id}/billing/charge-schedule",
            query_string={"days": days},
            headers=gym[Role.admin].headers,
        )
        assert (bad.status_code, bad.json["code"]) == (422, "schedule_days_invalid")
    coach = client.get(
        f"/organizations/{gym.id}/billing/charge-schedule", headers=gym[Role.coach].headers
    )
    assert coach.status_code == 403


def _move(client, gym, subscription, role=Role.admin, **body):
    return client.post(
        f"/organizations/{gym.id}/subscriptions/{subscription.id}/charge-date",
        json=body,
        headers=gym[role].headers,
    )


def test_finance_moves_a_renewal_and_the_collector_follows(client, session, gym, billing):
    due = NOW + timedelta(days=3)
    subscription = _renewal(session, billing, due=due)
    session.commit()
    to = NOW + timedelta(days=10)

    moved = _move(
        client,
        gym,
        subscription,
        expectedNextChargeDate=due.isoformat(),
        nextChargeDate=to.isoformat(),
    )

    assert moved.status_code == 200, moved.json
    assert moved.json["data"]["nextChargeDate"] == to.isoformat()
    session.expire_all()
    assert subscription.next_charge_date == to
    [audit] = audit_rows(session, "billing.charge_date_moved")
    assert audit.data == {"from": due.isoformat(), "to": to.isoformat()}
    skipped = attempts.begin_attempt(session, subscription.id, now=due, cipher=TEST_CIPHER)
    assert (skipped.outcome, skipped.reason) == ("skipped", "not_due")
    session.rollback()


def test_without_a_date_the_renewal_moves_to_the_lifecycle_day_at_local_midnight(
    client, session, gym, billing
):
    """billing_lifecycle_day: the day of the month the organization charges on, at midnight
    of its own time zone (Kiritimati is UTC+14: Dec 5 00:00 there is Dec 4 10:00 UTC)."""
    bf.make_billing_settings(
        session, gym.organization, timezone="Pacific/Kiritimati", billing_lifecycle_day=5
    )
    due = NOW + timedelta(days=3)
    subscription = _renewal(session, billing, due=due)
    session.commit()

    moved = _move(client, gym, subscription, expectedNextChargeDate=due.isoformat())

    assert moved.status_code == 200, moved.json
    assert moved.json["data"]["nextChargeDate"] == "2026-12-04T10:00:00+00:00"
    assert moved.json["data"]["localDate"] == "2026-12-05"


def test_moving_a_charge_date_is_refused_and_nothing_changes(client, session, gym, billing):
    due = NOW + timedelta(days=3)
    subscription = _renewal(session, billing, due=due)
    debt = bf.make_subscription(session, billing, in_debt_since=NOW - timedelta(days=1))
    held = _renewal(session, billing, due=NOW - timedelta(minutes=10))
    began = attempts.begin_attempt(session, held.id, now=NOW, cipher=TEST_CIPHER)
    assert began.outcome == "started"
    other = bf.make_gym(session)
    foreign = bf.make_subscription(session, other, next_charge_date=due)
    session.commit()
    later = (NOW + timedelta(days=10)).isoformat()
    cases = [
        (subscription, {"expectedNextChargeDate": (due + timedelta(1)).isoformat()}, Role.admin,
         409, "charge_date_changed"),
        (subscription, {"expectedNextChargeDate": due.isoformat(),
                        "nextChargeDate": (NOW - timedelta(1)).isoformat()}, Role.admin,
         422, "charge_date_out_of_range"),
        (subscription, {"expectedNextChargeDate": due.isoformat(),
                        "nextChargeDate": (NOW + timedelta(400)).isoformat()}, Role.admin,
         422, "charge_date_out_of_range"),
        (subscription, {"expectedNextChargeDate": due.isoformat()}, Role.admin,
         409, "billing_lifecycle_day_unset"),
        (subscription, {"expectedNextChargeDate": due.isoformat(), "nextChargeDate": later},
         Role.coach, 403, "permission_denied"),
        (subscription, {"expectedNextChargeDate": "2026-12-01T00:00:00"}, Role.admin,
         422, "timestamp_not_utc"),
        (subscription, {"nextChargeDate": later}, Role.admin, 400, "invalid_body"),
        (debt, {"expectedNextChargeDate": due.isoformat(), "nextChargeDate": later}, Role.admin,
         409, "charge_date_not_movable"),
        (held, {"expectedNextChargeDate": held.next_charge_date.isoformat(),
                "nextChargeDate": later}, Role.admin, 409, "billing_reconciliation_required"),
        (foreign, {"expectedNextChargeDate": due.isoformat(), "nextChargeDate": later},
         Role.admin, 404, "subscription_not_found"),
    ]  # fmt: skip
    for row, body, role, status, code in cases:
        before = snapshot(session)
        answer = _move(client, gym, row, role, **body)
        assert (answer.status_code, answer.json["code"]) == (status, code), (body, answer.json)
        assert snapshot(session) == before


def test_a_setting_not_true_or_false_is_refused_by_the_domain_too(session, gym):
    """The doors parse a boolean (HTTP strictly, the CLI as a flag); a caller of the domain
    function with anything else is refused alike, nothing written."""
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        org_settings.update_settings(
            session, gym.id, plan_required_to_book="yes", actor_user_id=None, now=NOW
        )
    assert (refused.value.code, refused.value.status) == ("plan_required_to_book_invalid", 422)
    assert snapshot(session) == before
