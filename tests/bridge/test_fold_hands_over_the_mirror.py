"""One person's two rows folded (access.folding, spec A 5.3) move the dropped membership's plans
to the membership that goes on; the bridge follows them there (spec B 1: the platform "mirrors
members, a free bridge membership and class bookings"). The plan's bridge membership stood at
the dropped member's external user: it ends there and is assigned to the kept member's, and a
later change of the plan reaches the external system under the member that holds it now."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.folding import fold_person
from gymctl.billing.attempts import end_plan
from gymctl.bridge import mirror
from gymctl.models import Role, User
from gymctl.models.billing import PlanType
from gymctl.models.bridge import EntityLink, EntityType
from tests import factories
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import run
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


def _member(session, org, email):
    user = factories.user(session, email=email, name=email.split("@")[0].title())
    membership = factories.membership(session, user=user, organization=org, role=Role.member)
    mirror.member_created(session, membership, now=NOW)
    return user, membership


def _external_user(session, org, membership) -> str:
    return session.scalar(
        select(EntityLink.external_id).where(
            EntityLink.organization_id == org.id,
            EntityLink.entity_type == EntityType.member,
            EntityLink.platform_id == str(membership.id),
        )
    )


def _live_bridge_memberships(account, external_user) -> list[str]:
    return [
        i for i, m in account.memberships.items() if m["user_id"] == external_user and m["active"]
    ]


def test_a_folded_plans_bridge_membership_moves_to_the_kept_member_and_follows_it(
    session, org, connected, account, bridge_settings, clock
):
    kept_user, kept = _member(session, org, "kept@example.test")
    dropped_user, dropped = _member(session, org, "dropped@example.test")
    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(dropped), plan=plan)
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    kept_there, dropped_there = (_external_user(session, org, m) for m in (kept, dropped))
    assert len(_live_bridge_memberships(account, dropped_there)) == 1

    fold_person(session, session.get(User, dropped_user.id), kept_user, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)

    session.refresh(subscription)
    assert subscription.membership_id == kept.id
    assert _live_bridge_memberships(account, dropped_there) == [], "left at the dropped member"
    assert len(_live_bridge_memberships(account, kept_there)) == 1

    end_plan(session, subscription, reason="test", now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)

    assert _live_bridge_memberships(account, kept_there) == []
    assert _live_bridge_memberships(account, dropped_there) == []


def test_a_folded_seat_is_given_up_at_the_dropped_member_and_booked_for_the_kept_one(
    session, org, connected
):
    """The seat moved by the fold: its registration there is cancelled under the dropped
    member's order and booked again under the kept member's (a later cancel of the seat then
    reaches the registration the kept member holds)."""
    from gymctl.bookings import book, schedule
    from gymctl.models.bridge import SyncOp

    kind = schedule.create_class_type(
        session, org.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    later = schedule.schedule_session(session, kind, starts_at=NOW.replace(hour=23), now=NOW)
    kept_user, kept = _member(session, org, "kept@example.test")
    dropped_user, dropped = _member(session, org, "dropped@example.test")
    seat = book.book(session, org.id, later.id, dropped, actor_user_id=dropped_user.id, now=NOW)
    earlier = schedule.schedule_session(session, kind, starts_at=NOW.replace(hour=22), now=NOW)
    book.book(session, org.id, earlier.id, dropped, actor_user_id=dropped_user.id, now=NOW)
    earlier.starts_at = NOW.replace(hour=1)  # held before the fold: history, left as it was
    session.commit()

    fold_person(session, session.get(User, dropped_user.id), kept_user, now=NOW)
    session.commit()

    ops = [
        (op.op_type.value, op.aggregate_key)
        for op in session.scalars(
            select(SyncOp)
            .where(SyncOp.op_type.in_(("booking.create", "booking.cancel")))
            .order_by(SyncOp.id)
        )
    ]
    assert ops == [
        ("booking.create", f"member:{dropped.id}"),
        ("booking.create", f"member:{dropped.id}"),
        ("booking.cancel", f"member:{dropped.id}"),
        ("booking.create", f"member:{kept.id}"),
    ]
    assert {op.payload["sessionId"] for op in session.scalars(
        select(SyncOp).where(SyncOp.aggregate_key == f"member:{kept.id}",
                             SyncOp.op_type == "booking.create"))} == {str(later.id)}  # fmt: skip
    session.refresh(seat)
    assert seat.membership_id == kept.id


def test_the_kept_member_takes_over_the_external_user_the_dropped_one_stood_for(
    session, org, connected, account, bridge_settings, clock
):
    """The person's login joined and bought a plan (mirrored: their external user). The desk
    then registered the same address; its user.create found that external user, already the
    login's, and parked (identity_conflict). Once the rows fold, the desk's membership goes on:
    the person's external user is now its twin, and the plan stays live there (it was ended
    there, and the kept member's ops waited behind the parked create for ever)."""
    from gymctl.models.bridge import OpStatus, SyncOp

    login_user, login = _member(session, org, "pat@example.test")
    subscription = make_subscription(
        session, Gym.of(login), plan=make_plan(session, org, PlanType.cash)
    )
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    profile_user, profile = _member(session, org, "pat@example.test")
    session.commit()
    run(session, org.id, bridge_settings, clock)
    twin = _external_user(session, org, login)
    assert [op.issue_code for op in session.scalars(select(SyncOp).where(
        SyncOp.status == OpStatus.parked))] == ["identity_conflict"]  # fmt: skip

    fold_person(session, session.get(User, login_user.id), profile_user, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)

    session.expire_all()
    assert _external_user(session, org, profile) == twin
    assert session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked)).all() == []
    assert len(_live_bridge_memberships(account, twin)) == 1
    assert len(account.users) == 1
