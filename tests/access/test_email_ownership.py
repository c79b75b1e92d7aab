"""Email ownership and the ways a gym creates members (spec A 5.3)."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import func, select

from gymctl.access.invitations import _links
from gymctl.models import (
    AuditLog,
    Invitation,
    Lead,
    Membership,
    MembershipStatus,
    Organization,
    PaymentTransaction,
    Role,
    Subscription,
    Tier,
    User,
)
from tests import factories
from tests.access.conftest import imported, signed_in, snapshot
from tests.billing import factories as bf
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def count(session, model, *where):
    return session.scalar(select(func.count()).select_from(model).where(*where))


def desk(client, gym, email, by=Role.admin):
    return client.post(
        f"/organizations/{gym.id}/members",
        json={"email": email, "name": "Pat"},
        headers={**gym[by].headers, "X-Forwarded-For": "10.0.0.1, 203.0.113.9"},
    )


def test_desk_registration_creates_an_unproven_profile_then_sign_in_links_it(
    client, gym, session, idp
):
    created = desk(client, gym, "pat@example.test")
    assert (created.status_code, created.json["login"]) == (201, "unproven")
    roster = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.coach].headers).json
    assert {m["email"]: m["login"] for m in roster["members"]}["pat@example.test"] == "unproven"

    pat = signed_in(idp, session, identity_id="user_pat", email="pat@example.test")
    session.commit()
    me = client.get("/users/me", headers=pat.headers).json
    assert me["user"]["id"] == created.json["userId"]  # the gym's row now carries the login
    assert me["activeOrganization"]["id"] == str(gym.id)
    assert session.get(User, uuid.UUID(created.json["userId"])).identity_id == "user_pat"
    assert count(session, AuditLog, AuditLog.action == "user.linked") == 1


def test_an_unproven_login_never_takes_over_the_gym_profile(
    client, gym, session, idp, platform_admin
):
    """Spec A 5.3: the gym-created profile is not linked; /users/me answers 403
    EMAIL_OWNERSHIP_REQUIRED until an operator marks the email verified."""
    profile_id = uuid.UUID(desk(client, gym, "pat@example.test").json["userId"])
    joiner = signed_in(
        idp, session, identity_id="user_joiner", email="pat@example.test", verified=False
    )
    session.commit()
    before = snapshot(session)
    refused = client.get("/users/me", headers=joiner.headers)
    assert (refused.status_code, refused.json["code"]) == (403, "EMAIL_OWNERSHIP_REQUIRED")
    assert session.get(User, profile_id).identity_id is None
    assert snapshot(session) == before  # both user rows whole, memberships, audit: nothing

    marked = client.post(
        "/admin/users/user_joiner/mark-email-verified", headers=platform_admin.headers
    )
    assert marked.json == {"userId": str(joiner.user.id), "verified": True, "changed": True}
    me = client.get("/users/me", headers=joiner.headers)
    assert me.status_code == 200
    assert me.json["user"]["id"] == str(profile_id)
    session.expire_all()
    assert session.get(User, joiner.user.id).deleted_at is not None


def test_mark_email_verified_needs_a_platform_admin(client, gym):
    response = client.post(
        f"/admin/users/{gym[Role.member].user.id}/mark-email-verified",
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")


@pytest.mark.parametrize("route", ["desk", "lead", "import"])
def test_registering_the_address_of_an_unproven_login_is_refused_and_audited(
    client, gym, session, idp, route
):
    """STAFF_REGISTRATION_UNVERIFIED (422), with membership.registration_refused recording
    staff, gym, IP, path and the attempted role; nothing else changes."""
    signed_in(idp, session, identity_id="user_unproven", email="maybe@example.test", verified=False)
    session.commit()
    users_before = count(session, User)
    headers = {**gym[Role.admin].headers, "X-Forwarded-For": "203.0.113.9"}
    if route == "desk":
        response = desk(client, gym, "maybe@example.test")
    elif route == "lead":
        lead = client.post(
            f"/organizations/{gym.id}/leads",
            json={"name": "Maybe", "email": "maybe@example.test"},
            headers=headers,
        ).json
        response = client.post(
            f"/organizations/{gym.id}/leads/{lead['id']}/convert", headers=headers
        )
    else:
        queued = client.post(
            f"/organizations/{gym.id}/members/import",
            data={"file": (io.BytesIO(b"email,name\nmaybe@example.test,M\n"), "members.csv")},
            headers=headers,
            content_type="multipart/form-data",
        )
        response = imported(client, queued, headers)
        session.expire_all()  # the daemon's sessions wrote what follows
    if route == "import":
        assert response.status_code == 200
        assert response.json["results"]["members"]["unverified"] == ["maybe@example.test"]
    else:
        assert (response.status_code, response.json["code"]) == (
            422,
            "STAFF_REGISTRATION_UNVERIFIED",
        )
    [audit] = session.scalars(
        select(AuditLog).where(AuditLog.action == "membership.registration_refused")
    ).all()
    assert audit.data["staffUserId"] == str(gym[Role.admin].user.id)
    assert audit.data["organizationId"] == str(gym.id)
    assert audit.data["ip"] == "203.0.113.9"
    assert audit.data["path"].startswith(f"/organizations/{gym.id}/")
    assert audit.data["attemptedRole"] == "member"
    assert count(session, User) == users_before
    assert count(session, Membership, Membership.organization_id == gym.id) == 4
    if route == "lead":
        assert session.scalar(select(Lead.status)) == "open"


def test_import_creates_members_and_lists_each_outcome(client, gym, session):
    factories.user(
        session, identity_id="user_known", email="known@example.test", email_verified_at=NOW
    )
    session.commit()
    csv = (
        "Email,Name\nnew1@example.test,One\nknown@example.test,Known\nnot-an-email,X\n"
        "new1@example.test,Again\nmember@iron.example,Already\n"
    )
    queued = client.post(
        f"/organizations/{gym.id}/members/import",
        data=csv,
        headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
    )
    assert (queued.json["status"], queued.json["total"], queued.json["done"]) == ("queued", 3, 0)
    response = imported(client, queued, gym[Role.owner].headers)
    assert (response.json["status"], response.json["done"]) == ("finished", 3)
    members = response.json["results"]["members"]
    assert members["created"] == ["new1@example.test", "known@example.test"]
    assert members["existing"] == ["member@iron.example"]
    assert [i["reason"] for i in members["invalid"]] == ["email_invalid", "duplicate"]
    new = session.scalar(select(User).where(User.email == "new1@example.test"))
    assert (new.identity_id, new.signup_origin) == (None, "import")


def test_import_over_the_tier_cap_is_refused_up_front_creating_nothing(client, gym, session):
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter
    for n in range(149):
        person = factories.user(session, identity_id=None, email=f"m{n}@example.test")
        factories.membership(session, user=person, organization=organization)
    session.commit()  # 150 active members with the fixture's one: the starter cap
    users_before = count(session, User)
    response = client.post(
        f"/organizations/{gym.id}/members/import",
        data="email\nextra@example.test\n",
        headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
    )
    assert (response.status_code, response.json["code"]) == (422, "member_cap_exceeded")
    assert response.json["cap"] == 150
    assert count(session, User) == users_before


def test_import_needs_an_email_column(client, gym):
    response = client.post(
        f"/organizations/{gym.id}/members/import",
        data="name\nX\n",
        headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
    )
    assert (response.status_code, response.json["code"]) == (422, "import_invalid")


def test_lead_conversion_makes_an_active_member(client, gym, session):
    lead = client.post(
        f"/organizations/{gym.id}/leads",
        json={"name": "Lee", "email": "lee@example.test"},
        headers=gym[Role.admin].headers,
    ).json
    converted = client.post(
        f"/organizations/{gym.id}/leads/{lead['id']}/convert", headers=gym[Role.admin].headers
    )
    assert converted.json["login"] == "unproven"
    again = client.post(
        f"/organizations/{gym.id}/leads/{lead['id']}/convert", headers=gym[Role.admin].headers
    )
    assert (again.status_code, again.json["code"]) == (409, "lead_converted")
    membership = session.scalar(
        select(Membership).where(Membership.user_id == uuid.UUID(converted.json["userId"]))
    )
    assert membership.status is MembershipStatus.active


def test_role_changes_follow_the_grant_matrix_and_ownership_only_transfers(client, gym, session):
    base = f"/organizations/{gym.id}/members"
    coach_id, admin_id = gym[Role.coach].user.id, gym[Role.admin].user.id
    owner_id = gym[Role.owner].user.id
    refused = client.patch(
        f"{base}/{coach_id}", json={"role": "admin"}, headers=gym[Role.admin].headers
    )
    assert (refused.status_code, refused.json["code"]) == (403, "role_grant_forbidden")
    refused = client.patch(
        f"{base}/{owner_id}", json={"role": "member"}, headers=gym[Role.admin].headers
    )
    assert (refused.status_code, refused.json["code"]) == (403, "role_grant_forbidden")
    refused = client.patch(
        f"{base}/{owner_id}", json={"role": "admin"}, headers=gym[Role.owner].headers
    )
    assert (refused.status_code, refused.json["code"]) == (403, "role_change_self")
    assert (
        client.patch(
            f"{base}/{coach_id}", json={"role": "member"}, headers=gym[Role.admin].headers
        ).json["role"]
        == "member"
    )

    transfer = client.patch(
        f"{base}/{admin_id}", json={"role": "owner"}, headers=gym[Role.owner].headers
    )
    assert transfer.json["role"] == "owner"
    roles = {
        m["userId"]: m["role"]
        for m in client.get(base, headers=gym[Role.admin].headers).json["members"]
    }
    assert (roles[str(admin_id)], roles[str(owner_id)]) == ("owner", "admin")
    assert list(roles.values()).count("owner") == 1


def test_the_owner_is_removable_only_by_a_platform_admin(client, gym, session, platform_admin):
    owner_id = gym[Role.owner].user.id
    refused = client.delete(
        f"/organizations/{gym.id}/members/{owner_id}", headers=gym[Role.admin].headers
    )
    assert (refused.status_code, refused.json["code"]) == (403, "owner_protected")
    removed = client.delete(
        f"/admin/organizations/{gym.id}/members/{owner_id}", headers=platform_admin.headers
    )
    assert removed.json["status"] == "cancelled"
    assert count(session, AuditLog, AuditLog.action == "membership.removed") == 1


def test_a_link_at_sign_in_takes_the_logins_plan_payment_and_booking_along(
    client, gym, session, idp, platform_admin
):
    """The person joined the gym signed in (their login's membership) and bought a plan before
    the gym's desk profile was linked to them: the link ended the login's membership by
    deleting it, and its plan (a money record) and bookings went with it. They follow the
    person to the membership that goes on; the payment names the person's row."""
    profile_id = uuid.UUID(desk(client, gym, "pat@example.test").json["userId"])
    pat = signed_in(idp, session, identity_id="user_pat", email="pat@example.test", verified=False)
    theirs = factories.membership(
        session, user=pat.user, organization=session.get(Organization, gym.id)
    )
    subscription = bf.make_subscription(session, gym, membership=theirs)
    paid = bf.make_transaction(
        session, gym, subscription_id=subscription.id, user_id=pat.user.id, amount_in_cents=9900
    )
    session.commit()
    client.post("/admin/users/user_pat/mark-email-verified", headers=platform_admin.headers)

    me = client.get("/users/me", headers=pat.headers)

    assert (me.status_code, me.json["user"]["id"]) == (200, str(profile_id))
    session.expire_all()
    kept = session.get(Subscription, subscription.id)
    assert kept is not None
    goes_on = session.get(Membership, kept.membership_id)
    assert (goes_on.user_id, goes_on.status, kept.user_id) == (
        profile_id,
        MembershipStatus.active,
        profile_id,
    )
    assert session.get(PaymentTransaction, paid.id).user_id == profile_id
    mine = client.get(f"/organizations/{gym.id}/me/subscriptions", headers=pat.headers).json
    assert [row["id"] for row in mine["data"]] == [str(subscription.id)]


def test_accepting_a_link_request_keeps_the_debt_of_a_membership_the_gym_ended(
    client, gym, session, settings
):
    """A member removed while owing is registered again at the desk; accepting the link
    request folded the gym's new profile into the login and deleted the login's ended
    membership, and with it the plan holding the debt. The plan follows to the membership
    that goes on, debt and all."""
    member = gym[Role.member]
    subscription = bf.make_subscription(
        session, gym, membership=member.membership, in_debt_since=NOW - timedelta(days=3)
    )
    session.commit()
    removed = client.delete(
        f"/organizations/{gym.id}/members/{member.user.id}", headers=gym[Role.owner].headers
    )
    assert removed.status_code == 200
    assert desk(client, gym, member.user.email).status_code == 201
    invitation = session.scalar(select(Invitation).where(Invitation.profile_user_id.is_not(None)))
    token = parse_qs(urlparse(_links(settings, invitation, NOW)["accept"]).query)["token"][0]

    accepted = client.post("/invitations/accept", json={"token": token}, headers=member.headers)

    assert accepted.status_code == 200, accepted.json
    session.expire_all()
    kept = session.get(Subscription, subscription.id)
    assert (kept.user_id, kept.debt_amount_in_cents) == (member.user.id, kept.price_in_cents)
    assert session.get(Membership, kept.membership_id).user_id == member.user.id
