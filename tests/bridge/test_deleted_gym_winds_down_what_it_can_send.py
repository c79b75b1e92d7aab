"""A deleted gym's bridge winds down on what it can still send (bridge.connection.wind_down):
ops stuck behind a parked op wait for an owner no deleted gym has, so they keep the connection
open no longer; and a key never verified (pending) is revoked at the deletion, as a refused one
is: nothing is sent, the key is purged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bridge import mirror
from gymctl.bridge.connection import connect, find_connection
from gymctl.models import AuditLog, Role
from gymctl.models.billing import PlanType
from gymctl.models.bridge import ConnectionStatus, OpStatus, OpType, SyncOp
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import API_KEY, run
from tests.bridge.test_deleted_gym_winds_down import _delete, _mark_polls_due
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


def _member_with_a_plan_queued(session, gym) -> None:
    """The gym's member mirrored: their user.create, then their plan's bridge membership."""
    member = gym[Role.member].membership
    mirror.member_created(session, member, now=NOW)
    sold = make_plan(session, gym.organization, PlanType.cash)
    mirror.subscription_changed(session, make_subscription(session, Gym.of(member), plan=sold),
                                now=NOW)  # fmt: skip
    session.commit()


def _revoked_as_deleted(session, gym) -> None:
    session.expire_all()
    connection = find_connection(session, gym.id)
    assert connection.status is ConnectionStatus.revoked
    assert connection.credentials_ciphertext is None
    audits = session.scalars(
        select(AuditLog).where(
            AuditLog.action == "bridge.disconnected", AuditLog.organization_id == gym.id
        )
    ).all()
    assert len(audits) == 1, [(a.at, a.data, a.actor_user_id) for a in audits]
    (audit,) = audits
    assert audit.data["because"] == "organization_deleted"


def test_a_deleted_gyms_bridge_disconnects_when_its_only_ops_wait_behind_a_parked_create(
    client, session, gym, account, fake, bridge_settings, clock
):
    """The member's create parked (identity_conflict): their plan, and the deletion's
    deactivation, wait behind it for an owner the deleted gym no longer has. They are not
    what the bridge can still send: it is disconnected, not kept active for ever."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    _member_with_a_plan_queued(session, gym)
    create = session.scalars(select(SyncOp).where(SyncOp.op_type == OpType.user_create)).one()
    fake.add_user(account, create.payload["email"])
    fake.add_user(account, create.payload["email"])  # two users there: whose is it?
    run(session, gym.id, bridge_settings, clock)
    session.expire_all()
    assert (create.status, create.issue_code) == (OpStatus.parked, "identity_conflict")
    assert find_connection(session, gym.id).status is ConnectionStatus.active

    _delete(client, gym)
    fake.calls.clear()
    clock.set(NOW + timedelta(minutes=1))
    _mark_polls_due(session, clock.now())
    run(session, gym.id, bridge_settings, clock)

    waiting = session.scalars(
        select(SyncOp).where(SyncOp.status.in_((OpStatus.pending, OpStatus.failed)))
    ).all()
    assert waiting  # behind the parked create, kept as the record of what was not sent
    _revoked_as_deleted(session, gym)
    assert [c for c in fake.calls if c.method != "GET"] == []
    assert fake.calls_to("GET /v3/schedule") == []


def test_a_deleted_gyms_bridge_with_a_key_never_verified_is_revoked_at_the_deletion(
    client, session, gym, account, fake, bridge_settings, clock
):
    """The key was stored while the external system could not answer (pending): no owner of
    a deleted gym can mend it, and checking it would send the queue of a gym no one runs."""
    fake.fail("GET /v3/locations", 503)
    pending = connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    assert pending.status is ConnectionStatus.pending
    _member_with_a_plan_queued(session, gym)
    assert session.scalars(select(SyncOp)).all()
    fake.calls.clear()

    _delete(client, gym)

    _revoked_as_deleted(session, gym)
    clock.set(NOW + timedelta(minutes=2))
    _mark_polls_due(session, clock.now())
    run(session, gym.id, bridge_settings, clock)
    assert fake.calls == []  # nothing checked, nothing sent
    assert account.users == {}
    assert account.memberships == {}
    session.expire_all()
    assert find_connection(session, gym.id).credentials_ciphertext is None
    unsent = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.pending)).all()
    assert unsent  # kept as the record of what was not sent


def test_a_deleted_gyms_connection_left_in_error_is_revoked_by_the_dispatcher(
    client, session, gym, account, fake, bridge_settings, clock
):
    """A deleted gym's connection that is neither active nor revoked (as a key check refused
    after a deletion that did not revoke it left it): the dispatcher winds it down before it
    gives up on a gym not connected, rather than leave the key stored for ever."""
    connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    _member_with_a_plan_queued(session, gym)
    _delete(client, gym)
    session.expire_all()
    connection = find_connection(session, gym.id)
    assert connection.status is ConnectionStatus.active  # its queue may still go
    connection.status = ConnectionStatus.error
    session.commit()
    fake.calls.clear()

    clock.set(NOW + timedelta(minutes=2))
    run(session, gym.id, bridge_settings, clock)

    _revoked_as_deleted(session, gym)
    assert fake.calls == []
