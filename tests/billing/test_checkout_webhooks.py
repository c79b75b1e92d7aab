"""Plans, a member's card-plan purchase, and the card provider's webhooks over HTTP (spec B 3,
4.3, 5, 6, 7) against the fake provider on loopback: a webhook is believed only after the page
is read back on the organization's terminal, and a redelivery never settles twice."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import event, func, select

from gymctl.billing import checkout
from gymctl.models import (
    BillingSettings,
    Checkout,
    Organization,
    OutboxEvent,
    PaymentMethod,
    PaymentTransaction,
    PaymentWebhookDelivery,
    Plan,
    RateWindow,
    Role,
    Subscription,
)
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus
from tests.access.conftest import gym, outsider, snapshot  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, DECLINE, INVALID
from tests.billing.factories import TEST_CIPHER, TEST_KEY
from tests.billing.fake_card_provider import Fault
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

GET_PAGE = "LowProfile/GetLpResult"


@pytest.fixture
def app(settings, session_factory, clock, mailbox, card_server):
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


@pytest.fixture
def org(gym, client, card_server):  # noqa: F811
    """The gym on the fake provider's terminal, with a monthly card plan."""
    terminal = card_server.TERMINAL
    owner = gym[Role.owner].headers
    answer = client.put(
        f"/organizations/{gym.id}/payments/provider",
        json={
            "provider": "card_provider",
            "terminal": terminal.number,
            "apiName": terminal.api_name,
        },
        headers=owner,
    )
    assert answer.status_code == 200, answer.json
    return gym


def create_plan(client, org, **fields):
    body = {"name": "Monthly", "type": "card", "priceInCents": 25000, "currency": "ILS"}
    body.update({"intervalMonths": 1, **fields})
    answer = client.post(
        f"/organizations/{org.id}/plans", json=body, headers=org[Role.admin].headers
    )
    assert answer.status_code == 201, answer.json
    return answer.json["data"]


def purchase(client, org, plan, role=Role.member):
    return client.post(
        f"/organizations/{org.id}/plans/{plan['id']}/purchase",
        json={},
        headers=org[role].headers,
    )


def webhook(client, org, page_id):
    return client.post(f"/webhooks/card-provider/{org.id}", json={"LowProfileId": page_id})


def count(session, model, *where):
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model).where(*where))


def event_names(session):
    session.expire_all()
    return [e.name for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))]


def test_card_plan_purchase_completes_once_through_a_verified_webhook(
    client, org, card_server, session
):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    page_id = answer.json["data"]["checkout"]["pageId"]
    assert answer.json["data"]["subscription"]["status"] == "scheduled"
    completed = card_server.complete_page(page_id, APPROVE)
    assert completed.webhook_url.endswith(f"/webhooks/card-provider/{org.id}")
    first = webhook(client, org, page_id)
    assert first.status_code == 200
    assert first.json["outcome"] == "processed"
    subscription = session.get(Subscription, uuid.UUID(answer.json["data"]["subscription"]["id"]))
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.payment_method_id is not None
    assert subscription.next_charge_date == subscription.current_period_end
    # Redelivery (the provider retries for ~25 h): answered 200, nothing settles twice.
    for _ in range(3):
        assert webhook(client, org, page_id).status_code == 200
    assert count(session, PaymentTransaction) == 1
    assert count(session, PaymentMethod) == 1


def test_presale_purchase_saves_the_card_only(client, org, card_server, session):
    """Before the opening day: a token-only page; the subscription stays scheduled with no
    period, quota or credits until the opening day's charge."""
    opening = NOW + timedelta(days=10)
    session.add(BillingSettings(organization_id=org.id, opening_day=opening))
    session.commit()
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    page_id = answer.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    subscription = session.get(Subscription, uuid.UUID(answer.json["data"]["subscription"]["id"]))
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.scheduled
    assert subscription.next_charge_date == opening
    assert subscription.current_period_end is None
    assert subscription.payment_method_id is not None
    assert count(session, PaymentTransaction) == 0
    found = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
    assert found.operation == "CreateTokenOnly"


def test_a_failed_page_is_processed_as_payment_failed(client, org, card_server, session):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    page_id = answer.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, DECLINE)
    reply = webhook(client, org, page_id)
    assert reply.status_code == 200
    assert reply.json["outcome"] == "payment.failed"
    assert "payment.failed" in event_names(session)
    subscription = session.get(Subscription, uuid.UUID(answer.json["data"]["subscription"]["id"]))
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.cancelled
    assert webhook(client, org, page_id).status_code == 200  # redelivery: no second effect


def presale_purchase(client, org, session):
    session.add(BillingSettings(organization_id=org.id, opening_day=NOW + timedelta(days=10)))
    session.commit()
    return purchase(client, org, create_plan(client, org))


def test_a_failed_presale_page_alerts_presale_checkout_transaction_failed(
    client, org, card_server, session, caplog
):
    answer = presale_purchase(client, org, session)
    page_id = answer.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, INVALID)
    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        assert webhook(client, org, page_id).json["outcome"] == "payment.failed"
        assert webhook(client, org, page_id).status_code == 200  # redelivery: no second alert
    alerts = [r.args["reason"] for r in caplog.records if r.name == "gymctl.billing.alerts"]
    assert alerts == ["presale_checkout_transaction_failed"]


def test_an_abandoned_presale_checkout_alerts_presale_checkout_attempt_cancelled(
    client, org, card_server, session, session_factory
):
    answer = presale_purchase(client, org, session)
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    sweep = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    subscription_id = answer.json["data"]["subscription"]["id"]
    assert sweep["alerts"] == [
        {
            "reason": "presale_checkout_attempt_cancelled",
            "checkoutId": answer.json["data"]["checkout"]["id"],
            "subscriptionId": subscription_id,
        }
    ]
    again = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    assert again["alerts"] == []
    assert again["abandoned"] == []


def test_a_page_still_open_is_deal_not_finalized_503(client, org, session):
    plan = create_plan(client, org)
    page_id = purchase(client, org, plan).json["data"]["checkout"]["pageId"]
    before = snapshot(session)
    reply = webhook(client, org, page_id)
    assert reply.status_code == 503
    assert reply.json["code"] == "deal_not_finalized"
    assert snapshot(session) == before


def test_an_unknown_page_is_deal_not_found_400(client, org, session):
    reply = webhook(client, org, "4c5b1d3e-0000-4000-8000-000000000000")
    assert reply.status_code == 400
    assert reply.json["code"] == "deal_not_found"
    assert event_names(session)[-1] == "payment.webhook_rejected"


def test_a_page_that_is_not_our_checkout_is_dropped_as_unverified(
    client, org, card_server, session
):
    """A real page on the terminal that none of our checkouts opened: never reaches a
    handler (payment.webhook_ignored, reason unverified); rejections are 400."""
    from gymctl.providers.card import PageRequest

    page = card_server.provider().create_page(
        card_server.TERMINAL,
        PageRequest(
            operation="ChargeAndCreateToken",
            amount_in_cents=100,
            currency="ILS",
            return_value="someone-else",
            success_url="https://x.example/ok",
            failure_url="https://x.example/no",
            webhook_url="https://x.example/hook",
        ),
    )
    card_server.complete_page(page.page_id, APPROVE)
    reply = webhook(client, org, page.page_id)
    assert reply.status_code == 400
    assert reply.json["code"] == "webhook_unverified"
    ignored = session.scalar(
        select(OutboxEvent).where(OutboxEvent.name == "payment.webhook_ignored")
    )
    assert ignored.payload["reason"] == "unverified"
    assert count(session, PaymentTransaction) == 0


def test_provider_unreachable_is_503_so_it_redelivers(client, org, card_server, session):
    plan = create_plan(client, org)
    page_id = purchase(client, org, plan).json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    card_server.inject(GET_PAGE, Fault.error, status=502)
    reply = webhook(client, org, page_id)
    assert reply.status_code == 503
    assert reply.json["code"] == "provider_unreachable"
    assert count(session, PaymentTransaction) == 0
    assert webhook(client, org, page_id).status_code == 200  # the redelivery settles
    assert count(session, PaymentTransaction) == 1


def test_a_malformed_webhook_is_rejected_400(client, org):
    reply = client.post(f"/webhooks/card-provider/{org.id}", json={"nothing": 1})
    assert reply.status_code == 400
    assert reply.json["code"] == "webhook_malformed"


def test_plan_already_held_names_status_and_subscription(client, org, card_server, session):
    plan = create_plan(client, org)
    first = purchase(client, org, plan)
    before = snapshot(session)
    again = purchase(client, org, plan)
    assert again.status_code == 409
    assert again.json["code"] == "plan_already_held"
    assert again.json["status"] == "scheduled"
    assert again.json["subscriptionId"] == first.json["data"]["subscription"]["id"]
    assert snapshot(session) == before


def test_a_full_max_purchases_refuses_sold_out(client, org, session):
    plan = create_plan(client, org, maxPurchases=1)
    assert purchase(client, org, plan).status_code == 201
    before = snapshot(session)
    refused = purchase(client, org, plan, role=Role.coach)
    assert refused.status_code == 409
    assert refused.json["code"] == "plan_sold_out"
    assert snapshot(session) == before
    session.expire_all()
    assert session.get(Plan, uuid.UUID(plan["id"])).purchases_count == 1


def test_a_purchase_takes_its_slot_after_the_page_is_open(
    client, org, card_server, session, engine, monkeypatch
):
    """Taking a slot is a guarded UPDATE of the plan's row, which locks it until the commit:
    taken before the provider's round trip, it queued every other buyer of the plan (a
    presale's launch) behind that call. It is the request's last word to the plan, after the
    page; a plan sold out as last read opens no page at all."""
    plan = create_plan(client, org, maxPurchases=2)
    order: list[str] = []
    provider = type(card_server.provider())
    create_page = provider.create_page

    def recorded(self, *args, **kwargs):
        order.append("page")
        return create_page(self, *args, **kwargs)

    def statement(conn, cursor, text, *_):
        if text.lstrip().upper().startswith("UPDATE PLANS"):
            order.append("slot")

    monkeypatch.setattr(provider, "create_page", recorded)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        assert purchase(client, org, plan).status_code == 201
        assert order == ["page", "slot"]
        assert purchase(client, org, plan, role=Role.coach).status_code == 201
        order.clear()
        refused = purchase(client, org, plan, role=Role.admin)
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    assert (refused.status_code, refused.json["code"]) == (409, "plan_sold_out")
    assert order == []


def test_purchase_with_the_provider_down_changes_nothing(client, org, card_server, session):
    plan = create_plan(client, org)
    card_server.inject("LowProfile/Create", Fault.drop)
    before = snapshot(session)
    refused = purchase(client, org, plan)
    assert refused.status_code == 503
    assert refused.json["code"] == "provider_unreachable"
    assert snapshot(session) == before


def test_abandoned_checkout_is_cancelled_and_a_late_completion_revives_it(
    client, org, card_server, session, session_factory
):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    page_id = answer.json["data"]["checkout"]["pageId"]
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    result = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    subscription_id = answer.json["data"]["subscription"]["id"]
    assert result["abandoned"] == [subscription_id]
    assert result["alerts"] == []  # not a presale: the member simply left the page
    subscription = session.get(Subscription, uuid.UUID(subscription_id))
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.cancelled
    # The member finishes the page after all: the verified completion revives it.
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.active
    found = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
    assert found.status == CheckoutStatus.completed


def test_verify_return_applies_a_missed_webhook(client, org, card_server, session):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    page_id = answer.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    reply = client.post(
        f"/organizations/{org.id}/payments/verify-return",
        json={"pageId": page_id},
        headers=org[Role.member].headers,
    )
    assert reply.status_code == 200, reply.json
    assert reply.json["data"]["subscription"]["status"] == "active"
    assert webhook(client, org, page_id).status_code == 200
    assert count(session, PaymentTransaction) == 1
    mine = client.get(f"/organizations/{org.id}/subscriptions/me", headers=org[Role.member].headers)
    assert [s["status"] for s in mine.json["data"]] == ["active"]


def test_only_finance_managers_create_plans(client, org):
    body = {"name": "x", "type": "card", "priceInCents": 1, "currency": "ILS"}
    for role in (Role.coach, Role.member):
        refused = client.post(
            f"/organizations/{org.id}/plans", json=body, headers=org[role].headers
        )
        assert refused.status_code == 403


def _other_provider(client, gym, enforcement):  # noqa: F811
    body = {"provider": "direct_debit", "webhookSecret": "whsec-test"}
    if enforcement is not None:
        body["webhookSignatureEnforcement"] = enforcement
    reply = client.put(
        f"/organizations/{gym.id}/payments/provider", json=body, headers=gym[Role.owner].headers
    )
    assert reply.status_code == 200, reply.json


def _signed(body: bytes, secret: str = "whsec-test") -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("enforcement", "status", "reason"),
    [(True, 400, None), (False, 200, "signature_invalid_unenforced"), (None, 200, None)],
)
def test_other_providers_signature_enforcement_flag(client, gym, enforcement, status, reason):  # noqa: F811
    """payment-webhook-signature-enforcement: 400, or a logged 200 whose reason ends in
    _unenforced (read per request, fail-open: unset is not enforced)."""
    _other_provider(client, gym, enforcement)
    body = json.dumps({"type": "payment.succeeded"}).encode()
    reply = client.post(
        f"/webhooks/payments/direct_debit/{gym.id}",
        data=body,
        headers={"x-webhook-signature": "bad", "content-type": "application/json"},
    )
    assert reply.status_code == status
    if status == 200:
        assert reply.json["reason"].endswith("_unenforced")
        if reason:
            assert reply.json["reason"] == reason
    else:
        assert reply.json["code"] == "signature_invalid"
    good = client.post(
        f"/webhooks/payments/direct_debit/{gym.id}",
        data=body,
        headers={"x-webhook-signature": _signed(body), "content-type": "application/json"},
    )
    assert good.status_code == 200
    assert good.json["outcome"] == "processed"


def _deliver(client, gym, body: bytes, signature: str | None, provider="direct_debit"):  # noqa: F811
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers["x-webhook-signature"] = signature
    return client.post(f"/webhooks/payments/{provider}/{gym.id}", data=body, headers=headers)


@pytest.mark.parametrize("enforcement", [True, False])
def test_a_non_ascii_signature_is_signature_invalid_not_a_500(client, gym, session, enforcement):  # noqa: F811
    """s38: a latin-1 header value ("\xe9\xe9") reached hmac.compare_digest as a str with
    non-ASCII characters, which raises TypeError: a 500. It is a signature that does not match."""
    _other_provider(client, gym, enforcement)
    before = event_names(session)
    reply = _deliver(client, gym, b"{}", "\xe9\xe9")
    if enforcement:
        assert reply.status_code == 400
        assert reply.json["code"] == "signature_invalid"
        assert event_names(session)[len(before) :] == ["payment.webhook_rejected"]
    else:
        assert reply.status_code == 200
        assert reply.json["reason"] == "signature_invalid_unenforced"
        assert event_names(session)[len(before) :] == ["payment.webhook_ignored"]
    assert count(session, PaymentWebhookDelivery) == 0
    # Non-ASCII around a valid digest is still refused, never an exception.
    reply = _deliver(client, gym, b"{}", _signed(b"{}") + "\xe9")
    assert reply.status_code == (400 if enforcement else 200)
    assert count(session, PaymentWebhookDelivery) == 0


def test_a_payment_webhook_for_an_unknown_or_deleted_organization_writes_nothing(
    client,
    gym,  # noqa: F811
    session,
):
    """s38: every delivery under a made-up organization id filed a payment.webhook_rejected
    row (and would have had a budget of its own). Now: 404 organization_not_found, no event,
    no rate window, no delivery row."""
    _other_provider(client, gym, True)
    before = snapshot(session)
    windows = count(session, RateWindow)
    for _ in range(12):
        reply = client.post(f"/webhooks/payments/stripe/{uuid.uuid4()}", json={})
        assert reply.status_code == 404
        assert reply.json["code"] == "organization_not_found"
    body = b"{}"
    session.get(Organization, gym.id).deleted_at = NOW
    session.commit()
    for signature in (None, "bad", _signed(body)):
        reply = _deliver(client, gym, body, signature)
        assert reply.status_code == 404
        assert reply.json["code"] == "organization_not_found"
    session.get(Organization, gym.id).deleted_at = None
    session.commit()
    assert snapshot(session) == before
    assert count(session, RateWindow) == windows


def test_a_card_webhook_for_an_unknown_or_deleted_organization_writes_nothing(
    client, org, card_server, session
):
    """s38: a new made-up organization id per request got a fresh throttle budget each time and
    filed payment.webhook_ignored, payment.webhook_rejected and a rate window under it. Now:
    organization_not_found, a 400 as every rejection of this provider (spec B 6), nothing
    written and no read-back."""
    before = snapshot(session)
    windows = count(session, RateWindow)
    for _ in range(12):
        reply = client.post(f"/webhooks/card-provider/{uuid.uuid4()}", json={"LowProfileId": "abc"})
        assert reply.status_code == 400
        assert reply.json["code"] == "organization_not_found"
    session.get(Organization, org.id).deleted_at = NOW
    session.commit()
    reply = webhook(client, org, "abc")
    assert reply.status_code == 400
    assert reply.json["code"] == "organization_not_found"
    session.get(Organization, org.id).deleted_at = None
    session.commit()
    assert snapshot(session) == before
    assert count(session, RateWindow) == windows
    assert card_server.requests(GET_PAGE) == 0


def test_a_replayed_signed_delivery_is_a_duplicate_recorded_once(client, gym, session):  # noqa: F811
    """s38: the same signed bytes sent twice were processed twice (two
    payment.webhook_received domain events). The signature covers the body only, so the
    body's digest is the delivery's identity: a replay, or the provider's redelivery of an
    event we acknowledged, answers 200 duplicate and writes nothing."""
    _other_provider(client, gym, True)
    body = b"{}"
    first = _deliver(client, gym, body, _signed(body))
    assert first.status_code == 200
    assert first.json["outcome"] == "processed"
    before = snapshot(session)
    windows = count(session, RateWindow)
    for _ in range(3):
        again = _deliver(client, gym, body, _signed(body))
        assert again.status_code == 200
        assert again.json == {"outcome": "duplicate"}
    assert snapshot(session) == before
    assert count(session, RateWindow) == windows
    assert event_names(session).count("payment.webhook_received") == 1
    other = json.dumps({"type": "payment.succeeded", "id": "evt_2"}).encode()
    assert _deliver(client, gym, other, _signed(other)).json["outcome"] == "processed"
    assert event_names(session).count("payment.webhook_received") == 2
    assert count(session, PaymentWebhookDelivery) == 2


def _while_the_page_opens(monkeypatch, card_server, change) -> None:
    """The provider's page is opened while `change` commits elsewhere (staff at their desk)."""
    provider = type(card_server.provider())
    create_page = provider.create_page

    def opened(self, *args, **kwargs):
        change()
        return create_page(self, *args, **kwargs)

    monkeypatch.setattr(provider, "create_page", opened)


def test_a_price_changed_while_the_page_opens_refuses_page_terms_changed(
    client, org, card_server, session, session_factory, monkeypatch
):
    """The page is opened before the purchase's rows are written and every check is made
    again with them: a page opened at the old price is sent to no one (409
    page_terms_changed), nothing is written, and the member's next tap buys at the price as
    it stands."""
    plan = create_plan(client, org, maxPurchases=5)

    def reprice() -> None:
        with session_factory() as staff:
            staff.get(Plan, uuid.UUID(plan["id"])).price_in_cents = 30000
            staff.commit()

    _while_the_page_opens(monkeypatch, card_server, reprice)
    before = snapshot(session)
    refused = purchase(client, org, plan)
    assert (refused.status_code, refused.json["code"]) == (409, "page_terms_changed")
    before["plans"] = snapshot(session)["plans"]  # the new price, staff's own write
    assert snapshot(session) == before
    monkeypatch.undo()

    bought = purchase(client, org, plan)
    assert bought.status_code == 201
    session.expire_all()
    row = session.get(Checkout, uuid.UUID(bought.json["data"]["checkout"]["id"]))
    stands = session.get(Plan, uuid.UUID(plan["id"]))
    assert row.amount_in_cents == stands.price_in_cents
    assert stands.purchases_count == 1


def test_a_plan_sold_out_while_the_page_opens_writes_nothing(
    client, org, card_server, session, session_factory, monkeypatch
):
    """Two buyers of the last slot: the one whose page opened second finds it gone when the
    rows are written (plan_sold_out) and keeps nothing; the other's purchase stands."""
    plan = create_plan(client, org, maxPurchases=1)

    def sold_elsewhere() -> None:
        with session_factory() as other:
            other.get(Plan, uuid.UUID(plan["id"])).purchases_count = 1
            other.commit()

    _while_the_page_opens(monkeypatch, card_server, sold_elsewhere)
    refused = purchase(client, org, plan)
    assert (refused.status_code, refused.json["code"]) == (409, "plan_sold_out")
    assert count(session, Subscription) == 0
    assert count(session, Checkout) == 0
