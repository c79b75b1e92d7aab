"""POST /webhooks/identity (spec A 6.1): signed provider events mirrored into users."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.identity.webhook_signature import sign
from gymctl.models import IdentityWebhookDelivery, OutboxEvent, User
from tests import factories
from tests.conftest import NOW, WEBHOOK_SECRET

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

_delivery = iter(range(1, 10_000))


def provider_user(
    identity_id="user_2abc",
    email="alice@example.test",
    *,
    verified=True,
    image_url="https://img.example.test/alice.png",
):
    return {
        "id": identity_id,
        "email_addresses": [
            {
                "id": "idn_other",
                "email_address": "old@example.test",
                "verification": {"status": "verified"},
            },
            {
                "id": "idn_primary",
                "email_address": email,
                "verification": {"status": "verified" if verified else "unverified"},
            },
        ],
        "primary_email_address_id": "idn_primary",
        "image_url": image_url,
        "object": "user",
    }


def deliver(
    client, event, *, delivery_id=None, at=NOW, secret=WEBHOOK_SECRET, raw=None, headers=None
):
    body = raw if raw is not None else json.dumps(event).encode()
    delivery_id = delivery_id or f"msg_{next(_delivery)}"
    timestamp = int(at.timestamp())
    sent = (
        headers
        if headers is not None
        else {
            "svix-id": delivery_id,
            "svix-timestamp": str(timestamp),
            "svix-signature": sign(secret, delivery_id, timestamp, body),
        }
    )
    return client.post(
        "/webhooks/identity", data=body, headers=sent, content_type="application/json"
    )


def count(session, model, *where):
    return session.scalar(select(func.count()).select_from(model).where(*where))


def test_user_created_creates_the_row_and_emits_user_signed_up(client, session):
    response = deliver(client, {"type": "user.created", "data": provider_user()})
    assert response.status_code == 200, response.json
    assert response.json["outcome"] == "created"
    user = session.scalar(select(User).where(User.identity_id == "user_2abc"))
    assert (user.email, user.image_url) == (
        "alice@example.test",
        "https://img.example.test/alice.png",
    )
    event = session.scalar(select(OutboxEvent).where(OutboxEvent.name == "user_signed_up"))
    assert event.kind == "analytics"
    assert event.aggregate_id == str(user.id)


def test_replayed_delivery_is_acknowledged_and_not_applied_twice(client, session):
    event = {"type": "user.created", "data": provider_user()}
    first = deliver(client, event, delivery_id="msg_replay")
    again = deliver(client, event, delivery_id="msg_replay")
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json["outcome"] == "duplicate"
    assert count(session, User) == 1
    assert count(session, OutboxEvent, OutboxEvent.name == "user_signed_up") == 1


def test_user_created_with_a_verified_email_links_the_gym_created_row(client, session):
    gym_row = factories.user(session, identity_id=None, email="Alice@Example.test")
    session.commit()
    response = deliver(client, {"type": "user.created", "data": provider_user()})
    assert response.json["outcome"] == "linked"
    session.refresh(gym_row)
    assert gym_row.identity_id == "user_2abc"
    assert count(session, User) == 1


def test_unproven_email_never_links_a_gym_created_profile(client, session):
    """Spec A 5.3: a login with an unproven email is not linked to the gym's row."""
    gym_row = factories.user(session, identity_id=None, email="alice@example.test")
    session.commit()
    response = deliver(client, {"type": "user.created", "data": provider_user(verified=False)})
    assert response.json["outcome"] == "created"
    session.refresh(gym_row)
    assert gym_row.identity_id is None
    assert count(session, User) == 2


def test_user_updated_mirrors_email_and_image(client, session):
    factories.user(session, identity_id="user_2abc", email="old@example.test")
    session.commit()
    data = provider_user(email="new@example.test", image_url="https://img.example.test/new.png")
    response = deliver(client, {"type": "user.updated", "data": data})
    assert response.json["outcome"] == "mirrored"
    user = session.scalar(select(User).where(User.identity_id == "user_2abc"))
    assert (user.email, user.image_url) == ("new@example.test", "https://img.example.test/new.png")


def test_user_deleted_soft_deletes_without_calling_the_provider(client, session, idp):
    user = factories.user(session, identity_id="user_2abc")
    session.commit()
    response = deliver(
        client, {"type": "user.deleted", "data": {"id": "user_2abc", "deleted": True}}
    )
    assert response.json["outcome"] == "deleted"
    session.refresh(user)
    assert user.deleted_at == NOW
    assert idp.jwks_requests == 0


def test_unknown_event_type_is_acknowledged_and_ignored(client, session):
    response = deliver(client, {"type": "session.created", "data": {"id": "sess_1"}})
    assert (response.status_code, response.json["outcome"]) == (200, "ignored")


def _nothing_changed(session):
    assert count(session, User) == 0
    assert count(session, IdentityWebhookDelivery) == 0
    assert count(session, OutboxEvent) == 0


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "webhook_headers_missing"),
        (
            {
                "svix-id": "msg_1",
                "svix-timestamp": str(int(NOW.timestamp())),
                "svix-signature": "garbage",
            },
            "webhook_signature_invalid",
        ),
        (
            {"svix-id": "msg_1", "svix-timestamp": "yesterday", "svix-signature": "v1,AAAA"},
            "webhook_timestamp_invalid",
        ),
        (  # a byte outside ASCII in the signature: no secret needed, only a fresh timestamp
            {
                "svix-id": "msg_1",
                "svix-timestamp": str(int(NOW.timestamp())),
                "svix-signature": "v1,\u00e9",
            },
            "webhook_signature_invalid",
        ),
    ],
)
def test_bad_headers_are_400_with_a_code_and_change_nothing(client, session, headers, code):
    response = deliver(client, {"type": "user.created", "data": provider_user()}, headers=headers)
    assert (response.status_code, response.json["code"]) == (400, code)
    _nothing_changed(session)


def test_a_delivery_id_longer_than_its_column_is_refused_and_changes_nothing(client, session):
    event = {"type": "user.created", "data": provider_user()}
    response = deliver(client, event, delivery_id="msg_" + "x" * 296)
    assert (response.status_code, response.json["code"]) == (400, "webhook_headers_missing")
    _nothing_changed(session)
    fits = deliver(client, event, delivery_id="msg_" + "x" * 124)
    assert (fits.status_code, fits.json["outcome"]) == (200, "created")


def test_wrong_secret_is_refused(client, session):
    response = deliver(
        client, {"type": "user.created", "data": provider_user()}, secret="whsec_" + "B" * 32
    )
    assert (response.status_code, response.json["code"]) == (400, "webhook_signature_invalid")
    _nothing_changed(session)


@pytest.mark.parametrize("drift", [timedelta(minutes=6), -timedelta(minutes=6)])
def test_stale_or_future_delivery_is_refused(client, session, drift):
    response = deliver(client, {"type": "user.created", "data": provider_user()}, at=NOW + drift)
    assert (response.status_code, response.json["code"]) == (400, "webhook_timestamp_stale")
    _nothing_changed(session)


def test_tampered_body_is_refused(client, session):
    body = json.dumps({"type": "user.created", "data": provider_user()}).encode()
    timestamp = str(int(NOW.timestamp()))
    headers = {
        "svix-id": "msg_t",
        "svix-timestamp": timestamp,
        "svix-signature": sign(WEBHOOK_SECRET, "msg_t", int(timestamp), body),
    }
    tampered = body.replace(b"alice@", b"mallory@")
    response = deliver(client, None, raw=tampered, headers=headers)
    assert (response.status_code, response.json["code"]) == (400, "webhook_signature_invalid")
    _nothing_changed(session)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'{"type": "user.created"}',
        b'{"type": "user.created", "data": {}}',
        b'{"type": "user.\\u0000created", "data": {}}',
        b'{"type": "user.\\ud800", "data": {}}',  # a lone surrogate: PostgreSQL cannot store it
        b'{"type": "user.updated", "data": {"id": "user_\\udfff"}}',
    ],
)
def test_signed_but_invalid_payload_is_400_and_changes_nothing(client, session, raw):
    response = deliver(client, None, raw=raw)
    assert (response.status_code, response.json["code"]) == (400, "webhook_payload_invalid")
    _nothing_changed(session)


def test_unset_webhook_secret_answers_503(settings, session_factory, clock, session):
    from webhooks.app import create_app

    settings.identity_webhook_secret = None
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    response = deliver(client, {"type": "user.created", "data": provider_user()})
    assert (response.status_code, response.json["code"]) == (503, "webhook_not_configured")
