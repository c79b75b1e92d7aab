"""Secrets and personal data never reach logs or events: tokens, webhook secrets, emails."""

from __future__ import annotations

import json
import logging

from sqlalchemy import select

from gymctl.identity.webhook_signature import sign
from gymctl.models import OutboxEvent
from tests.conftest import NOW, WEBHOOK_SECRET


def test_tokens_secrets_and_emails_stay_out_of_logs_and_events(client, session, idp, caplog):
    token = idp.token("user_private", now=NOW)
    email = "private.person@example.test"
    body = json.dumps(
        {
            "type": "user.created",
            "data": {
                "id": "user_private",
                "primary_email_address_id": "e1",
                "email_addresses": [{"id": "e1", "email_address": email}],
            },
        }
    ).encode()
    timestamp = int(NOW.timestamp())
    signature = sign(WEBHOOK_SECRET, "msg_private", timestamp, body)
    with caplog.at_level(logging.DEBUG):
        client.post(
            "/webhooks/identity",
            data=body,
            headers={
                "svix-id": "msg_private",
                "svix-timestamp": str(timestamp),
                "svix-signature": signature,
            },
        )
        client.post(
            "/webhooks/identity",
            data=body,
            headers={
                "svix-id": "msg_bad",
                "svix-timestamp": str(timestamp),
                "svix-signature": "v1,AAAA",
            },
        )
        client.get("/users/me", headers={"Authorization": f"Bearer {token}"})
        client.get("/users/me", headers={"Authorization": f"Bearer {token}x"})

    logged = "\n".join(
        caplog.handler.format(record) + json.dumps(vars(record), default=str)
        for record in caplog.records
    )
    events = json.dumps([e.payload for e in session.scalars(select(OutboxEvent))])
    for secret in (token, token.split(".")[2], WEBHOOK_SECRET, signature, email):
        assert secret not in logged
        assert secret not in events
    assert sum("/users/me" in r.getMessage() for r in caplog.records) == 2  # requests logged
