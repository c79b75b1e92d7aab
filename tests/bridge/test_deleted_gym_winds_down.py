"""A deleted gym's bridge winds down (bridge.connection.wind_down): what the deletion queued
there (its members' plans given up, their users deactivated) is sent, then the connection is
revoked: no poll, no retry, the key purged, the external account free for another gym. Under a
refused key nothing could ever be sent: revoked at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bridge import mirror, sweeps
from gymctl.bridge.connection import connect, find_connection
from gymctl.models import AuditLog, Role
from gymctl.models.billing import PlanType
from gymctl.models.bridge import ConnectionStatus, OpStatus, SyncOp
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import API_KEY, run
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


@pytest.fixture
def bridged(session, gym, account, bridge_settings, clock):
    """The gym's member mirrored there with a plan's bridge membership."""
    connection = connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
    member = gym[Role.member].membership
    mirror.member_created(session, member, now=NOW)
    sold = make_plan(session, gym.organization, PlanType.cash)
    mirror.subscription_changed(session, make_subscription(session, Gym.of(member), plan=sold),
                                now=NOW)  # fmt: skip
    session.commit()
    run(session, gym.id, bridge_settings, clock)
    return connection


def _delete(client, gym):
    response = client.delete(f"/organizations/{gym.id}", headers=gym[Role.owner].headers)
    assert response.status_code == 200, response.json


def _mark_polls_due(session, at):
    """The daemon table's poll and reconcile rows, as the daemon runs them."""
    sweeps.schedule_poll(session, at, None)
    sweeps.booking_reconcile(session, at, None)
    session.commit()


def test_a_deleted_gyms_bridge_sends_its_members_deactivation_then_disconnects(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    (there,) = account.users
    _delete(client, gym)
    fake.calls.clear()
    clock.set(NOW + timedelta(minutes=1))
    _mark_polls_due(session, clock.now())

    summary = run(session, gym.id, bridge_settings, clock)

    assert account.users[there]["active"] is False  # the deletion's ops went first
    assert [m["active"] for m in account.memberships.values()] == [False]
    assert fake.calls_to("GET /v3/schedule") == []  # a deleted gym polls nothing
    assert summary.stopped == "organization_deleted"
    session.expire_all()
    connection = find_connection(session, gym.id)
    assert connection.status is ConnectionStatus.revoked
    assert connection.credentials_ciphertext is None
    (audit,) = session.scalars(
        select(AuditLog).where(AuditLog.action == "bridge.disconnected")
    ).all()
    assert audit.data["because"] == "organization_deleted"

    fake.calls.clear()
    clock.set(NOW + timedelta(minutes=10))
    _mark_polls_due(session, clock.now())
    assert run(session, gym.id, bridge_settings, clock).stopped == "not_connected"
    assert fake.calls == []


def test_a_deleted_gyms_op_that_fails_waits_on_its_ladder_and_the_bridge_then_closes(
    client, session, gym, bridged, account, fake, bridge_settings, clock
):
    """A deactivation lost to a moment's outage would leave the member active there: it is
    retried on its ladder, and only then is the bridge disconnected."""
    (there,) = account.users
    _delete(client, gym)
    fake.fail("PATCH /v3/users", 503)

    run(session, gym.id, bridge_settings, clock)
    session.expire_all()
    assert find_connection(session, gym.id).status is ConnectionStatus.active
    assert account.users[there]["active"] is True

    clock.set(NOW + timedelta(minutes=2))
    run(session, gym.id, bridge_settings, clock)
    session.expire_all()
    assert account.users[there]["active"] is False
    assert find_connection(session, gym.id).status is ConnectionStatus.revoked


def test_a_deleted_gyms_bridge_under_a_refused_key_is_revoked_at_the_deletion(
    client, session, gym, bridged, account, bridge_settings
):
    """No owner can paste another key for a deleted gym: its queue could never leave."""
    bridged.status = ConnectionStatus.error
    session.commit()

    _delete(client, gym)

    session.expire_all()
    assert find_connection(session, gym.id).status is ConnectionStatus.revoked
    waiting = session.scalars(select(SyncOp).where(SyncOp.status == OpStatus.pending)).all()
    assert waiting  # kept as the record of what was not sent
