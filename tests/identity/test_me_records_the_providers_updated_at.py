"""GET /users/me before user.created arrived makes the row from the provider's user object
(`users.first_request`). It must record that object's `updated_at` as the webhooks do
(users.identity_synced_at, s48): unrecorded, a stale user.updated or user.created retried later
wrote the older address over the newer one. /users/me itself never writes over a row."""

from __future__ import annotations

import httpx
import pytest

from gymctl.access.identity_events import apply_identity_event
from gymctl.identity.auth import Auth
from gymctl.identity.me import current_user
from gymctl.providers.identity_admin import HttpIdentityAdmin
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # both engines


def user_object(email: str, updated_at: int) -> dict:
    address = {"id": "idn_1", "email_address": email, "verification": {"status": "verified"}}
    return {
        "id": "user_late",
        "email_addresses": [address],
        "primary_email_address_id": "idn_1",
        "image_url": None,
        "updated_at": updated_at,
    }


@pytest.mark.parametrize("event_type", ["user.updated", "user.created"])
def test_a_stale_event_after_users_me_keeps_the_newer_address(
    engine, session, settings, clock, event_type
):
    newer = user_object("new@example.test", updated_at=2_000)
    client = httpx.Client(transport=httpx.MockTransport(lambda _r: httpx.Response(200, json=newer)))
    admin = HttpIdentityAdmin("https://idp.example.test", "sk_test_x", client=client, clock=clock)
    auth = Auth(user_id="user_late", session_id="sess_1", user=None)

    me = current_user(session, auth, now=NOW, identity_admin=admin, settings=settings)
    session.commit()
    assert me["user"]["email"] == "new@example.test"

    stale = {"type": event_type, "data": user_object("old@example.test", updated_at=1_000)}
    apply_identity_event(session, "msg_stale", stale, now=NOW, settings=settings)
    session.commit()

    auth = Auth(user_id="user_late", session_id="sess_1", user=None)
    again = current_user(session, auth, now=NOW, identity_admin=admin, settings=settings)
    assert again["user"]["email"] == "new@example.test"
