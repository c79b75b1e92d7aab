"""Creating, onboarding and deleting a gym (spec A 2.7, 7): creation needs a claimable owner grant
sent by a platform admin to the caller's proven address; only the owner deletes the gym or
completes onboarding."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.gyms import create_gym
from gymctl.errors import DomainError
from gymctl.models import (
    AuditLog,
    Invitation,
    InvitationStatus,
    JoinLink,
    Membership,
    MembershipStatus,
    Organization,
    Role,
)
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in, snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

FUTURE_OWNER = "future.owner@example.test"


@pytest.fixture
def owner_grant(client, session, platform_admin) -> Invitation:
    response = client.post(
        "/admin/owner-grants", json={"email": FUTURE_OWNER}, headers=platform_admin.headers
    )
    assert response.status_code == 201, response.json
    session.expire_all()
    return session.get(Invitation, uuid.UUID(response.json["id"]))


@pytest.fixture
def future_owner(session, idp):
    person = signed_in(idp, session, identity_id="user_future", email=FUTURE_OWNER)
    session.commit()
    return person


def create(client, person, *, name="Granite Gym", slug="granite-gym"):
    return client.post("/organizations", json={"name": name, "slug": slug}, headers=person.headers)


# --- owner grants ----------------------------------------------------------------------------


def test_creating_a_gym_without_an_owner_grant_is_403_and_creates_nothing(
    client, session, outsider
):
    before = snapshot(session)

    response = create(client, outsider)

    assert (response.status_code, response.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


def test_a_platform_admin_sends_an_owner_grant_by_email(
    client, session, mailbox, platform_admin, idp
):
    response = client.post(
        "/admin/owner-grants", json={"email": FUTURE_OWNER}, headers=platform_admin.headers
    )

    assert response.status_code == 201
    session.expire_all()
    grant = session.get(Invitation, uuid.UUID(response.json["id"]))
    assert (grant.organization_id, grant.role, grant.status) == (
        None,
        Role.owner,
        InvitationStatus.pending,
    )
    assert grant.invited_by_user_id == platform_admin.user.id
    [message] = read_mailbox(mailbox)
    assert message["To"] == FUTURE_OWNER
    assert "__identity_ticket=" in message.get_content()
    assert [i["email_address"] for i in idp.invitations] == [FUTURE_OWNER]


def test_the_addressee_with_a_proven_email_creates_the_gym_and_becomes_its_owner(
    client, session, owner_grant, future_owner
):
    response = create(client, future_owner, name="Granite Gym", slug="granite-gym")

    assert response.status_code == 201
    org_id = uuid.UUID(response.json["id"])
    assert response.json == {"id": str(org_id), "name": "Granite Gym", "slug": "granite-gym"}
    session.expire_all()
    membership = session.scalar(select(Membership).where(Membership.organization_id == org_id))
    assert (membership.user_id, membership.role, membership.status) == (
        future_owner.user.id,
        Role.owner,
        MembershipStatus.active,
    )
    grant = session.get(Invitation, owner_grant.id)
    assert grant.status is InvitationStatus.accepted
    assert (grant.accepted_user_id, grant.organization_id, grant.accepted_at) == (
        future_owner.user.id,
        org_id,
        NOW,
    )
    me = client.get("/users/me", headers=future_owner.headers).json
    assert [(m["organizationId"], m["role"]) for m in me["memberships"]] == [(str(org_id), "owner")]


def test_an_owner_grant_is_claimed_once(client, session, owner_grant, future_owner):
    assert create(client, future_owner).status_code == 201
    before = snapshot(session)

    again = create(client, future_owner, name="Second Gym", slug="second-gym")

    assert (again.status_code, again.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


def test_a_creation_sent_twice_answers_the_gym_it_created_and_creates_nothing_more(
    client, session, owner_grant, future_owner
):
    """A double-submitted form, or a client's retry after a lost answer: the grant is used, so
    the second one was 403 OWNER_INVITATION_REQUIRED and the owner was told they may not
    create the gym they had just created. The same name and address by the person whose grant
    created it is that creation again: 200, the same gym."""
    first = create(client, future_owner)
    assert first.status_code == 201
    before = snapshot(session)

    again = create(client, future_owner)

    assert (again.status_code, again.json) == (200, first.json)
    assert snapshot(session) == before


def test_another_gym_or_another_person_is_not_a_repeat_of_a_creation(
    client, session, owner_grant, future_owner, outsider
):
    assert create(client, future_owner).status_code == 201
    before = snapshot(session)

    other_name = create(client, future_owner, name="Another Name")
    by_another = create(client, outsider)

    assert (other_name.status_code, other_name.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert (by_another.status_code, by_another.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


def test_an_unproven_email_cannot_claim_an_owner_grant(client, session, idp, owner_grant):
    unproven = signed_in(
        idp, session, identity_id="user_unproven", email=FUTURE_OWNER, verified=False
    )
    session.commit()
    before = snapshot(session)

    response = create(client, unproven)

    assert (response.status_code, response.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


def test_an_owner_grant_is_claimable_only_by_its_addressee(client, session, owner_grant, outsider):
    before = snapshot(session)

    response = create(client, outsider)

    assert (response.status_code, response.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


@pytest.mark.parametrize("state", ["expired", "revoked"])
def test_an_expired_or_revoked_owner_grant_is_not_claimable(
    client, session, owner_grant, future_owner, state
):
    if state == "expired":
        owner_grant.expires_at = NOW - timedelta(seconds=1)
    else:
        owner_grant.status = InvitationStatus.revoked
    session.commit()
    before = snapshot(session)

    response = create(client, future_owner)

    assert (response.status_code, response.json["code"]) == (403, "OWNER_INVITATION_REQUIRED")
    assert snapshot(session) == before


def test_an_owner_grant_matches_the_address_case_insensitively(
    client, session, idp, platform_admin
):
    client.post(
        "/admin/owner-grants",
        json={"email": "Mixed.Case@Example.TEST"},
        headers=platform_admin.headers,
    )
    person = signed_in(idp, session, identity_id="user_mixed", email="mixed.case@example.test")
    session.commit()

    assert create(client, person).status_code == 201


# --- slugs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "slug", ["Granite", "granite gym", "-granite", "granite-", "granite_gym", "grånite", "a--"]
)
def test_a_slug_outside_lowercase_letters_digits_and_inner_hyphens_is_422_slug_invalid(
    client, session, owner_grant, future_owner, slug
):
    before = snapshot(session)

    response = create(client, future_owner, slug=slug)

    assert (response.status_code, response.json["code"]) == (422, "slug_invalid")
    assert snapshot(session) == before  # the grant stays claimable


def test_a_slug_ending_in_a_newline_is_slug_invalid_where_no_body_strips_it(
    session, owner_grant, future_owner
):
    """The HTTP body strips whitespace; the domain, which other doors reach, did not refuse
    "granite\n": the pattern's `$` matched before a final newline, and the slug was stored
    with it."""
    before = snapshot(session)

    with pytest.raises(DomainError) as refused:
        create_gym(session, future_owner.user, name="Granite", slug="granite\n", now=NOW)

    assert refused.value.code == "slug_invalid"
    session.rollback()
    assert snapshot(session) == before


def test_a_slug_over_64_characters_is_refused_by_the_body(
    client, session, owner_grant, future_owner
):
    before = snapshot(session)

    response = create(client, future_owner, slug="g" * 65)

    assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert snapshot(session) == before


@pytest.mark.parametrize("slug", ["g", "9", "a-b", "gym-42", "g" * 64])
def test_a_valid_slug_is_accepted(client, owner_grant, future_owner, slug):
    assert create(client, future_owner, slug=slug).status_code == 201


def test_a_taken_slug_is_409_and_the_grant_stays_claimable(
    client, session, gym, owner_grant, future_owner
):
    before = snapshot(session)

    response = create(client, future_owner, slug=gym.organization.slug)

    assert (response.status_code, response.json["code"]) == (409, "slug_taken")
    assert snapshot(session) == before
    assert create(client, future_owner, slug="granite-gym").status_code == 201


# --- deleting and onboarding -----------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.admin, Role.coach, Role.member])
def test_only_the_owner_deletes_the_gym(client, session, gym, role):
    before = snapshot(session)

    response = client.delete(f"/organizations/{gym.id}", headers=gym[role].headers)

    assert (response.status_code, response.json["code"]) == (403, "owner_required")
    assert snapshot(session) == before


def test_an_outsider_deleting_a_gym_learns_nothing_about_it(client, session, gym, outsider):
    response = client.delete(f"/organizations/{gym.id}", headers=outsider.headers)
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")


def test_the_owner_deletes_the_gym_and_it_disappears_from_users_me(client, session, gym):
    link = JoinLink(organization_id=gym.id, token="iron-temple-link")
    session.add(link)
    session.commit()
    for role in Role:
        me = client.get("/users/me", headers=gym[role].headers).json
        assert [m["organizationId"] for m in me["memberships"]] == [str(gym.id)]

    response = client.delete(f"/organizations/{gym.id}", headers=gym[Role.owner].headers)

    assert (response.status_code, response.json) == (200, {"deleted": True})
    session.expire_all()
    assert session.get(Organization, gym.id).deleted_at == NOW
    assert session.scalars(select(AuditLog).where(AuditLog.action == "organization.deleted")).one()
    for role in Role:
        me = client.get("/users/me", headers=gym[role].headers).json
        assert me["memberships"] == []
        assert me["activeOrganization"] is None
    assert client.get(f"/join/{link.token}").status_code == 404
    roster = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers)
    assert (roster.status_code, roster.json["code"]) == (404, "organization_not_found")


def test_the_owner_completes_onboarding_once(client, session, clock, idp, gym):
    owner = gym[Role.owner]
    first = client.post(f"/organizations/{gym.id}/onboarding/complete", headers=owner.headers)
    clock.set(NOW + timedelta(seconds=10))
    owner.headers = {"Authorization": f"Bearer {idp.token('user_owner', now=clock.now())}"}

    second = client.post(f"/organizations/{gym.id}/onboarding/complete", headers=owner.headers)

    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json == second.json == {"onboardingCompletedAt": NOW.isoformat()}
    session.expire_all()
    assert session.get(Organization, gym.id).onboarding_completed_at == NOW
    audits = session.scalars(
        select(AuditLog).where(AuditLog.action == "organization.onboarding_completed")
    ).all()
    assert len(audits) == 1


@pytest.mark.parametrize("role", [Role.admin, Role.coach, Role.member])
def test_only_the_owner_completes_onboarding(client, session, gym, role):
    before = snapshot(session)

    response = client.post(
        f"/organizations/{gym.id}/onboarding/complete", headers=gym[role].headers
    )

    assert (response.status_code, response.json["code"]) == (403, "owner_required")
    assert snapshot(session) == before
