"""A member whose membership ends outside a fold (removed by staff, erased, their gym deleted)
names no one the gym serves: their external user is deactivated there, as a fold's dropped
member's is (spec B 1: both stay consistent; spec B 4.6: PATCH /v3/users, never a delete),
after the plans they held were given up there; parked as external_user_in_use while the gym's
own memberships live on it. The link stays, marked deactivated: a member who comes back is made
active there again with their current details, and drift does not call them orphaned.

Also: a login's user.created that rewrites the gym profile's address sends it there, and the
bridge compares addresses by the project's one rule (identity.users.address_keys).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.bridge import entity_map, mirror
from gymctl.bridge.client import ExternalGymClient, Throttle
from gymctl.bridge.connection import connect, import_roster, open_client
from gymctl.bridge.drift import drift
from gymctl.models import Role, User
from gymctl.models.billing import PlanType
from gymctl.models.bridge import EntityType, OpStatus, OpType, SyncOp
from tests import factories
from tests.access.test_join import make_link
from tests.api.test_identity_webhook import deliver, provider_user
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import API_KEY, run
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


@pytest.fixture
def bridged(session, gym, account, bridge_settings):
    connection = connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    return connection


def _mirrored_member(session, gym, bridge_settings, clock, *, plan: bool = True) -> str:
    """The gym's member, mirrored there (with a plan's bridge membership): their external id."""
    member = gym[Role.member].membership
    mirror.member_created(session, member, now=NOW)
    if plan:
        sold = make_plan(session, gym.organization, PlanType.cash)
        subscription = make_subscription(session, Gym.of(member), plan=sold)
        mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    return entity_map.find(session, gym.id, EntityType.member, member.id).external_id


def _link_status(session, gym) -> str | None:
    session.expire_all()
    link = entity_map.find(session, gym.id, EntityType.member, gym[Role.member].membership.id)
    return link.data.get("status")


def _parked(session) -> list[tuple[OpType, str | None]]:
    parked = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked))
    return [(op.op_type, op.issue_code) for op in parked]


def _drift(session, connection, settings) -> dict:
    with open_client(connection, settings, Throttle(None), 1.0) as client:
        return drift(session, connection.organization_id, client, now=lambda: NOW,
                     type_id=connection.bridge_membership_type_id)  # fmt: skip


def _remove(client, gym):
    member = gym[Role.member].user
    response = client.delete(
        f"/organizations/{gym.id}/members/{member.id}", headers=gym[Role.owner].headers
    )
    assert response.status_code == 200, response.json


def test_a_member_removed_by_staff_is_deactivated_there_after_their_plan_ended(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock)
    assert [m["active"] for m in account.memberships.values()] == [True]

    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)

    assert [m["active"] for m in account.memberships.values()] == [False]
    assert account.users[there]["active"] is False
    patches = [c.body for c in fake.calls_to("PATCH /v3/users")]
    assert patches == [{"user_id": there, "active": False}]  # the flag alone, no details
    assert _link_status(session, gym) == "deactivated"
    assert _parked(session) == []
    report = _drift(session, bridged, bridge_settings)
    assert report["members"]["orphaned"] == []
    assert report["summary"]["members"] == 0


def test_an_erased_member_is_deactivated_there_by_an_op_holding_no_personal_data(
    client, session, gym, bridged, account, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    member = gym[Role.member]

    response = client.post(
        f"/organizations/{gym.id}/members/{member.user.id}/erasure",
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json
    deactivation = session.scalars(select(SyncOp).where(SyncOp.op_type == OpType.user_update)).one()
    assert deactivation.payload == {"memberId": str(member.membership.id), "active": False}
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is False
    assert _link_status(session, gym) == "deactivated"


def test_a_deleted_gyms_members_are_deactivated_there(
    client, session, gym, bridged, account, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock)

    response = client.delete(f"/organizations/{gym.id}", headers=gym[Role.owner].headers)
    assert response.status_code == 200, response.json
    run(session, gym.id, bridge_settings, clock)

    assert [m["active"] for m in account.memberships.values()] == [False]
    assert account.users[there]["active"] is False


def test_an_ended_member_the_gym_still_sells_to_there_is_left_active_as_an_issue(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    account.memberships["9001"] = {"user_id": there, "membership_type_id": 50, "active": True,
                                   "start_date": "2026-01-01", "end_date": None}  # fmt: skip

    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is True
    assert _parked(session) == [(OpType.user_update, "external_user_in_use")]
    assert fake.calls_to("PATCH /v3/users") == []


def _rejoin(client, session, gym):
    link = make_link(session, gym.organization)
    session.commit()
    joined = client.post(f"/join/{link.token}/join", headers=gym[Role.member].headers)
    assert joined.status_code == 201, joined.json


def test_a_member_who_rejoins_is_active_there_again_with_their_current_details(
    client, session, gym, bridged, account, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock)
    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)
    assert account.users[there]["active"] is False
    person = session.get(User, gym[Role.member].user.id)
    person.name, person.email = "Dana Levi", "dana.levi@iron.example"  # changed while away
    session.commit()

    _rejoin(client, session, gym)
    run(session, gym.id, bridge_settings, clock)

    user = account.users[there]
    assert (user["active"], user["first_name"], user["last_name"], user["email"]) == (
        True, "Dana", "Levi", "dana.levi@iron.example"
    )  # fmt: skip
    assert len(account.users) == 1  # the same user there, not a second one
    assert _link_status(session, gym) == "active"
    assert _parked(session) == []
    assert _drift(session, bridged, bridge_settings)["summary"]["members"] == 0


def test_a_member_back_before_their_deactivation_went_is_never_deactivated(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock)
    _remove(client, gym)
    _rejoin(client, session, gym)
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is True
    assert [c.body.get("active") for c in fake.calls_to("PATCH /v3/users")] == [True]
    assert _parked(session) == []


def test_a_member_back_while_their_deactivation_is_parked_is_released_from_it(
    client, session, gym, bridged, account, bridge_settings, clock
):
    """The gym's own membership there kept the deactivation parked; the member's return makes
    it moot (it would block every later op of theirs)."""
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    account.memberships["9001"] = {"user_id": there, "membership_type_id": 50, "active": True,
                                   "start_date": "2026-01-01", "end_date": None}  # fmt: skip
    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)
    assert _parked(session) == [(OpType.user_update, "external_user_in_use")]

    _rejoin(client, session, gym)
    run(session, gym.id, bridge_settings, clock)

    assert _parked(session) == []
    assert account.users[there]["active"] is True


def test_a_member_erased_before_their_user_was_sent_is_mirrored_when_they_rejoin(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    """The erasure withdrew the member's user.create before any dispatcher sent it (it held
    their name and address); they join again: the create goes after all, with their details
    now, and their plan and seats follow it there."""
    member = gym[Role.member]
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    response = client.post(
        f"/organizations/{gym.id}/members/{member.user.id}/erasure",
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json
    run(session, gym.id, bridge_settings, clock)
    assert account.users == {}

    _rejoin(client, session, gym)
    run(session, gym.id, bridge_settings, clock)

    (there,) = account.users
    assert (account.users[there]["email"], account.users[there]["active"]) == (
        session.get(User, member.user.id).email, True
    )  # fmt: skip
    assert entity_map.find(session, gym.id, EntityType.member, member.membership.id) is not None
    assert _parked(session) == []
    assert fake.calls_to("PATCH /v3/users") == []


def test_a_member_who_leaves_twice_is_deactivated_twice(
    client, session, gym, bridged, account, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    for _ in range(2):
        _remove(client, gym)
        run(session, gym.id, bridge_settings, clock)
        assert account.users[there]["active"] is False
        _rejoin(client, session, gym)
        run(session, gym.id, bridge_settings, clock)
        assert account.users[there]["active"] is True
    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)
    assert account.users[there]["active"] is False


def test_a_logins_user_created_sends_the_address_it_wrote_on_the_gym_profile_there(
    client, session, gym, bridged, account, bridge_settings, clock
):
    """The desk registered Pat under 'PAT@example.test'; her login's user.created (a proven
    'pat@example.test') links that profile and writes the login's address on it: the external
    user must carry it too, as after user.updated."""
    profile = factories.user(session, identity_id=None, email="PAT@example.test", name="Pat Cohen")
    desk = factories.membership(session, user=profile, organization=gym.organization,
                                role=Role.member)  # fmt: skip
    mirror.member_created(session, desk, now=NOW)
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    there = entity_map.find(session, gym.id, EntityType.member, desk.id).external_id
    assert account.users[there]["email"] == "PAT@example.test"

    event = {"type": "user.created", "data": provider_user("user_pat", "pat@example.test")}
    delivered = deliver(client, event)
    assert delivered.json["outcome"] == "linked"
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["email"] == "pat@example.test"


def test_drift_compares_the_addresses_by_the_projects_rule(
    session, gym, bridged, account, bridge_settings, clock
):
    """'İpek@' and 'i̇pek@' (a dotted capital I against an i and a combining dot) are two
    addresses to every lookup of the platform (the database's fold); str.lower() made them
    one, and drift missed an address the external system holds that is not the member's."""
    person = session.get(User, gym[Role.member].user.id)
    person.email = "İpek@example.test"
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    assert _drift(session, bridged, bridge_settings)["summary"]["members"] == 0

    account.users[there]["email"] = "i\u0307pek@example.test"
    different = _drift(session, bridged, bridge_settings)["members"]["different"]
    assert [(d["externalId"], d["fields"]) for d in different] == [(there, ["email"])]


def test_the_roster_import_matches_the_addresses_by_the_projects_rule(
    session, gym, bridged, account, fake
):
    """The external system holds 'Élodie@example.test', the gym 'Élodie@Example.test': one
    address by the platform's rule on both engines. str.lower() on theirs against the
    database's lower() on ours found no one on the embedded default (SQLite folds ASCII
    alone)."""
    person = factories.user(session, email="Élodie@Example.test")
    member = factories.membership(session, user=person, organization=gym.organization,
                                  role=Role.member)  # fmt: skip
    elodie = fake.add_user(account, "Élodie@example.test")
    session.commit()
    external = ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777")
    with external:
        outcome = import_roster(session, bridged, external, now=NOW)
    assert outcome["linked"] == 1
    assert entity_map.find(session, gym.id, EntityType.member, member.id).external_id == elodie


def test_a_new_address_on_its_way_with_the_return_keeps_the_member_active_there(
    client, session, gym, bridged, account, bridge_settings, clock
):
    """The member came back and changed their address before the reactivation was sent: the
    address's user.update replaces the waiting reactivation, so it carries that state too."""
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)
    _rejoin(client, session, gym)

    data = provider_user("user_member", "new.member@iron.example")
    assert deliver(client, {"type": "user.updated", "data": data}).status_code == 200
    run(session, gym.id, bridge_settings, clock)

    assert (account.users[there]["active"], account.users[there]["email"]) == (
        True, "new.member@iron.example"
    )  # fmt: skip
    assert _link_status(session, gym) == "active"


def test_a_deleted_gyms_member_who_changes_address_is_not_made_active_there(
    client, session, gym, bridged, account, bridge_settings, clock
):
    there = _mirrored_member(session, gym, bridge_settings, clock, plan=False)
    response = client.delete(f"/organizations/{gym.id}", headers=gym[Role.owner].headers)
    assert response.status_code == 200, response.json
    run(session, gym.id, bridge_settings, clock)

    data = provider_user("user_member", "new.member@iron.example")
    assert deliver(client, {"type": "user.updated", "data": data}).status_code == 200
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is False
