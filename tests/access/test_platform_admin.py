"""The platform-admin guard (spec A 5.2) and the one way to remove a gym's owner (spec A 2.7):
platformRole "admin" in the provider's private metadata, read at most once a minute per process,
failing closed when the provider cannot answer and nothing is cached."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, Membership, MembershipStatus, Role
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def bearer(idp, identity_id: str, clock) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.token(identity_id, now=clock.now())}"}


def trail(client, gym, headers):
    return client.get(f"/admin/users/{gym[Role.owner].user.id}/ownership-trail", headers=headers)


def admin_routes(gym):
    owner = gym[Role.owner].user
    member = gym[Role.member].user
    return [
        ("get", f"/admin/users/{owner.id}/ownership-trail", None),
        ("post", f"/admin/users/{member.id}/mark-email-verified", None),
        ("post", "/admin/owner-grants", {"email": "someone@example.test"}),
        ("delete", f"/admin/organizations/{gym.id}/members/{owner.id}", None),
    ]


# --- who passes ------------------------------------------------------------------------------


@pytest.mark.parametrize("route", range(4))
def test_a_non_admin_is_refused_403_platform_admin_required_on_every_admin_route(
    client, session, idp, gym, route
):
    idp.add_account("user_owner", "owner@iron.example", private_metadata={"platformRole": "x"})
    before = snapshot(session)
    method, path, body = admin_routes(gym)[route]

    for person in (gym[Role.owner], gym[Role.member]):  # with and without a provider account
        response = getattr(client, method)(path, json=body, headers=person.headers)
        assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")
    assert snapshot(session) == before


def test_an_admin_route_needs_a_session(client, gym):
    response = trail(client, gym, {})
    assert response.status_code == 401


def test_a_platform_admin_passes(client, gym, platform_admin):
    response = trail(client, gym, platform_admin.headers)

    assert response.status_code == 200
    assert response.json["user"]["id"] == str(gym[Role.owner].user.id)


# --- the one-minute cache --------------------------------------------------------------------


def test_the_metadata_is_read_once_per_minute_per_process(client, clock, idp, gym, platform_admin):
    reads = idp.admin_requests

    for _ in range(3):
        assert trail(client, gym, platform_admin.headers).status_code == 200
    assert idp.admin_requests == reads + 1

    clock.set(NOW + timedelta(seconds=59))
    assert trail(client, gym, bearer(idp, "user_ops", clock)).status_code == 200
    assert idp.admin_requests == reads + 1

    clock.set(NOW + timedelta(seconds=61))
    headers = bearer(idp, "user_ops", clock)
    for _ in range(3):
        assert trail(client, gym, headers).status_code == 200
    assert idp.admin_requests == reads + 2


def test_a_refusal_is_cached_for_the_minute_too(client, clock, idp, gym):
    owner = gym[Role.owner]
    reads = idp.admin_requests

    for _ in range(3):
        assert trail(client, gym, owner.headers).status_code == 403
    assert idp.admin_requests == reads + 1

    idp.add_account("user_owner", "owner@iron.example", private_metadata={"platformRole": "admin"})
    assert trail(client, gym, owner.headers).status_code == 403  # still the cached answer
    clock.set(NOW + timedelta(seconds=61))
    assert trail(client, gym, bearer(idp, "user_owner", clock)).status_code == 200
    assert idp.admin_requests == reads + 2


def test_a_revoked_admin_loses_access_within_the_minute(client, clock, idp, gym, platform_admin):
    assert trail(client, gym, platform_admin.headers).status_code == 200

    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={})
    clock.set(NOW + timedelta(seconds=61))
    response = trail(client, gym, bearer(idp, "user_ops", clock))

    assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")


# --- the provider cannot answer --------------------------------------------------------------


@pytest.mark.parametrize("fault", ["down", "rate_limited", "server_error"])
def test_with_nothing_cached_an_unanswering_provider_fails_closed_with_503(
    client, session, idp, gym, platform_admin, fault
):
    if fault == "down":
        idp.down = True
    elif fault == "rate_limited":
        idp.answer_429_after = idp.admin_requests
    else:
        idp.admin_status = 500
    before = snapshot(session)

    response = client.delete(
        f"/admin/organizations/{gym.id}/members/{gym[Role.owner].user.id}",
        headers=platform_admin.headers,
    )

    assert (response.status_code, response.json["code"]) == (503, "identity_admin_unavailable")
    assert snapshot(session) == before


def test_with_the_provider_down_a_cached_answer_stands_even_when_stale(
    client, clock, idp, gym, platform_admin
):
    owner = gym[Role.owner]
    assert trail(client, gym, platform_admin.headers).status_code == 200
    assert trail(client, gym, owner.headers).status_code == 403
    idp.down = True
    clock.set(NOW + timedelta(minutes=10))
    reads = idp.admin_requests

    allowed = trail(client, gym, bearer(idp, "user_ops", clock))
    refused = trail(client, gym, bearer(idp, "user_owner", clock))

    assert allowed.status_code == 200
    assert (refused.status_code, refused.json["code"]) == (403, "platform_admin_required")
    assert idp.admin_requests == reads + 2  # each stale answer was re-asked, then stood


# --- removing the owner ----------------------------------------------------------------------


def test_a_platform_admin_removes_a_gyms_owner(client, session, gym, platform_admin):
    owner = gym[Role.owner]

    response = client.delete(
        f"/admin/organizations/{gym.id}/members/{owner.user.id}", headers=platform_admin.headers
    )

    assert response.status_code == 200
    assert response.json == {"userId": str(owner.user.id), "status": "cancelled"}
    session.expire_all()
    membership = session.get(Membership, owner.membership.id)
    assert (membership.role, membership.status) == (Role.owner, MembershipStatus.cancelled)
    [audit] = session.scalars(select(AuditLog).where(AuditLog.action == "membership.removed"))
    assert audit.actor_user_id == platform_admin.user.id
    assert (audit.data["role"], audit.data["platformAdmin"]) == ("owner", True)
    me = client.get("/users/me", headers=owner.headers).json
    assert me["activeOrganization"] is None


@pytest.mark.parametrize("by", [Role.admin, Role.owner])
def test_the_owner_is_not_removable_through_the_organization_route(client, session, gym, by):
    before = snapshot(session)

    response = client.delete(
        f"/organizations/{gym.id}/members/{gym[Role.owner].user.id}", headers=gym[by].headers
    )

    assert (response.status_code, response.json["code"]) == (403, "owner_protected")
    assert snapshot(session) == before


def test_removing_someone_who_is_not_a_member_is_404(
    client, session, gym, outsider, platform_admin
):
    before = snapshot(session)

    response = client.delete(
        f"/admin/organizations/{gym.id}/members/{outsider.user.id}", headers=platform_admin.headers
    )

    assert (response.status_code, response.json["code"]) == (404, "member_not_found")
    assert snapshot(session) == before
