"""Spec A 6.4: push registration requires membership in the mapped organization; fanout and
delivery revalidate organization scope, membership, app enablement and token revocation."""

from __future__ import annotations

import json

import pytest

from gymctl.models import MembershipStatus, OrganizationStatus, Role
from gymctl.models.releases import PushRegistration
from gymctl.providers.push import LocalPushProvider
from gymctl.releases import branded_apps, push
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

IOS_ID = "com.gymctl.gym.iron-temple"


@pytest.fixture
def provider(tmp_path):
    return LocalPushProvider(tmp_path / "push")


def _register(client, gym, role=Role.member, *, app_id=IOS_ID, token="apns-token-1", org=None):
    return client.post(
        f"/organizations/{org or gym.id}/push-registrations",
        json={"appId": app_id, "platform": "ios", "token": token},
        headers=gym[role].headers,
    )


def _deliver(session, provider, gym, role=Role.member):
    return push.deliver(
        session, provider, gym.id, [gym[role].user.id], title="Class moved", body="6pm", now=NOW
    )


def test_a_member_registers_and_receives(client, session, branded, gym, provider, tmp_path):
    response = _register(client, gym)
    assert (response.status_code, response.json) == (201, {"registered": True})
    assert _deliver(session, provider, gym) == {"sent": 1, "skipped": {}}
    [line] = (tmp_path / "push" / "outbox.jsonl").read_text().splitlines()
    assert "apns-token-1" not in line  # the outbox keeps only the token's digest
    assert json.loads(line)["appId"] == IOS_ID


def test_registration_requires_membership_in_the_mapped_organization(
    client, session, branded, gym, outsider
):
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/push-registrations",
        json={"appId": IOS_ID, "platform": "ios", "token": "t"},
        headers=outsider.headers,
    )
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")
    # Another gym's member cannot register this gym's app under their own gym either.
    other = factories.organization(session)
    factories.membership(session, user=gym[Role.member].user, organization=other)
    session.commit()
    before = snapshot(session)
    response = _register(client, gym, org=other.id)
    assert (response.status_code, response.json["code"]) == (404, "app_identity_not_found")
    assert snapshot(session) == before


def test_a_disabled_app_cannot_register(client, session, branded, gym):
    branded_apps.set_enabled(session, gym.id, False, now=NOW)
    session.commit()
    response = _register(client, gym)
    assert (response.status_code, response.json["code"]) == (404, "app_identity_not_found")


def test_the_container_app_registers_in_any_gym_of_the_member(client, session, branded, gym):
    assert _register(client, gym, app_id="com.gymctl.app").status_code == 201


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("membership_cancelled", "not_a_member"),
        ("organization_inactive", "organization_inactive"),
        ("organization_deleted", "organization_inactive"),
        ("app_disabled", "app_disabled"),
        ("signed_out", "revoked"),
    ],
)
def test_delivery_revalidates_everything_at_send_time(
    client, session, branded, gym, provider, change, reason
):
    assert _register(client, gym).status_code == 201
    if change == "membership_cancelled":
        gym[Role.member].membership.status = MembershipStatus.cancelled
    elif change == "organization_inactive":
        gym.organization.status = OrganizationStatus.inactive
    elif change == "organization_deleted":
        gym.organization.deleted_at = NOW
    elif change == "app_disabled":
        branded_apps.set_enabled(session, gym.id, False, now=NOW)
    else:
        response = client.post(
            f"/organizations/{gym.id}/push-registrations/revoke",
            json={"appId": IOS_ID, "token": "apns-token-1"},
            headers=gym[Role.member].headers,
        )
        assert response.json == {"revoked": True}
    session.commit()
    assert _deliver(session, provider, gym) == {"sent": 0, "skipped": {reason: 1}}
    assert provider.sent == []


def test_delivery_is_scoped_to_the_organization(client, session, branded, gym, provider):
    assert _register(client, gym).status_code == 201
    other = factories.organization(session)
    result = push.deliver(
        session, provider, other.id, [gym[Role.member].user.id], title="x", body="y", now=NOW
    )
    assert result == {"sent": 0, "skipped": {"out_of_scope": 1}}


def test_a_token_the_provider_reports_unregistered_is_revoked(
    client, session, branded, gym, provider
):
    assert _register(client, gym).status_code == 201
    provider.unregistered.add("apns-token-1")
    assert _deliver(session, provider, gym) == {"sent": 0, "skipped": {"unregistered": 1}}
    row = session.query(PushRegistration).one()
    assert row.revoked_reason == "unregistered"
    assert _deliver(session, provider, gym) == {"sent": 0, "skipped": {"revoked": 1}}


def test_a_device_handed_to_another_member_belongs_to_them_only(
    client, session, branded, gym, provider
):
    assert _register(client, gym, Role.member).status_code == 201
    assert _register(client, gym, Role.coach).status_code == 201
    assert _deliver(session, provider, gym, Role.member)["sent"] == 0
    assert _deliver(session, provider, gym, Role.coach)["sent"] == 1


def test_revoking_someone_elses_token_does_nothing(client, session, branded, gym):
    assert _register(client, gym, Role.member).status_code == 201
    response = client.post(
        f"/organizations/{gym.id}/push-registrations/revoke",
        json={"appId": IOS_ID, "token": "apns-token-1"},
        headers=gym[Role.coach].headers,
    )
    assert response.json == {"revoked": False}
