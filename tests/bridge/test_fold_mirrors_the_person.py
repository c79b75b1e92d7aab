"""One person's two rows fold (spec A 5.3: the next GET /users/me of a proven login links the
profile the gym made for its address) and the external system follows the person (spec B 1:
the bridge "mirrors members ... so that both stay consistent").

- The kept member without an external user takes over the dropped one's: that user then
  carries the kept member's name and email (a user.update in the fold's transaction).
- Both had one: the dropped member's is deactivated there (PATCH /v3/users, never a delete:
  spec B 4.6), after its plans and seats were given up there; but not when the gym's own
  memberships still live on it (an owner issue: the gym merges the two users there), and
  after the seat it held in a class the kept member booked too was given up there.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bookings import book, schedule
from gymctl.bridge import mirror
from gymctl.models import Role
from gymctl.models.billing import PlanType
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, OpType, SyncOp
from tests import factories
from tests.billing.factories import make_plan, make_subscription
from tests.bookings.conftest import TOMORROW
from tests.bridge.conftest import run
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


def _bearer(idp, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.token(sub, now=NOW)}"}


def _external_user(session, org, membership) -> str | None:
    return session.scalar(
        select(EntityLink.external_id).where(
            EntityLink.organization_id == org.id,
            EntityLink.entity_type == EntityType.member,
            EntityLink.platform_id == str(membership.id),
        )
    )


def _live_memberships(account, external_user) -> list[str]:
    return [
        i for i, m in account.memberships.items() if m["user_id"] == external_user and m["active"]
    ]


def _desk_profile(session, org, *, mirrored: bool):
    """The gym registered Patricia at its desk (no login yet)."""
    profile = factories.user(
        session, identity_id=None, email="PAT@example.test", name="Patricia Cohen"
    )
    desk = factories.membership(session, user=profile, organization=org, role=Role.member)
    if mirrored:
        mirror.member_created(session, desk, now=NOW)
    return profile, desk


def _login(session, org, *, with_plan: bool = False):
    """Her own login, proven, joined the gym (and bought a plan there): mirrored."""
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW,
        name="Pat",
    )  # fmt: skip
    joined = factories.membership(session, user=login, organization=org, role=Role.member)
    mirror.member_created(session, joined, now=NOW)
    if with_plan:
        plan = make_plan(session, org, PlanType.cash)
        mirror.subscription_changed(
            session, make_subscription(session, Gym.of(joined), plan=plan), now=NOW
        )
    return login, joined


def test_the_kept_member_taking_over_the_external_user_gives_it_their_name_and_email(
    request, session, org, account, bridge_settings, clock, client, idp
):
    """The desk profile predates the bridge (never mirrored); the login's external user was
    made from the login's details. The link keeps the desk's membership, which takes over
    that external user: there it must read as the kept member, not as the dropped row."""
    profile, desk = _desk_profile(session, org, mirrored=False)
    session.commit()
    request.getfixturevalue("connected")  # the gym connects its bridge after registering her
    _login(session, org)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    (twin,) = account.users
    assert account.users[twin]["first_name"] == "Pat"

    response = client.get("/users/me", headers=_bearer(idp, "user_pat"))
    assert response.status_code == 200, response.json
    assert response.json["user"]["id"] == str(profile.id)
    run(session, org.id, bridge_settings, clock)

    session.expire_all()
    assert _external_user(session, org, desk) == twin
    there = account.users[twin]
    assert (there["first_name"], there["last_name"], there["email"]) == (
        "Patricia", "Cohen", "PAT@example.test"
    )  # fmt: skip
    assert there["active"] is True
    assert session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked)).all() == []


def test_the_dropped_members_own_external_user_is_deactivated_after_its_plan_moved(
    session, org, connected, account, bridge_settings, clock, client, idp
):
    """Both rows were mirrored (the addresses differ in case, so the external system holds
    two users). The link keeps the desk's membership and ends the login's: the login's plan
    moves to the kept member's external user, and the login's external user, which stands for
    an ended membership, is deactivated there (the person is one user there again)."""
    _profile, desk = _desk_profile(session, org, mirrored=True)
    _login_user, joined = _login(session, org, with_plan=True)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    kept_there, dropped_there = (
        _external_user(session, org, desk),
        _external_user(session, org, joined),
    )
    assert kept_there != dropped_there
    assert len(_live_memberships(account, dropped_there)) == 1

    response = client.get("/users/me", headers=_bearer(idp, "user_pat"))
    assert response.status_code == 200, response.json
    run(session, org.id, bridge_settings, clock)

    assert _live_memberships(account, dropped_there) == []
    assert len(_live_memberships(account, kept_there)) == 1
    assert account.users[dropped_there]["active"] is False
    assert account.users[kept_there]["active"] is True
    assert account.users[kept_there]["first_name"] == "Patricia"
    assert session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked)).all() == []


def test_a_dropped_external_user_the_gym_still_sells_to_there_is_left_active_as_an_issue(
    session, org, connected, account, fake, bridge_settings, clock, client, idp
):
    """The login's external user also holds a priced membership the gym sold there itself
    (the bridge never writes those). Deactivating it would cut the person off there: the op
    parks for the owner (merge the two users there, then retry or dismiss)."""
    _desk_profile(session, org, mirrored=True)
    _login_user, joined = _login(session, org)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    dropped_there = _external_user(session, org, joined)
    account.memberships["9001"] = {"user_id": dropped_there, "membership_type_id": 50,
                                   "active": True, "start_date": "2026-01-01",
                                   "end_date": None}  # fmt: skip

    assert client.get("/users/me", headers=_bearer(idp, "user_pat")).status_code == 200
    run(session, org.id, bridge_settings, clock)

    assert account.users[dropped_there]["active"] is True
    parked = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked)).all()
    assert [(op.op_type, op.issue_code) for op in parked] == [
        (OpType.user_update, "external_user_in_use")
    ]
    assert fake.calls_to("PATCH /v3/users") == []


def test_the_dropped_members_seat_in_a_class_both_booked_is_given_up_there_before_its_user(
    session, org, connected, account, fake, bridge_settings, clock, client, idp
):
    """Both rows booked one class: the person holds one seat of it, the kept member's, so the
    dropped member's stays with it and is given up as the membership ends. Its cancel there
    goes before the dropped member's user is deactivated (its user's last op), not after."""
    _profile, desk = _desk_profile(session, org, mirrored=True)
    plan = make_plan(session, org, PlanType.cash)
    mirror.subscription_changed(
        session, make_subscription(session, Gym.of(desk), plan=plan), now=NOW
    )
    _login_user, joined = _login(session, org, with_plan=True)
    kind = schedule.create_class_type(session, org.id, name="WOD", default_capacity=5,
                                      duration_minutes=60, now=NOW)  # fmt: skip
    row = schedule.schedule_session(session, kind, starts_at=TOMORROW, now=NOW)
    there_class = fake.add_class(account, TOMORROW.date().isoformat(),
                                 time=TOMORROW.strftime("%H:%M"))  # fmt: skip
    for member in (desk, joined):
        book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()
    for minutes in (0, 2):  # the first run polls, the second books (the class now linked)
        clock.set(NOW + timedelta(minutes=minutes))
        run(session, org.id, bridge_settings, clock)
    dropped_there = _external_user(session, org, joined)
    assert fake.effects[dropped_there][-1] == f"book:{there_class}"

    signed_in = {"Authorization": f"Bearer {idp.token('user_pat', now=clock.now())}"}
    assert client.get("/users/me", headers=signed_in).status_code == 200
    clock.set(NOW + timedelta(minutes=4))
    run(session, org.id, bridge_settings, clock)

    assert fake.effects[dropped_there][-2:] == [f"cancel:{there_class}", "updated:None"]
    assert account.users[dropped_there]["active"] is False
