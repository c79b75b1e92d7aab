"""A deleted gym's bridge winds down on what the deletion queued and what was queued before it
(connection.wind_down); nothing queued for it afterwards is sent (queue.enqueue).

While it winds down its connection is still active (a member's deactivation waits to go), and
the gym's memberships still read active: a member never mirrored there who then changed their
name or address at the identity provider (mirror.member_updated) had a user.create queued for
the deleted gym, and the next dispatcher run created them there, name and address, at a gym
no one runs. A deleted gym takes only what gives something up there (a plan's or seat's
cancel, a user's deactivation); anything else is not queued."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.bridge import mirror, queue
from gymctl.bridge.connection import connect, find_connection
from gymctl.models import Role
from gymctl.models.bridge import ConnectionStatus, OpStatus, OpType, SyncOp
from tests import factories
from tests.api.test_identity_webhook import deliver, provider_user
from tests.bridge.conftest import API_KEY, member_payload, run
from tests.bridge.test_deleted_gym_winds_down import _delete
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

NEW_ADDRESS = "renamed.member@iron.example"


@pytest.fixture
def winding_down(client, session, gym, account, fake, bridge_settings, clock):
    """The gym's member never mirrored; another mirrored there; the gym deleted: the other's
    deactivation waits, so the bridge is still active, winding down."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    other = factories.membership(
        session,
        user=factories.user(session, email="other@iron.example"),
        organization=gym.organization,
        role=Role.member,
    )
    mirror.member_created(session, other, now=NOW)
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    (there,) = account.users
    _delete(client, gym)
    session.expire_all()
    assert find_connection(session, gym.id).status is ConnectionStatus.active
    fake.calls.clear()
    return there


def test_a_deleted_gyms_member_who_changes_address_is_not_created_there(
    client, session, gym, winding_down, account, fake, bridge_settings, clock
):
    data = provider_user("user_member", NEW_ADDRESS)
    assert deliver(client, {"type": "user.updated", "data": data}).status_code == 200

    run(session, gym.id, bridge_settings, clock)

    assert fake.calls_to("POST /v3/users") == []
    assert [c for c in fake.calls if NEW_ADDRESS in json.dumps([c.body, c.query])] == []
    assert list(account.users) == [winding_down]
    assert account.users[winding_down]["active"] is False  # the deletion's own op went
    session.expire_all()
    assert find_connection(session, gym.id).status is ConnectionStatus.revoked
    member = str(gym[Role.member].membership.id)
    mine = select(SyncOp).where(SyncOp.aggregate_key == f"member:{member}")
    assert session.scalars(mine).all() == []  # nothing queued for them


@pytest.mark.parametrize(
    ("op_type", "payload", "queued"),
    [
        ("user.create", member_payload(), False),
        ("user.update", member_payload(), False),
        ("user.update", {"active": False}, True),
    ],
    ids=["create", "details", "deactivation"],
)
def test_a_deleted_gym_takes_only_what_gives_something_up(
    session, gym, winding_down, op_type, payload, queued
):
    member = str(gym[Role.member].membership.id)
    op = queue.enqueue(session, organization_id=gym.id, op_type=op_type,
                       payload={**payload, "memberId": member}, now=NOW)  # fmt: skip
    assert (op is not None) is queued
    if op is not None:
        assert (op.op_type, op.status) == (OpType.user_update, OpStatus.pending)
