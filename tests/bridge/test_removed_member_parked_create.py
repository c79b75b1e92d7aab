"""A member removed while their user.create is parked, the owner then dismissing (or retrying)
it: no active user is left there for someone the gym no longer serves.

The create may have made the user there (a timeout after the write, then every search refused
until the ladder ran out: retries_exhausted) and no link says which. The removal
(mirror.member_retired) queues the member's deactivation behind the parked create, carrying
the create's address as the bridge's lookup key (as an erasure does, s49): a dismissed create
lets it search there and deactivate the user found; a retried one links that user, and the
deactivation follows it. Before, the removal left a parked create to the owner and queued
nothing: once dismissed, the user its first attempt made stayed active there.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bridge import entity_map, mirror
from gymctl.bridge.connection import connect
from gymctl.models import Role
from gymctl.models.bridge import EntityType, OpStatus, OpType, SyncOp
from tests.bridge.conftest import API_KEY, run
from tests.bridge.test_ended_members_deactivated import _remove
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def parked_create(session, gym, account, fake, bridge_settings, clock):
    """The member's create timed out after the external system wrote the user, then every
    search failed until its ladder ran out: parked retries_exhausted, the user there, no link."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    mirror.member_created(session, gym[Role.member].membership, now=NOW)
    session.commit()
    fake.time_out("POST /v3/users", after_apply=True)
    run(session, gym.id, bridge_settings, clock)
    fake.fail("GET /v3/searchUser", 503, times=20)
    for step in range(1, 8):
        clock.set(NOW + timedelta(minutes=2 * step))
        run(session, gym.id, bridge_settings, clock)
    fake.faults.clear()
    clock.set(NOW)  # the owner's session token is of now
    create = session.scalars(select(SyncOp)).one()
    assert (create.status, create.issue_code) == (OpStatus.parked, "retries_exhausted")
    (there,) = account.users
    assert account.users[there]["active"] is True
    return create, there


def _issue(client, gym, op_id: int, action: str) -> None:
    response = client.post(
        f"/organizations/{gym.id}/bridge/issues/{op_id}/{action}",
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json


def test_a_removed_members_dismissed_create_leaves_no_active_user_there(
    client, session, gym, parked_create, account, fake, bridge_settings, clock
):
    create, there = parked_create
    email = create.payload["email"]
    _remove(client, gym)
    run(session, gym.id, bridge_settings, clock)
    assert account.users[there]["active"] is True  # behind the parked create: the owner's call

    _issue(client, gym, create.id, "dismiss")
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is False
    assert len(account.users) == 1
    link = entity_map.find(session, gym.id, EntityType.member, gym[Role.member].membership.id)
    assert (link.external_id, link.data["status"]) == (there, "deactivated")
    session.expire_all()
    ops = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
    assert [(op.op_type, op.status) for op in ops] == [
        (OpType.user_create, OpStatus.dismissed),
        (OpType.user_update, OpStatus.succeeded),
    ]
    assert email not in json.dumps(ops[1].payload)  # the lookup key dropped once it was sent


def test_a_removed_members_retried_create_is_deactivated_once_it_went(
    client, session, gym, parked_create, account, fake, bridge_settings, clock
):
    create, there = parked_create
    _remove(client, gym)

    _issue(client, gym, create.id, "retry")
    run(session, gym.id, bridge_settings, clock)

    assert list(account.users) == [there]  # found by its search, not made twice
    assert account.users[there]["active"] is False


def test_a_removed_member_whose_create_parked_before_anything_went_deactivates_no_one_else(
    client, session, gym, account, fake, bridge_settings, clock
):
    """Parked at its first attempt (two users there have the address: identity_conflict), the
    create made no one. Dismissed, the deactivation's search meets the same two and parks:
    the owner is asked, no one is deactivated blind."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    mirror.member_created(session, gym[Role.member].membership, now=NOW)
    session.commit()
    create = session.scalars(select(SyncOp)).one()
    first = fake.add_user(account, create.payload["email"])
    second = fake.add_user(account, create.payload["email"])
    run(session, gym.id, bridge_settings, clock)
    _remove(client, gym)

    _issue(client, gym, create.id, "dismiss")
    run(session, gym.id, bridge_settings, clock)

    assert account.users[first]["active"] is not False
    assert account.users[second]["active"] is not False
    assert fake.calls_to("PATCH /v3/users") == []
    session.expire_all()
    parked = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.parked)).all()
    assert [(op.op_type, op.issue_code) for op in parked] == [
        (OpType.user_update, "identity_conflict")
    ]
