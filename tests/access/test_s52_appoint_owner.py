"""s52: a platform admin appoints the owner of a gym that has none (spec A 2.7). Once a platform
admin removed the owner, or the identity provider deleted the owner's login, nothing could make
anyone owner again (a transfer needs the owner as caller, an owner invitation the owner's
grant) and every owner-only act of the gym was dead. `PUT /admin/organizations/:orgId/owner`
(gymctl.access.owner_appointment.appoint_owner) makes an active member the owner; a gym with a
live owner is 409 owner_exists."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.access import identity_events
from gymctl.models import AuditLog, Membership, MembershipStatus, Role
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def owner_path(gym) -> str:
    return f"/admin/organizations/{gym.id}/owner"


def remove_the_owner(client, gym, platform_admin) -> None:
    owner = gym[Role.owner].user
    removed = client.delete(
        f"/admin/organizations/{gym.id}/members/{owner.id}", headers=platform_admin.headers
    )
    assert removed.status_code == 200, removed.json


def owners(session, gym) -> list:
    session.expire_all()
    return list(
        session.scalars(
            select(Membership.user_id).where(
                Membership.organization_id == gym.id,
                Membership.role == Role.owner,
                Membership.status == MembershipStatus.active,
            )
        )
    )


def test_an_appointed_owner_of_a_gym_whose_owner_was_removed_can_transfer_ownership(
    client, session, gym, platform_admin
):
    remove_the_owner(client, gym, platform_admin)
    admin, coach = gym[Role.admin], gym[Role.coach]
    # Without an owner no one can grant the owner role: the gym is stuck.
    stuck = client.patch(
        f"/organizations/{gym.id}/members/{coach.user.id}",
        json={"role": "owner"},
        headers=admin.headers,
    )
    assert (stuck.status_code, stuck.json["code"]) == (403, "role_grant_forbidden")

    response = client.put(
        owner_path(gym), json={"userId": str(admin.user.id)}, headers=platform_admin.headers
    )

    assert response.status_code == 200, response.json
    assert response.json == {
        "userId": str(admin.user.id),
        "role": "owner",
        "changed": True,
        "formerOwnerUserId": None,
    }
    assert owners(session, gym) == [admin.user.id]
    audit = session.scalar(
        select(AuditLog).where(
            AuditLog.action == "membership.role_changed", AuditLog.target_id == str(admin.user.id)
        )
    )
    assert audit.actor_user_id == platform_admin.user.id
    assert audit.organization_id == gym.id
    assert audit.data["from"] == "admin"
    assert audit.data["to"] == "owner"
    assert audit.data["ownerAppointed"] is True
    assert audit.data["platformAdmin"] is True

    before = snapshot(session)  # the same appointment again (a retry): a repeat, nothing written
    again = client.put(
        owner_path(gym), json={"userId": str(admin.user.id)}, headers=platform_admin.headers
    )
    assert (again.status_code, again.json["changed"]) == (200, False)
    assert snapshot(session) == before

    # The new owner does what only an owner may: transfer ownership.
    transfer = client.patch(
        f"/organizations/{gym.id}/members/{coach.user.id}",
        json={"role": "owner"},
        headers=admin.headers,
    )
    assert transfer.status_code == 200, transfer.json
    assert owners(session, gym) == [coach.user.id]


def test_the_owner_of_a_deleted_login_is_replaced_and_their_membership_ends(
    client, session, gym, platform_admin, settings
):
    owner, coach = gym[Role.owner], gym[Role.coach]
    identity_events.user_deleted(session, {"id": "user_owner"}, now=NOW, settings=settings)
    session.commit()
    assert owners(session, gym) == [owner.user.id]  # kept: a gym is never left without one

    response = client.put(
        owner_path(gym), json={"userId": str(coach.user.id)}, headers=platform_admin.headers
    )

    assert response.status_code == 200, response.json
    assert response.json["formerOwnerUserId"] == str(owner.user.id)
    assert owners(session, gym) == [coach.user.id]
    assert session.get(Membership, owner.membership.id).status is MembershipStatus.cancelled
    removed = session.scalar(
        select(AuditLog).where(
            AuditLog.action == "membership.removed", AuditLog.target_id == str(owner.user.id)
        )
    )
    assert removed.actor_user_id == platform_admin.user.id
    assert removed.data["reason"] == "owner_login_deleted"
    # The deleted login itself cannot be appointed back.
    back = client.put(
        owner_path(gym), json={"userId": str(owner.user.id)}, headers=platform_admin.headers
    )
    assert (back.status_code, back.json["code"]) == (409, "owner_exists")


def test_each_refusal_answers_its_code_and_changes_nothing(client, session, gym, platform_admin):
    admin, owner = gym[Role.admin], gym[Role.owner]
    elsewhere = factories.make_gym(session, roles=(Role.owner, Role.member))
    waiting = {
        status: factories.membership(
            session, user=factories.user(session), organization=gym.organization, status=status
        )
        for status in (
            MembershipStatus.invited,
            MembershipStatus.pending_invitation,
            MembershipStatus.suspended,
        )
    }
    session.commit()

    def refused(user_id, status, code, *, body=None, path=None):
        response = client.put(
            path or owner_path(gym),
            json={"userId": str(user_id)} if body is None else body,
            headers=platform_admin.headers,
        )
        assert (response.status_code, (response.get_json() or {}).get("code")) == (
            status,
            code,
        ), (user_id, body, response.get_data(as_text=True)[:300])

    before = snapshot(session)
    refused(admin.user.id, 409, "owner_exists")  # a live owner: only they transfer
    assert snapshot(session) == before
    remove_the_owner(client, gym, platform_admin)
    before = snapshot(session)
    for membership in waiting.values():  # not accepted yet, or suspended
        refused(membership.user_id, 409, "member_not_active")
    refused(owner.user.id, 409, "member_not_active")  # removed: the membership ended
    refused(uuid.uuid4(), 404, "member_not_found")
    refused(elsewhere.member.id, 404, "member_not_found")  # another gym's member
    refused(elsewhere.owner.id, 404, "member_not_found")
    for body in (
        {},
        {"userId": 5},
        {"userId": None},
        {"userId": "not-a-uuid"},
        {"userId": [str(admin.user.id)]},
        {"userId": {"id": str(admin.user.id)}},
        {"userId": str(admin.user.id), "role": "owner"},
        [str(admin.user.id)],
        "x" * 10_000,
    ):
        refused(None, 400, "invalid_body", body=body)
    deep = client.put(
        owner_path(gym),
        data=b"[" * 400 + b"]" * 400,
        content_type="application/json",
        headers=platform_admin.headers,
    )
    assert deep.status_code == 400
    assert deep.json["code"]
    huge = client.put(
        owner_path(gym),
        data=b'{"userId": "' + b"a" * (2 * 1024 * 1024) + b'"}',
        content_type="application/json",
        headers=platform_admin.headers,
    )
    assert (huge.status_code, huge.json["code"]) == (413, "body_too_large")
    refused(admin.user.id, 404, "not_found", path="/admin/organizations/not-a-uuid/owner")
    unknown_gym = f"/admin/organizations/{uuid.uuid4()}/owner"
    refused(admin.user.id, 404, "organization_not_found", path=unknown_gym)
    assert snapshot(session) == before

    gym.organization.deleted_at = NOW  # a deleted gym answers as every admin route does
    session.commit()
    refused(admin.user.id, 404, "organization_not_found")
    assert owners(session, gym) == []


def test_only_a_platform_admin_may_appoint(client, session, gym, outsider, platform_admin):
    remove_the_owner(client, gym, platform_admin)
    before = snapshot(session)
    body = {"userId": str(gym[Role.admin].user.id)}

    for person in (gym[Role.admin], gym[Role.coach], gym[Role.member], outsider):
        response = client.put(owner_path(gym), json=body, headers=person.headers)
        assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")
    assert client.put(owner_path(gym), json=body).status_code == 401
    assert snapshot(session) == before
