"""The platform's own writes become sync ops (spec B 1: the platform "mirrors members, a free
bridge membership and class bookings"): in the transaction of the change, only for a gym with a
bridge, one op per step (repeats and waiting updates do not double)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.erasure import erase_personal_data
from gymctl.access.memberships import change_role
from gymctl.access.registrations import register_member
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.billing.plans import grant_plan
from gymctl.bookings import book, schedule
from gymctl.bridge import mirror
from gymctl.bridge.connection import connect, disconnect
from gymctl.config import get_settings
from gymctl.identity.users import user_updated
from gymctl.models import Membership, Role, User
from gymctl.models.billing import BillingSettings, CollectionMethod, PlanType, SubscriptionStatus
from gymctl.models.bridge import OpStatus, SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from tests import factories
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import API_KEY, desk_registrar
from tests.conftest import NOW
from tests.factories import Gym

TOMORROW = NOW + timedelta(days=1)


def ops(session, org_id, *statuses):
    rows = session.scalars(
        select(SyncOp).where(SyncOp.organization_id == org_id).order_by(SyncOp.id)
    )
    return [
        (op.op_type.value, op.aggregate_key) for op in rows if not statuses or op.status in statuses
    ]


def _registrar(org, staff):
    return desk_registrar(org, staff)


@pytest.fixture
def staff(session, org):
    person = factories.user(session)
    factories.membership(session, user=person, organization=org, role=Role.owner)
    session.commit()
    return person


@pytest.mark.embedded
def test_a_rolled_back_registration_enqueues_nothing_and_a_committed_one_is_queued(
    session, org, connected, staff
):
    """Spec B 1: enqueued in the same transaction as the change that causes it."""
    register_member(session, _registrar(org, staff), email="gone@example.test", name="Gone",
                    origin="desk", now=NOW)  # fmt: skip
    session.rollback()
    assert ops(session, org.id) == []
    _user, _created = register_member(
        session, _registrar(org, staff), email="dana@example.test", name="Dana Levi",
        origin="desk", now=NOW,
    )  # fmt: skip
    session.commit()
    [op] = session.scalars(select(SyncOp).where(SyncOp.organization_id == org.id)).all()
    assert op.op_type.value == "user.create"
    assert (op.payload["firstName"], op.payload["lastName"]) == ("Dana", "Levi")
    assert op.payload["email"] == "dana@example.test"


@pytest.mark.embedded
def test_no_op_is_queued_for_a_gym_without_a_bridge_or_after_disconnect(
    session, org, account, bridge_settings, staff
):
    register_member(session, _registrar(org, staff), email="a@example.test", name="A",
                    origin="desk", now=NOW)  # fmt: skip
    session.commit()
    assert ops(session, org.id) == []
    connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    disconnect(session, org.id, now=NOW)
    session.commit()
    register_member(session, _registrar(org, staff), email="b@example.test", name="B",
                    origin="import", now=NOW)  # fmt: skip
    session.commit()
    assert ops(session, org.id) == []


@pytest.mark.embedded
def test_a_repeated_member_hook_queues_one_user_create(session, org, connected, staff):
    """A repeat must not double: the user.create carries a dedupe key per member."""
    _user, _ = register_member(session, _registrar(org, staff), email="d@example.test",
                               name="Dee", origin="desk", now=NOW)  # fmt: skip
    membership = session.scalars(select(Membership).where(Membership.user_id == _user.id)).one()
    mirror.member_created(session, membership, now=NOW)
    session.commit()
    assert [t for t, _ in ops(session, org.id)] == ["user.create"]


@pytest.mark.embedded
def test_staff_are_not_mirrored(session, org, connected, staff):
    register_member(session, _registrar(org, staff), email="coach@example.test", name="C",
                    origin="desk", now=NOW, role=Role.coach)  # fmt: skip
    session.commit()
    assert ops(session, org.id) == []


@pytest.mark.embedded
def test_a_newer_member_update_supersedes_the_waiting_one(session, org, connected, staff):
    user, _ = register_member(session, _registrar(org, staff), email="e@example.test",
                              name="Eve", origin="desk", now=NOW)  # fmt: skip
    user.identity_id = "user_e"
    session.commit()
    for address in ("e2@example.test", "e3@example.test"):
        user_updated(
            session,
            {"id": "user_e", "primary_email_address_id": "m",
             "email_addresses": [{"id": "m", "email_address": address}]},
            now=NOW,
            settings=get_settings(),
        )  # fmt: skip
    session.commit()
    rows = session.scalars(
        select(SyncOp).where(SyncOp.organization_id == org.id).order_by(SyncOp.id)
    ).all()
    assert [(op.op_type.value, op.status) for op in rows] == [
        ("user.create", OpStatus.pending),
        ("user.update", OpStatus.superseded),
        ("user.update", OpStatus.pending),
    ]
    assert rows[2].payload["email"] == "e3@example.test"
    assert len({op.aggregate_key for op in rows}) == 1  # one member, one order


# -- the bridge membership ------------------------------------------------------------------


@pytest.fixture
def gym_member(session, org):
    user = factories.user(session, name="Noa Bar")
    membership = factories.membership(session, user=user, organization=org, role=Role.member)
    session.commit()
    return membership


@pytest.mark.embedded
def test_a_desk_sale_assigns_the_bridge_membership_after_the_member(
    session, org, connected, gym_member, staff
):
    """A member the gym had before it connected is mirrored at its first change, first."""
    plan = make_plan(session, org, PlanType.cash)
    grant_plan(session, plan, gym_member, method=CollectionMethod.cash, now=NOW,
               actor_user_id=staff.id, documents=LocalDocumentProvider())  # fmt: skip
    session.commit()
    key = f"member:{gym_member.id}"
    assert ops(session, org.id) == [("user.create", key), ("membership.assign", key)]


@pytest.mark.embedded
def test_bridge_membership_dates_are_the_gyms_local_days(session, org, connected, gym_member):
    session.add(BillingSettings(organization_id=org.id, timezone="Asia/Jerusalem"))
    late = NOW.replace(hour=22, minute=30)  # already tomorrow in Jerusalem
    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(gym_member), plan=plan, now=late)
    mirror.subscription_changed(session, subscription, now=late)
    session.commit()
    assign = session.scalars(select(SyncOp).where(SyncOp.op_type == "membership.assign")).one()
    assert assign.payload["startDate"] == (late + timedelta(days=1)).date().isoformat()


@pytest.mark.embedded
def test_a_subscription_is_assigned_updated_held_and_cancelled_once_each(
    session, org, connected, gym_member
):
    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(gym_member), plan=plan)
    for _ in range(2):  # a repeat queues nothing
        mirror.subscription_changed(session, subscription, now=NOW)
    subscription.cancel_at_period_end = True  # notice: the membership now has an end
    subscription.cancellation_effective_at = NOW + timedelta(days=10)
    mirror.subscription_changed(session, subscription, now=NOW)
    subscription.cancellation_effective_at = NOW + timedelta(days=12)
    mirror.subscription_changed(session, subscription, now=NOW)
    subscription.status = SubscriptionStatus.paused
    mirror.subscription_changed(session, subscription, now=NOW)
    subscription.status = SubscriptionStatus.active
    mirror.subscription_changed(session, subscription, now=NOW)
    subscription.status = SubscriptionStatus.cancelled
    mirror.subscription_changed(session, subscription, now=NOW)
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    rows = session.scalars(
        select(SyncOp).where(SyncOp.organization_id == org.id).order_by(SyncOp.id)
    ).all()
    assert [(op.op_type.value, op.status.value) for op in rows] == [
        ("user.create", "pending"),
        ("membership.assign", "pending"),
        ("membership.update", "superseded"),  # replaced by the newer dates while waiting
        ("membership.update", "pending"),
        ("membership.hold", "pending"),
        ("membership.assign", "pending"),
        ("membership.cancel", "pending"),
    ]
    assert rows[3].payload["endDate"] == (NOW + timedelta(days=12)).date().isoformat()


@pytest.mark.embedded
def test_the_lifecycle_pass_cancels_the_bridge_membership_of_what_it_ended(
    session, org, connected, gym_member
):
    plan = make_plan(session, org, PlanType.pack)
    subscription = make_subscription(session, Gym.of(gym_member), plan=plan)
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    later = NOW + timedelta(days=400)
    run_lifecycle(session, now=later)
    session.commit()
    session.refresh(subscription)
    assert subscription.status is not SubscriptionStatus.active
    assert [t for t, _ in ops(session, org.id)][-1] == "membership.cancel"


@pytest.mark.embedded
def test_a_paused_subscription_stays_held_through_a_notice_and_its_withdrawal(
    session, org, connected, gym_member
):
    """No path of the platform freezes or resumes a plan (the spec names the paused status and
    the planned subscription.frozen / subscription.resumed events, not the act; see
    docs/decisions.md). What a paused plan can go through: a notice and its withdrawal (spec B
    allows both on a paused plan) change no dates at the external system while it is held."""
    from gymctl.retention import notices

    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(gym_member), plan=plan)
    mirror.subscription_changed(session, subscription, now=NOW)
    subscription.status = SubscriptionStatus.paused  # as a paused plan is stored
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    notices.give_notice(session, org.id, subscription.id, initiator="member",
                        actor_user_id=gym_member.user_id, locale="en", now=NOW)  # fmt: skip
    session.commit()
    notices.withdraw_notice(session, org.id, subscription.id, actor_user_id=gym_member.user_id,
                            by_member=True, locale="en", now=NOW)  # fmt: skip
    session.commit()
    assert [t for t, _ in ops(session, org.id)] == [
        "user.create", "membership.assign", "membership.hold",
    ]  # fmt: skip


# -- bookings -------------------------------------------------------------------------------


@pytest.fixture
def class_session(session, org):
    kind = schedule.create_class_type(
        session, org.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    return schedule.schedule_session(session, kind, starts_at=TOMORROW, now=NOW)


def _member(session, org, name):
    user = factories.user(session, name=name)
    return factories.membership(session, user=user, organization=org, role=Role.member)


@pytest.mark.embedded
def test_a_cancel_frees_the_seat_and_the_promotion_is_booked_after_it(
    session, org, connected, class_session
):
    """Booking by the member, cancel by staff, waitlist promotion: each a step, nothing for the
    waitlisted seat until it is confirmed."""
    first, second = _member(session, org, "First"), _member(session, org, "Second")
    one = book.book(session, org.id, class_session.id, first, actor_user_id=first.user_id, now=NOW)
    two = book.book(session, org.id, class_session.id, second, actor_user_id=second.user_id,
                    now=NOW)  # fmt: skip
    session.commit()
    assert [t for t, k in ops(session, org.id) if k == f"member:{second.id}"] == []
    book.cancel(session, org.id, one.id, actor_user_id=first.user_id, by_staff=True, now=NOW)
    session.commit()
    assert [t for t, k in ops(session, org.id) if k == f"member:{first.id}"] == [
        "user.create", "booking.create", "booking.cancel",
    ]  # fmt: skip
    assert [t for t, k in ops(session, org.id) if k == f"member:{second.id}"] == [
        "user.create", "booking.create",
    ]  # fmt: skip
    promoted = session.scalars(
        select(SyncOp).where(SyncOp.op_type == "booking.create").order_by(SyncOp.id)
    ).all()
    assert promoted[-1].payload["bookingId"] == str(two.id)


@pytest.mark.embedded
def test_a_revived_booking_is_booked_again(session, org, connected, class_session):
    member = _member(session, org, "Rae")
    row = book.book(session, org.id, class_session.id, member, actor_user_id=member.user_id,
                    now=NOW)  # fmt: skip
    book.cancel(session, org.id, row.id, actor_user_id=member.user_id, by_staff=False, now=NOW)
    book.book(session, org.id, class_session.id, member, actor_user_id=member.user_id, now=NOW)
    book.remove(session, org.id, row.id, actor_user_id=member.user_id, now=NOW)
    session.commit()
    assert [t for t, _ in ops(session, org.id)] == [
        "user.create", "booking.create", "booking.cancel", "booking.create", "booking.cancel",
    ]  # fmt: skip


def test_booking_and_cancel_over_http_queue_their_ops(
    client, session, gym, account, bridge_settings
):
    """Through the API: the member books and cancels; a failed request queues nothing."""
    connect(session, gym.organization.id, API_KEY, settings=bridge_settings, now=NOW)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=TOMORROW, now=NOW)
    session.commit()
    member = gym.people[Role.member]
    base = f"/organizations/{gym.organization.id}"
    made = client.post(f"{base}/sessions/{row.id}/book", json={}, headers=member.headers)
    assert made.status_code == 201, made.json
    again = client.post(f"{base}/sessions/{row.id}/book", json={}, headers=member.headers)
    assert again.status_code == 409
    gone = client.post(f"{base}/bookings/{made.json['data']['id']}/cancel", headers=member.headers)
    assert gone.status_code == 200, gone.json
    key = f"member:{member.membership.id}"
    assert ops(session, gym.organization.id) == [
        ("user.create", key), ("booking.create", key), ("booking.cancel", key),
    ]  # fmt: skip


# -- the other two ways a member is created, over HTTP ----------------------------------------


def _bridged(session, gym, bridge_settings):
    connect(session, gym.organization.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()


def test_joining_through_a_link_queues_the_members_user_create(
    client, session, gym, outsider, account, bridge_settings
):
    from tests.access.test_join import make_link

    _bridged(session, gym, bridge_settings)
    link = make_link(session, gym.organization)
    session.commit()
    joined = client.post(f"/join/{link.token}/join", headers=outsider.headers)
    assert joined.status_code == 201, joined.json
    [op] = session.scalars(select(SyncOp).where(SyncOp.organization_id == gym.organization.id))
    assert (op.op_type.value, op.payload["email"]) == ("user.create", outsider.user.email)


def test_an_accepted_member_invitation_queues_the_user_create(
    client, session, gym, account, bridge_settings
):
    from tests.access.test_invitations import _deliver_user_created, invite

    _bridged(session, gym, bridge_settings)
    assert invite(client, gym, "fresh@example.test").status_code == 201
    assert ops(session, gym.organization.id) == []  # invited is not yet a member
    delivered = _deliver_user_created(client, "user_fresh", "fresh@example.test", verified=True)
    assert delivered.status_code == 200
    [op] = session.scalars(select(SyncOp).where(SyncOp.organization_id == gym.organization.id))
    assert (op.op_type.value, op.payload["email"]) == ("user.create", "fresh@example.test")


def test_the_inbox_lists_external_issues_and_the_owner_dismisses_one(
    client, session, gym, account, bridge_settings
):
    from gymctl.bridge import inbound

    _bridged(session, gym, bridge_settings)
    issue = inbound.raise_issue(session, gym.organization.id, "class_removed", "777",
                                {"externalClassId": "777"}, now=NOW)  # fmt: skip
    session.commit()
    base = f"/organizations/{gym.organization.id}/bridge"
    owner = gym.people[Role.owner].headers
    listed = client.get(f"{base}/issues", headers=owner)
    assert [i["kind"] for i in listed.json["external"]] == ["class_removed"]
    coach = client.post(f"{base}/external-issues/{issue.id}/dismiss",
                        headers=gym.people[Role.coach].headers)  # fmt: skip
    assert coach.status_code == 403
    done = client.post(f"{base}/external-issues/{issue.id}/dismiss", headers=owner)
    assert (done.status_code, done.json["issue"]["status"]) == (200, "dismissed")
    again = client.post(f"{base}/external-issues/{issue.id}/dismiss", headers=owner)
    assert (again.status_code, again.json["code"]) == (409, "bridge_issue_not_open")
    assert client.get(f"{base}/issues", headers=owner).json["external"] == []


@pytest.mark.embedded
def test_what_was_mirrored_of_a_member_made_staff_still_follows_there(
    session, org, connected, class_session, staff
):
    """Staff are not mirrored, but a seat and a bridge membership mirrored while they were a
    member are still given up there: the role change left them booked there for ever."""
    member = _member(session, org, "Dana Levi")
    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(member), plan=plan)
    mirror.subscription_changed(session, subscription, now=NOW)
    seat = book.book(session, org.id, class_session.id, member, actor_user_id=member.user_id,
                     now=NOW)  # fmt: skip
    owner = session.scalar(select(Membership).where(Membership.user_id == staff.id))
    change_role(session, owner, member.user_id, Role.coach, now=NOW)
    session.commit()

    book.cancel(session, org.id, seat.id, actor_user_id=member.user_id, by_staff=True, now=NOW)
    subscription.status = SubscriptionStatus.cancelled
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()

    assert [t for t, k in ops(session, org.id) if k == f"member:{member.id}"] == [
        "user.create", "membership.assign", "booking.create", "booking.cancel",
        "membership.cancel",
    ]  # fmt: skip
    later = _member(session, org, "Later")
    later.role = Role.coach  # staff from the start: nothing of theirs is mirrored
    book.book(session, org.id, class_session.id, later, actor_user_id=later.user_id, now=NOW)
    session.commit()
    assert [t for t, k in ops(session, org.id) if k == f"member:{later.id}"] == []


@pytest.mark.embedded
def test_a_cash_month_paid_at_the_desk_moves_the_bridge_membership_end(
    session, org, connected, gym_member, staff
):
    """A cash plan with an end renews by the desk taking its lapsed month: the external
    membership kept the first month's end, and the member's bookings there after it failed."""
    plan = make_plan(session, org, PlanType.cash, open_ended=False)
    subscription = grant_plan(session, plan, gym_member, method=CollectionMethod.cash, now=NOW,
                              actor_user_id=staff.id,
                              documents=LocalDocumentProvider())  # fmt: skip
    session.commit()
    lapse = subscription.current_period_end + timedelta(hours=1)
    run_lifecycle(session, now=lapse)
    assert subscription.status is SubscriptionStatus.debt

    clear_debt_at_desk(
        session,
        organization_id=org.id,
        subscription_id=subscription.id,
        actor_user_id=staff.id,
        now=lapse,
        documents=LocalDocumentProvider(),
    )
    session.commit()

    update = session.scalars(select(SyncOp).where(SyncOp.op_type == "membership.update")).one()
    assert update.payload["endDate"] == subscription.current_period_end.date().isoformat()


@pytest.mark.embedded
def test_erasure_withdraws_the_unsent_copies_of_the_persons_name_and_address(
    session, org, connected, gym_member, staff
):
    """Queued while the connection waits (or parked), a user.create would carry the erased
    person's name and address there after the erasure."""
    mirror.member_updated(session, session.get(User, gym_member.user_id), now=NOW)
    session.commit()
    assert ops(session, org.id, OpStatus.pending) == [("user.create", f"member:{gym_member.id}")]

    done = erase_personal_data(session, org, gym_member.user_id, actor_user_id=staff.id, now=NOW)

    # The create, and the deactivation the membership's end queued behind it (no external
    # user stands for the person: nothing there to deactivate).
    assert done["bridgeOpsWithdrawn"] == 2
    assert ops(session, org.id, OpStatus.pending) == []
