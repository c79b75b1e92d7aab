"""The one rate limiter (gymctl.ratelimit) and what anonymous callers can trigger (issue 20):
counted in the caller's session, committed by the door, Retry-After on every 429, and
anonymous amplification bounded per organization, link and checkout in the database."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import delete, func, select
from sqlalchemy.orm import sessionmaker

from gymctl import ratelimit
from gymctl.db import get_engine
from gymctl.models import JoinSubmission, OutboxEvent, RateWindow, Role, Task
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixtures)
from tests.access.test_join import make_link
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_KEY
from tests.billing.test_checkout_webhooks import (
    GET_PAGE,
    org,  # noqa: F401 (fixture)
)
from tests.conftest import NOW

NATIVE = "/organizations/{org}/brand-assets/{asset}/native/logo"


def count(session, model, *where) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model).where(*where))


def test_the_limiter_counts_inside_a_session_that_holds_the_write_lock(sqlite_url):
    """On the embedded default the caller's transaction holds SQLite's write lock; a limiter
    that opened its own session waited 30 s on it and failed (every image upload answered 500
    under `gymctl serve`). It joins the caller's session instead."""
    factory = sessionmaker(bind=get_engine(sqlite_url))
    key = f"test:{uuid.uuid4()}"
    with factory() as session:
        session.add(RateWindow(key=f"{key}:lock", window_start=NOW, count=0))
        session.flush()  # this transaction now holds the write lock
        first = ratelimit.hit(session, key, limit=1, window=timedelta(minutes=1), now=NOW)
        with pytest.raises(Exception, match="too many attempts") as refused:
            ratelimit.hit(session, key, limit=1, window=timedelta(minutes=1), now=NOW)
        session.execute(delete(RateWindow).where(RateWindow.key.startswith(key)))
        session.commit()
    assert first.count == 1
    assert (refused.value.status, refused.value.details["retryAfter"]) == (429, 60)


def test_a_throttled_route_spends_budget_on_refused_calls_and_answers_retry_after(
    client,
    gym,  # noqa: F811
    clock,
):
    """The door commits the count before the work: twenty calls that end in 404 still spent the
    route's budget (spec A 8: 20 per 60 000 ms window per route)."""
    path = NATIVE.format(org=gym.id, asset=uuid.uuid4())
    headers = gym[Role.owner].headers
    clock.set(NOW + timedelta(seconds=15))
    for _ in range(20):
        assert client.post(path, headers=headers).status_code == 404
    limited = client.post(path, headers=headers)
    assert (limited.status_code, limited.json["code"]) == (429, "rate_limited")
    assert limited.headers["Retry-After"] == "45" == str(limited.json["retryAfter"])
    clock.set(NOW + timedelta(seconds=61))
    assert client.post(path, headers=headers).status_code == 404


def test_anonymous_failed_checkouts_file_at_most_five_tasks_per_link(
    client,
    session,
    gym,  # noqa: F811
):
    """Thirty anonymous posts with thirty addresses filed thirty urgent staff tasks."""
    link = make_link(session, gym.organization)
    session.commit()
    answers = [
        client.post(
            f"/join/{link.token}/checkout-failed", json={"email": f"p{n}@example.test"}
        ).status_code
        for n in range(30)
    ]
    assert answers == [202] * 5 + [429] * 25
    assert count(session, Task, Task.organization_id == gym.id) == 5
    assert count(session, JoinSubmission, JoinSubmission.join_link_id == link.id) == 5
    refused = client.post(f"/join/{link.token}/checkout-failed", json={})
    assert int(refused.headers["Retry-After"]) > 0


def test_anonymous_failed_checkouts_are_bounded_per_organization_across_links(
    client,
    session,
    gym,  # noqa: F811
):
    links = [make_link(session, gym.organization) for _ in range(6)]
    session.commit()
    for link in links:
        for n in range(5):
            client.post(f"/join/{link.token}/checkout-failed", json={"email": f"q{n}@x.test"})
    assert count(session, Task, Task.organization_id == gym.id) == 20


@pytest.fixture
def app(settings, session_factory, clock, mailbox, card_server):  # noqa: F811
    from gymctl.providers.mail import MailboxMailer
    from webhooks.app import create_app

    settings = settings.model_copy(update={"billing_encryption_key": SecretStr(TEST_KEY)})
    return create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=MailboxMailer(mailbox, settings.mail_from, clock=clock),
        card_provider=card_server.provider(),
    )


def test_forged_card_webhooks_cannot_make_a_read_back_and_an_event_row_each(
    client,
    session,
    card_server,  # noqa: F811
    org,  # noqa: F811
):
    """100 forged webhooks with well-formed page ids made 100 provider read-backs and 100
    outbox rows; pages that are not ours share one budget per organization."""
    events_before = count(session, OutboxEvent)
    answers = [
        client.post(
            f"/webhooks/card-provider/{org.id}",
            json={"LowProfileId": f"4c5b1d3e-0000-4000-8000-{n:012d}"},
        )
        for n in range(100)
    ]
    statuses = [answer.status_code for answer in answers]
    assert statuses == [400] * 10 + [429] * 90
    assert int(answers[-1].headers["Retry-After"]) > 0
    assert answers[-1].json["code"] == "rate_limited"
    assert card_server.requests(GET_PAGE) == 10
    assert count(session, OutboxEvent) - events_before == 10


def test_rejected_payment_webhooks_share_one_budget_per_organization(
    client,
    session,
    gym,  # noqa: F811
):
    """s38: every rejected delivery of another provider (no such provider here, unsigned, a
    bad signature) filed a payment.webhook_rejected row, with no limit. Now they share the
    card provider's budget, per organization: past 10 a minute the answer is 429 and only the
    count is kept. A verified delivery is not counted: only the secret's holder can send it."""
    reply = client.put(
        f"/organizations/{gym.id}/payments/provider",
        json={
            "provider": "stripe",
            "webhookSecret": "whsec-test",
            "webhookSignatureEnforcement": True,
        },
        headers=gym[Role.owner].headers,
    )
    assert reply.status_code == 200, reply.json
    events_before = count(session, OutboxEvent)
    url = f"/webhooks/payments/stripe/{gym.id}"
    attempts = [
        client.post(f"/webhooks/payments/paypal/{gym.id}", json={}),  # not its provider
        client.post(url, json={}),  # unsigned
        *(client.post(url, json={}, headers={"x-webhook-signature": "bad"}) for _ in range(8)),
    ]
    assert [a.status_code for a in attempts] == [400] * 10
    assert count(session, OutboxEvent) - events_before == 10
    state = snapshot(session)
    windows = session.execute(select(RateWindow.key, RateWindow.count)).all()
    assert windows == [(f"payment-webhook:{gym.id}", 10)]
    for path in (f"/webhooks/payments/paypal/{gym.id}", url):
        refused = client.post(path, json={}, headers={"x-webhook-signature": "bad"})
        assert refused.status_code == 429
        assert refused.json["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) > 0
    assert snapshot(session) == state  # nothing but the window
    session.expire_all()
    assert session.scalar(select(RateWindow.count)) == 12
    body = json.dumps({"type": "payment.succeeded", "id": "evt_1"}).encode()
    signed = hmac.new(b"whsec-test", body, hashlib.sha256).hexdigest()
    good = client.post(
        url, data=body, headers={"x-webhook-signature": signed, "content-type": "application/json"}
    )
    assert good.status_code == 200
    assert good.json["outcome"] == "processed"
