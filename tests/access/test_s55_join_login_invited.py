# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
"""s55 (a hunter's test): a join-link login invited by staff is proven by the invitation.

Spec A 5.3: "A login created from a join link handed to the browser has an unproven email.
Consequences: ... a staff-sent invitation to such an account is held (membership.invitation_held;
GET /users/me returns invitationHeld true ...). ... An operator confirms ownership out of band,
then uses Mark email verified". Decisions (Issue 23): such a login "is unproven whatever the
provider's verified flag says ... only Mark email verified does".
"""

from __future__ import annotations

from sqlalchemy import select

from gymctl.models import Membership, MembershipStatus, Role, User
from tests.access.conftest import gym, outsider, platform_admin  # noqa: F401 (fixtures)
from tests.api.test_identity_webhook import deliver
from tests.conftest import NOW


def _user_created_through_join_ticket(client, identity_id, email):
    """The provider's user.created of a sign-up made with a join ticket; the provider's own flag
    says verified (the ticket let the browser skip the proof)."""
    verified = {"id": "e1", "email_address": email, "verification": {"status": "verified"}}
    return deliver(
        client,
        {
            "type": "user.created",
            "data": {
                "id": identity_id,
                "primary_email_address_id": "e1",
                "email_addresses": [verified],
                "unsafe_metadata": {"joinTicket": "not-one-of-ours"},
            },
        },
    )


def test_a_staff_invitation_to_a_join_link_login_is_held_and_proves_nothing(
    client, gym, session, idp, mailbox
):
    assert (
        _user_created_through_join_ticket(client, "user_joiner", "joiner@example.test").status_code
        == 200
    )
    idp.add_account("user_joiner", "joiner@example.test", verified=True)
    login = session.scalar(select(User).where(User.identity_id == "user_joiner"))
    assert login.signup_origin == "join_link"
    assert login.email_verified_at is None

    response = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "joiner@example.test", "role": "coach"},
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 201, response.json

    session.expire_all()
    login = session.get(User, login.id)
    membership = session.scalar(select(Membership).where(Membership.user_id == login.id))
    assert membership.status is MembershipStatus.pending_invitation
    # Held, and the login still unproven: only an operator's Mark email verified proves it.
    assert membership.invitation_held is True
    assert login.email_verified_at is None
    headers = {"Authorization": f"Bearer {idp.token('user_joiner', now=NOW)}"}
    assert client.get("/users/me", headers=headers).json["invitationHeld"] is True


def test_an_invitation_to_a_join_link_login_never_links_it_to_the_gyms_earlier_profile(
    client, gym, session, idp, mailbox
):
    """Spec A 5.3: "a gym-created profile under that address is not linked and GET /users/me
    answers 403 EMAIL_OWNERSHIP_REQUIRED" until an operator marks the email verified. The desk's
    profile (with what the gym holds on it) must not pass to a join-link login because some
    staff invited that address."""
    desk = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": "dana@example.test", "name": "Dana"},
        headers=gym[Role.owner].headers,
    )
    assert desk.status_code == 201, desk.json
    profile_id = desk.json["userId"]
    assert (
        _user_created_through_join_ticket(client, "user_taker", "dana@example.test").status_code
        == 200
    )
    idp.add_account("user_taker", "dana@example.test", verified=True)
    headers = {"Authorization": f"Bearer {idp.token('user_taker', now=NOW)}"}
    before = client.get("/users/me", headers=headers)
    assert (before.status_code, before.json["code"]) == (403, "EMAIL_OWNERSHIP_REQUIRED")

    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "dana@example.test", "role": "member"},
        headers=gym[Role.coach].headers,
    )
    assert invited.status_code in (201, 409), invited.json

    after = client.get("/users/me", headers=headers)
    assert (after.status_code, after.json.get("code")) == (403, "EMAIL_OWNERSHIP_REQUIRED")
    session.expire_all()
    profile = session.get(User, profile_id)
    assert profile.identity_id is None
    assert profile.deleted_at is None
