"""Erasure and the bridge's queue (spec A 2.8, spec B 4.6): no user op of an erased member keeps
their name or address (withdrawn, sent or otherwise stored: only the member id and the active
flag stay), and an external user a withdrawn create may have made there is found by its
address and deactivated, never left active for an erased member.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.bridge import entity_map, mirror
from gymctl.bridge.connection import connect
from gymctl.models import Role, User
from gymctl.models.bridge import EntityType, OpStatus, OpType, SyncOp
from tests.bridge.conftest import API_KEY, run
from tests.bridge.test_ended_members_deactivated import _parked, _rejoin
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def bridged(session, gym, account, bridge_settings):
    connection = connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    return connection


def _erase(client, gym) -> dict:
    response = client.post(
        f"/organizations/{gym.id}/members/{gym[Role.member].user.id}/erasure",
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json
    return response.json


def _stored(session, *values: str) -> list[tuple[OpType, OpStatus, dict]]:
    """The user ops whose payload holds any of `values`."""
    session.expire_all()
    ops = session.scalars(select(SyncOp).order_by(SyncOp.id))
    return [(op.op_type, op.status, op.payload) for op in ops
            if any(value in json.dumps(op.payload) for value in values)]  # fmt: skip


def _details(session, gym) -> tuple[str, str]:
    """The member is named Noa Barak: their address and first name, as their create sends them."""
    person = session.get(User, gym[Role.member].user.id)
    person.name = "Noa Barak"
    session.commit()
    return person.email, "Noa"


def test_no_payload_of_an_erased_member_keeps_their_name_or_address(
    client, session, gym, bridged, account, bridge_settings, clock
):
    """A create sent, an update sent, an update waiting: all scrubbed, the waiting one withdrawn."""
    member = gym[Role.member]
    details = _details(session, gym)
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    person = session.get(User, member.user.id)
    person.name = "Dana Levi"
    mirror.member_updated(session, person, now=NOW)
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    person.name = "Dana Cohen"
    mirror.member_updated(session, person, now=NOW)
    session.commit()
    assert len(_stored(session, *details, "Levi", "Cohen")) == 3

    _erase(client, gym)

    assert _stored(session, *details, "Levi", "Cohen") == []
    ops = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
    assert [(op.op_type, op.status, op.dedupe_key is not None) for op in ops] == [
        (OpType.user_create, OpStatus.succeeded, True),
        (OpType.user_update, OpStatus.succeeded, False),
        (OpType.user_update, OpStatus.superseded, False),
        (OpType.user_update, OpStatus.pending, True),  # the deactivation
    ]
    assert {op.payload["memberId"] for op in ops} == {str(member.membership.id)}
    run(session, gym.id, bridge_settings, clock)
    (there,) = account.users
    assert account.users[there]["active"] is False
    assert account.users[there]["first_name"] == "Dana"  # what was sent is the external's


@pytest.mark.parametrize("parked", [False, True], ids=["failed", "parked"])
def test_a_withdrawn_create_that_may_have_gone_has_its_user_found_and_deactivated(
    client, session, gym, bridged, account, fake, bridge_settings, clock, parked
):
    """The create timed out after the external system wrote the user (attempts 1): erasure
    withdraws it, and the deactivation searches by the address it was sent with."""
    member = gym[Role.member]
    email, first = _details(session, gym)
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    fake.time_out("POST /v3/users", after_apply=True)
    run(session, gym.id, bridge_settings, clock)
    (there,) = account.users
    create = session.scalars(select(SyncOp)).one()
    assert (create.status, create.attempts) == (OpStatus.failed, 1)
    if parked:
        create.status, create.issue_code = OpStatus.parked, "retries_exhausted"
        session.commit()

    _erase(client, gym)
    session.expire_all()
    deactivation = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.pending)).one()
    assert deactivation.payload == {"memberId": str(member.membership.id), "active": False,
                                    "email": email}  # fmt: skip
    assert [op for op in _stored(session, email, first) if op[2] != deactivation.payload] == []
    run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is False
    assert len(fake.calls_to("POST /v3/users")) == 1  # never created again
    link = entity_map.find(session, gym.id, EntityType.member, member.membership.id)
    assert (link.external_id, link.data["status"]) == (there, "deactivated")
    assert _stored(session, email, first) == []  # the address went with the search
    assert _parked(session) == []


def test_a_withdrawn_create_that_never_reached_there_deactivates_no_one(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    member = gym[Role.member]
    email, first = _details(session, gym)
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    fake.time_out("POST /v3/users", after_apply=False)
    run(session, gym.id, bridge_settings, clock)
    assert account.users == {}

    _erase(client, gym)
    run(session, gym.id, bridge_settings, clock)

    assert account.users == {}
    assert fake.calls_to("PATCH /v3/users") == []
    assert _stored(session, email, first) == []
    assert entity_map.find(session, gym.id, EntityType.member, member.membership.id) is None


def test_an_erased_member_whose_create_may_have_gone_rejoins_as_that_user(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    """Back before the deactivation went: it is moot; their create, revived, finds the user
    there by its address (attempted: it searches first) and is never deactivated."""
    member = gym[Role.member]
    mirror.member_created(session, member.membership, now=NOW)
    session.commit()
    fake.time_out("POST /v3/users", after_apply=True)
    run(session, gym.id, bridge_settings, clock)
    (there,) = account.users
    _erase(client, gym)

    _rejoin(client, session, gym)
    run(session, gym.id, bridge_settings, clock)

    assert list(account.users) == [there]
    assert account.users[there]["active"] is True
    assert fake.calls_to("PATCH /v3/users") == []
    link = entity_map.find(session, gym.id, EntityType.member, member.membership.id)
    assert link.external_id == there
    assert _parked(session) == []
