"""Concurrent duplicates on real PostgreSQL commits: the same delivery twice at once, and two
first requests of a new login at once, each end with one row."""

from __future__ import annotations

import json
import threading

from sqlalchemy import func, select

from gymctl.db import get_engine, session_factory
from gymctl.identity.webhook_signature import sign
from gymctl.models import IdentityWebhookDelivery, OutboxEvent, User
from tests.conftest import NOW, WEBHOOK_SECRET
from webhooks.app import create_app


def _concurrently(n, call):
    barrier = threading.Barrier(n)
    results = [None] * n

    def run(i):
        barrier.wait()
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def _count(factory, model, *where):
    with factory() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def test_the_same_delivery_at_once_applies_once(committed_pg, settings, clock):
    factory = session_factory(get_engine(committed_pg))
    app = create_app(settings, session_factory=factory, clock=clock)
    body = json.dumps(
        {
            "type": "user.created",
            "data": {"id": "user_race", "email_addresses": [], "image_url": None},
        }
    ).encode()
    timestamp = int(NOW.timestamp())
    headers = {
        "svix-id": "msg_race",
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, "msg_race", timestamp, body),
    }

    def deliver():
        response = app.test_client().post("/webhooks/identity", data=body, headers=headers)
        return response.status_code, response.json["outcome"]

    results = _concurrently(4, deliver)
    assert all(status == 200 for status, _ in results)
    assert sorted(outcome for _, outcome in results) == ["created"] + ["duplicate"] * 3
    assert _count(factory, User) == 1
    assert _count(factory, IdentityWebhookDelivery) == 1
    assert _count(factory, OutboxEvent, OutboxEvent.name == "user_signed_up") == 1


def test_first_requests_of_a_new_login_at_once_create_one_row(committed_pg, settings, clock, idp):
    factory = session_factory(get_engine(committed_pg))
    app = create_app(settings, session_factory=factory, clock=clock)
    token = idp.token("user_fresh", now=NOW)

    def me():
        response = app.test_client().get("/users/me", headers={"Authorization": f"Bearer {token}"})
        return response.status_code, response.json["user"]["id"]

    results = _concurrently(4, me)
    assert {status for status, _ in results} == {200}
    assert len({user_id for _, user_id in results}) == 1
    assert _count(factory, User) == 1
