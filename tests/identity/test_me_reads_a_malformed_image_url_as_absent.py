"""GET /users/me before user.created arrived makes the row from the provider's user object
(`users.first_request`). An image_url there of the wrong type or size reads as absent: never a
500, never a non-string stored (the webhook refuses the same object with a 400)."""

from __future__ import annotations

import httpx
import pytest

from gymctl.models import User
from gymctl.providers.identity_admin import HttpIdentityAdmin
from gymctl.providers.mail import MailboxMailer
from tests.api.test_users_me import bearer
from webhooks.app import create_app

pytestmark = pytest.mark.embedded  # both engines


def _provider_client(settings, session_factory, clock, mailbox, image_url):
    address = {"id": "idn_1", "email_address": "pic@example.test",
               "verification": {"status": "verified"}}  # fmt: skip
    record = {"id": "user_pic", "email_addresses": [address],
              "primary_email_address_id": "idn_1", "image_url": image_url}  # fmt: skip
    transport = httpx.MockTransport(lambda _request: httpx.Response(200, json=record))
    admin = HttpIdentityAdmin("https://idp.example.test", "sk_test_x",
                              client=httpx.Client(transport=transport), clock=clock)  # fmt: skip
    mailer = MailboxMailer(mailbox, settings.mail_from, clock=clock)
    app = create_app(settings, session_factory=session_factory, clock=clock, mailer=mailer,
                     identity_admin=admin)  # fmt: skip
    return app.test_client()


@pytest.mark.parametrize(
    "image_url",
    [{"url": "https://img.example.test/a.png"}, ["https://img.example.test/a.png"], 7, True,
     "https://img.example.test/" + "a" * 2048, "https://img.example.test/\x00.png"],
    ids=["object", "list", "integer", "boolean", "overlong", "nul"],
)  # fmt: skip
def test_a_malformed_image_url_from_the_provider_reads_as_absent(
    engine, session, session_factory, settings, clock, mailbox, idp, image_url
):
    client = _provider_client(settings, session_factory, clock, mailbox, image_url)

    response = client.get("/users/me", headers=bearer(idp, sub="user_pic"))

    assert response.status_code == 200, response.json
    assert response.json["user"]["imageUrl"] is None
    assert response.json["user"]["email"] == "pic@example.test"
    session.expire_all()
    (user,) = session.query(User).filter_by(identity_id="user_pic").all()
    assert user.image_url is None


def test_a_well_formed_image_url_from_the_provider_is_kept(
    engine, session, session_factory, settings, clock, mailbox, idp
):
    url = "https://img.example.test/a.png"
    client = _provider_client(settings, session_factory, clock, mailbox, url)

    response = client.get("/users/me", headers=bearer(idp, sub="user_pic"))

    assert (response.status_code, response.json["user"]["imageUrl"]) == (200, url)
