"""External to platform: what the poll and the reconcile notice is applied with an audit row,
or raised in the owner's inbox; nothing noticed is dropped (docs/decisions.md, issue 18)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from daemons.jobs import member_pushes
from gymctl.bookings import attendance, book, schedule
from gymctl.bridge import cutover, entity_map, inbound, mirror
from gymctl.errors import DomainError
from gymctl.models import (
    AuditLog,
    Booking,
    BookingStatus,
    ClassSession,
    MembershipStatus,
    OutboxEvent,
    Role,
)
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from gymctl.models.bridge import EntityType, Origin, SyncOp
from gymctl.models.releases import PushNotice
from tests import factories
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import run
from tests.conftest import NOW
from tests.factories import Gym

STARTS = datetime.fromisoformat("2026-11-22T10:00:00+00:00")


@dataclass
class Scene:
    member: object
    session_row: ClassSession
    booking: Booking
    external_class: str
    user: str  # the member's external user


def _member(session, org, name):
    user = factories.user(session, name=name)
    member = factories.membership(session, user=user, organization=org, role=Role.member)
    plan = make_plan(session, org, PlanType.cash)
    mirror.subscription_changed(session, make_subscription(session, Gym.of(member), plan=plan),
                                now=NOW)  # fmt: skip
    return member


def _class(session, org, fake, account, starts=STARTS, capacity=1, name="WOD"):
    kind = schedule.create_class_type(session, org.id, name=name, default_capacity=capacity,
                                      duration_minutes=60, now=NOW)  # fmt: skip
    row = schedule.schedule_session(session, kind, starts_at=starts, now=NOW)
    external = fake.add_class(account, starts.date().isoformat(), time=starts.strftime("%H:%M"),
                              name=name)  # fmt: skip
    return row, external


def _settle(session, org, settings, clock):
    """Dispatcher runs until the queue is sent (the first waits a minute for the poll)."""
    for minutes in (0, 2, 4):
        clock.set(NOW + timedelta(minutes=minutes))
        run(session, org.id, settings, clock)


def _reconcile(session, connected, org, settings, clock):
    clock.set(clock.now() + timedelta(minutes=1))
    connected.schedule_poll_due_at = connected.reconcile_due_at = clock.now()
    session.commit()
    return run(session, org.id, settings, clock)


@pytest.fixture
def scene(session, org, connected, fake, account, bridge_settings, clock) -> Scene:
    member = _member(session, org, "Dana Levi")
    row, external = _class(session, org, fake, account)
    booking = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()
    _settle(session, org, bridge_settings, clock)
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1
    user = entity_map.find(session, org.id, EntityType.member, member.id).external_id
    return Scene(member, row, booking, external, user)


def _audits(session, action):
    return session.scalars(select(AuditLog).where(AuditLog.action == action)).all()


@pytest.mark.embedded
def test_a_booking_cancelled_there_is_cancelled_here_and_its_seat_promoted(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    waiting = _member(session, org, "Noa Bar")
    queued = book.book(session, org.id, scene.session_row.id, waiting,
                       actor_user_id=waiting.user_id, now=NOW)  # fmt: skip
    session.commit()
    assert queued.status is BookingStatus.waitlisted
    account.registrations.clear()  # the member cancelled in the external app
    summary = _reconcile(session, connected, org, bridge_settings, clock)
    assert summary.polls["applied"] == {"booking_cancelled:cancelled": 1}
    session.refresh(scene.booking)
    session.refresh(queued)
    assert scene.booking.status is BookingStatus.cancelled
    assert queued.status is BookingStatus.confirmed  # the freed seat went to the waitlist
    assert len(_audits(session, "bridge.booking_cancelled_externally")) == 1
    clock.set(clock.now() + timedelta(minutes=5))
    run(session, org.id, bridge_settings, clock)  # the promotion reaches the external system
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 2
    assert fake.calls_to("POST /v3/schedule/cancelUserBooking") == []  # already gone there


@pytest.mark.embedded
def test_a_booking_made_there_by_a_linked_member_is_booked_here(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    later, external = _class(session, org, fake, account, starts=STARTS + timedelta(hours=3),
                             capacity=5)  # fmt: skip
    session.commit()
    _reconcile(session, connected, org, bridge_settings, clock)  # the poll links the class
    fake.add_registration(account, scene.user, external)
    summary = _reconcile(session, connected, org, bridge_settings, clock)
    assert summary.polls["applied"] == {"booking_seen:booked": 1}
    placed = session.scalars(select(Booking).where(Booking.class_session_id == later.id)).one()
    assert (placed.membership_id, placed.status) == (scene.member.id, BookingStatus.confirmed)
    assert len(_audits(session, "bridge.booking_made_externally")) == 1
    clock.set(clock.now() + timedelta(minutes=5))
    run(session, org.id, bridge_settings, clock)
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1  # not booked there twice


@pytest.mark.embedded
def test_what_the_platform_cannot_take_is_an_owner_issue(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    """A booking there in a class no platform session matches, and a linked class removed
    there after its series' cutover: both in the owner's inbox; nothing on the platform
    changes."""
    _cut_over(session, org, scene.session_row)
    elsewhere = fake.add_class(account, STARTS.date().isoformat(), time="18:00", name="Yoga")
    fake.add_registration(account, scene.user, elsewhere)
    account.classes.pop(scene.external_class)
    account.registrations = {
        k: r for k, r in account.registrations.items() if r["schedule_id"] != scene.external_class
    }
    summary = _reconcile(session, connected, org, bridge_settings, clock)
    kinds = {issue.kind: issue for issue in inbound.open_issues(session, org.id)}
    assert set(kinds) == {"booking_not_placed", "class_removed"}
    assert kinds["class_removed"].details["sessionId"] == str(scene.session_row.id)
    assert kinds["booking_not_placed"].details["reason"] == "class_unlinked"
    assert summary.polls["applied"]["class_removed:issue"] == 1
    session.refresh(scene.session_row)
    assert scene.session_row.cancelled_at is None


def _cut_over(session, org, row, day=None):
    weekday, start, _day = cutover.series_of(session, row)
    cutover.set_cutover(session, org.id, row.class_type_id, weekday, start, day or NOW.date(),
                        now=NOW)  # fmt: skip
    session.commit()


@pytest.mark.embedded
def test_before_its_series_cutover_a_class_removed_there_is_cancelled_here(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    """Until the owner moves the series to the platform, the external timetable stands."""
    _cut_over(session, org, scene.session_row, day=STARTS.date() + timedelta(days=7))
    account.classes.pop(scene.external_class)
    account.registrations.clear()
    summary = _reconcile(session, connected, org, bridge_settings, clock)
    assert summary.polls["applied"]["class_removed:cancelled"] == 1
    session.refresh(scene.session_row)
    session.refresh(scene.booking)
    assert scene.session_row.cancelled_at is not None
    assert scene.booking.status is BookingStatus.cancelled
    assert len(_audits(session, "bridge.class_cancelled_externally")) == 1
    assert inbound.open_issues(session, org.id) == []


@pytest.mark.embedded
def test_a_class_removed_there_cancels_its_bookings_as_a_class_cancel_and_they_are_pushed(
    session, session_factory, settings, org, connected, fake, account, bridge_settings, clock,
    scene,
):  # fmt: skip
    """The gym called the class off there: its members lost their seats without asking, as
    when staff cancel a class here (reason session_cancelled), so the push sweep tells them
    (none of this member's devices is registered: recorded as reaching none)."""
    account.classes.pop(scene.external_class)
    account.registrations.clear()
    _reconcile(session, connected, org, bridge_settings, clock)

    (event,) = session.scalars(
        select(OutboxEvent).where(OutboxEvent.name == "booking.cancelled")
    ).all()
    assert event.payload["reason"] == "session_cancelled"
    assert member_pushes(session_factory, clock.now(), settings)["unreached"] == 1
    assert session.scalar(select(PushNotice.outbox_event_id)) == event.id


@pytest.mark.embedded
def test_from_the_cutover_a_coach_changed_there_is_changed_back(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    coach = factories.user(session, name="Coach Kim")
    staff = factories.membership(session, user=coach, organization=org, role=Role.coach)
    entity_map.link(session, org.id, EntityType.staff, platform_id=staff.id, external_id="42",
                    origin=Origin.manual, now=NOW)  # fmt: skip
    scene.session_row.coach_user_id = coach.id
    _cut_over(session, org, scene.session_row)
    account.classes[scene.external_class]["coach_id"] = 99  # someone changed it there
    _reconcile(session, connected, org, bridge_settings, clock)
    clock.set(clock.now() + timedelta(minutes=1))
    run(session, org.id, bridge_settings, clock)
    (patched,) = fake.calls_to("PATCH /v3/schedule")
    assert patched.body == {"schedule_id": scene.external_class, "coach_id": "42"}
    session.refresh(scene.session_row)
    assert scene.session_row.coach_user_id == coach.id
    _reconcile(session, connected, org, bridge_settings, clock)  # our change comes back: quiet
    clock.set(clock.now() + timedelta(minutes=1))
    run(session, org.id, bridge_settings, clock)
    assert len(fake.calls_to("PATCH /v3/schedule")) == 1


def test_a_cutover_is_set_by_the_owner_and_refused_for_a_past_day_or_another_gyms_class(
    client, session, gym, outsider
):
    kind = schedule.create_class_type(session, gym.organization.id, name="WOD",
                                      default_capacity=5, duration_minutes=60, now=NOW)  # fmt: skip
    session.commit()
    owner = gym.people[Role.owner].headers
    path = f"/organizations/{gym.organization.id}/bridge/cutovers"
    body = {"classTypeId": str(kind.id), "weekday": 0, "startTime": "07:00",
            "cutoverOn": (NOW + timedelta(days=3)).date().isoformat()}  # fmt: skip
    past = client.put(path, json={**body, "cutoverOn": "2026-01-01"}, headers=owner)
    assert (past.status_code, past.json["code"]) == (422, "cutover_in_past")
    other = client.put(path, json={**body, "classTypeId": str(uuid.uuid4())}, headers=owner)
    assert (other.status_code, other.json["code"]) == (404, "class_type_not_found")
    # The domain, which the CLI reaches with no body to strip it, took "07:00\n" (`$` matched
    # before the final newline) and stored a series no class's time ever equals.
    with pytest.raises(DomainError) as newline:
        cutover.set_cutover(session, gym.organization.id, kind.id, 0, "07:00\n",
                            (NOW + timedelta(days=3)).date(), now=NOW)  # fmt: skip
    assert newline.value.code == "cutover_series_invalid"
    session.rollback()
    coach = client.put(path, json=body, headers=gym.people[Role.coach].headers)
    assert coach.status_code == 403
    assert client.get(path, headers=owner).json["cutovers"] == []
    made = client.put(path, json=body, headers=owner)
    assert made.status_code == 200, made.json
    assert client.get(path, headers=owner).json["cutovers"] == [made.json["cutover"]]


@pytest.mark.embedded
def test_a_coach_changed_there_is_taken_when_the_staff_member_is_linked(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    coach = factories.user(session, name="Coach Kim")
    staff = factories.membership(session, user=coach, organization=org, role=Role.coach)
    entity_map.link(session, org.id, EntityType.staff, platform_id=staff.id, external_id="42",
                    origin=Origin.manual, now=NOW)  # fmt: skip
    session.commit()
    account.classes[scene.external_class]["coach_id"] = 42
    _reconcile(session, connected, org, bridge_settings, clock)
    session.refresh(scene.session_row)
    assert scene.session_row.coach_user_id == coach.id
    assert len(_audits(session, "bridge.coach_changed_externally")) == 1
    account.classes[scene.external_class]["coach_id"] = 77  # no one we know
    _reconcile(session, connected, org, bridge_settings, clock)
    assert [i.kind for i in inbound.open_issues(session, org.id)] == ["coach_unmapped"]


@pytest.mark.embedded
def test_a_coach_changed_there_to_one_who_left_leaves_the_class_without_a_coach(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    """The external system names a linked coach who is no longer active staff here: the class
    does not take them (schedule.check_coach's rule), nor keep the coach replaced there; the
    owner hears of it (coach_ineligible)."""
    current = factories.membership(session, user=factories.user(session, name="Coach Ada"),
                                   organization=org, role=Role.coach)  # fmt: skip
    gone = factories.membership(session, user=factories.user(session, name="Coach Kim"),
                                organization=org, role=Role.coach)  # fmt: skip
    entity_map.link(session, org.id, EntityType.staff, platform_id=gone.id, external_id="42",
                    origin=Origin.manual, now=NOW)  # fmt: skip
    scene.session_row.coach_user_id = current.user_id
    gone.status = MembershipStatus.cancelled  # Kim left the gym
    session.commit()
    account.classes[scene.external_class]["coach_id"] = 42

    summary = _reconcile(session, connected, org, bridge_settings, clock)

    assert summary.polls["applied"] == {"coach_changed:issue": 1}
    session.refresh(scene.session_row)
    assert scene.session_row.coach_user_id is None
    (issue,) = inbound.open_issues(session, org.id)
    assert (issue.kind, issue.details["externalCoachId"]) == ("coach_ineligible", "42")
    (audit,) = _audits(session, "bridge.coach_changed_externally")
    assert audit.data["coachEligible"] is False


@pytest.mark.embedded
def test_our_own_booking_whose_answer_was_lost_is_not_taken_as_made_there(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Found by the chaos run: a bookSession applied there but timed out here, for a booking
    the member has since cancelled, came back as a booking made there and revived it."""
    member = _member(session, org, "Dana Levi")
    row, _external = _class(session, org, fake, account)
    fake.time_out("POST /v3/schedule/bookSession", after_apply=True)
    booking = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    book.cancel(session, org.id, booking.id, actor_user_id=member.user_id, by_staff=False,
                now=NOW)  # fmt: skip
    session.commit()
    for minutes in (0, 2):  # the poll, then the booking's timed-out attempt (retry at 3)
        clock.set(NOW + timedelta(minutes=minutes))
        run(session, org.id, bridge_settings, clock)
    connected.reconcile_due_at = clock.now()
    session.commit()
    summary = run(session, org.id, bridge_settings, clock)  # reconciles before the retry
    assert "applied" not in summary.polls
    clock.set(NOW + timedelta(minutes=10))
    run(session, org.id, bridge_settings, clock)  # the retry finds it, the cancel follows
    session.refresh(booking)
    assert booking.status is BookingStatus.cancelled
    ops = session.scalars(select(SyncOp.op_type).where(SyncOp.organization_id == org.id)).all()
    assert [t.value for t in ops].count("booking.create") == 1
    assert account.registrations == {}
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1


@pytest.mark.embedded
def test_a_member_waiting_here_who_booked_there_is_an_owner_issue_not_a_seat(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    """Waiting here is no seat: the registration there was linked to the waitlisted booking
    as "already booked", and once the member cancelled here it stayed booked there for ever
    (a waitlisted booking is never mirrored)."""
    waiting = _member(session, org, "Noa Bar")
    queued = book.book(session, org.id, scene.session_row.id, waiting,
                       actor_user_id=waiting.user_id, now=NOW)  # fmt: skip
    session.commit()
    assert queued.status is BookingStatus.waitlisted
    _settle(session, org, bridge_settings, clock)
    user = entity_map.find(session, org.id, EntityType.member, waiting.id).external_id
    fake.add_registration(account, user, scene.external_class)

    summary = _reconcile(session, connected, org, bridge_settings, clock)

    assert summary.polls["applied"] == {"booking_seen:issue": 1}
    [issue] = inbound.open_issues(session, org.id)
    assert (issue.kind, issue.details["reason"]) == ("booking_not_placed", "session_full")
    session.refresh(queued)
    assert queued.status is BookingStatus.waitlisted


@pytest.mark.embedded
def test_a_class_removed_there_after_it_started_keeps_its_attendance(
    session, org, connected, fake, account, bridge_settings, clock, scene
):
    """A class that has started is not cancelled (cancel_class: 409 session_started, "its
    attendance is the record then"); the external system dropping one that ran today (a
    cleanup of its timetable) cancelled it here and the booking of the member who attended
    (a hunter's test of s55). It stands; the owner hears of it."""
    during = STARTS + timedelta(minutes=20)
    clock.set(during)
    attendance.check_in(session, org.id, scene.booking.id, method=CheckinMethod.staff,
                        actor_user_id=scene.member.user_id, now=during)  # fmt: skip
    session.commit()
    account.classes.pop(scene.external_class)
    clock.set(during + timedelta(minutes=1))
    summary = _reconcile(session, connected, org, bridge_settings, clock)

    assert summary.polls["applied"]["class_removed:issue"] == 1
    session.refresh(scene.booking)
    session.refresh(scene.session_row)
    assert scene.session_row.cancelled_at is None
    assert scene.booking.status is BookingStatus.confirmed
    assert scene.booking.checked_in_at is not None
    [issue] = inbound.open_issues(session, org.id)
    assert (issue.kind, issue.details["started"]) == ("class_removed", True)
