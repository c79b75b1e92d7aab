# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
"""s55 (a hunter's test): user.created moves a row to another address and keeps the proof.

Decisions (Access, email ownership): "a changed address is unproven again"; spec A 5.3: a
gym-created profile under an address is linked only to a login that proved that address.
`identity.users.user_created` rewrites an existing row's email (`user.email = sign_up.email or
user.email`) without resetting `email_verified_at`, as `user_updated` does.
"""

from __future__ import annotations

from sqlalchemy import select

from gymctl.models import Role, User
from tests.access.conftest import gym, outsider, platform_admin  # noqa: F401 (fixtures)
from tests.api.test_identity_webhook import deliver
from tests.conftest import NOW


def test_a_row_made_for_one_proven_address_does_not_prove_the_primary_user_created_brings(
    client, gym, session, idp, mailbox
):
    desk = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": "home@example.test", "name": "Home"},
        headers=gym[Role.owner].headers,
    )
    assert desk.status_code == 201, desk.json
    profile_id = desk.json["userId"]
    # The provider's account: primary home@ (never verified), a verified work@ address.
    account = idp.add_account("user_two", "home@example.test", verified=False)
    account["email_addresses"].append(
        {"id": "idn_work", "object": "email_address", "email_address": "work@example.test",
         "verification": {"status": "verified", "strategy": "email_code"}}
    )  # fmt: skip
    # Staff invite the work address: the account is found, its row made (proven: work@).
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "work@example.test", "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert invited.status_code == 201, invited.json
    # The provider's user.created arrives late, naming the primary (unverified) address.
    assert deliver(client, {"type": "user.created", "data": account}).status_code == 200
    login = session.scalar(select(User).where(User.identity_id == "user_two"))
    assert login.email == "home@example.test"
    assert login.email_verified_at is None  # home@ was never proven

    me = client.get(
        "/users/me", headers={"Authorization": f"Bearer {idp.token('user_two', now=NOW)}"}
    )
    assert (me.status_code, me.json.get("code")) == (403, "EMAIL_OWNERSHIP_REQUIRED")
    session.expire_all()
    assert session.get(User, profile_id).identity_id is None
