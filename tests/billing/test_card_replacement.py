"""Card replacement: a member saves a new card for their own subscription through a token-only
hosted page (readiness's member_adds_card); nothing is charged, and a failed or abandoned page
leaves the old card and the subscription as they were."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.models import (
    AuditLog,
    Checkout,
    PaymentMethod,
    PaymentProviderConfig,
    PaymentTransaction,
    Plan,
    Role,
    Subscription,
)
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus
from tests.access.conftest import gym, outsider, snapshot  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, INVALID
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    count,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

OTHER_CARD = "4580000000000011"
NEWER_LOOKING_CARD = "4580000000000029"  # saved last, on the older page


def _active(client, org, card_server, session):  # noqa: F811
    bought = purchase(client, org, create_plan(client, org)).json["data"]
    card_server.complete_page(bought["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought["checkout"]["pageId"]).status_code == 200
    session.expire_all()
    return session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))


def _replace(client, org, subscription, role=Role.member):  # noqa: F811
    return client.post(
        f"/organizations/{org.id}/subscriptions/{subscription.id}/card-replacement",
        json={},
        headers=org[role].headers,
    )


def _state(subscription):
    return (
        subscription.status,
        subscription.current_period_end,
        subscription.next_charge_date,
        subscription.payment_method_id,
    )


def test_a_member_replaces_the_card_of_their_subscription_without_a_charge(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    subscription = _active(client, org, card_server, session)
    old = _state(subscription)
    opened = _replace(client, org, subscription)
    assert opened.status_code == 201, opened.json
    page_id = opened.json["data"]["checkout"]["pageId"]
    row = session.get(Checkout, opened.json["data"]["checkout"]["id"])
    assert (row.operation, row.amount_in_cents) == ("CreateTokenOnly", 0)
    again = _replace(client, org, subscription)
    assert (again.status_code, again.json["code"]) == (409, "card_replacement_in_progress")

    card_server.complete_page(page_id, OTHER_CARD)
    assert webhook(client, org, page_id).status_code == 200
    assert webhook(client, org, page_id).status_code == 200  # a redelivery changes nothing

    session.expire_all()
    new = _state(subscription)
    assert new[:3] == old[:3]  # the period and the next charge stay
    assert new[3] != old[3]
    assert count(session, PaymentTransaction) == 1  # the purchase alone: nothing charged
    [audit] = session.scalars(
        select(AuditLog).where(AuditLog.action == "payment_method.replaced")
    ).all()
    assert audit.data["paymentMethodId"] == str(new[3])


def test_a_failed_or_abandoned_replacement_leaves_the_old_card_and_the_subscription(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
):
    subscription = _active(client, org, card_server, session)
    old = _state(subscription)
    failed = _replace(client, org, subscription).json["data"]["checkout"]["pageId"]
    card_server.complete_page(failed, INVALID)
    assert webhook(client, org, failed).json["outcome"] == "payment.failed"
    _replace(client, org, subscription)  # opened, never finished
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    swept = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    assert swept["abandoned"] == []
    session.expire_all()
    assert _state(subscription) == old
    assert subscription.status == SubscriptionStatus.active


def test_card_replacement_refusals_change_nothing(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    subscription = _active(client, org, card_server, session)
    before = snapshot(session)
    theirs = _replace(client, org, subscription, role=Role.coach)
    assert (theirs.status_code, theirs.json["code"]) == (404, "subscription_not_found")
    subscription.status = SubscriptionStatus.cancelled
    session.commit()
    ended = _replace(client, org, subscription)
    assert (ended.status_code, ended.json["code"]) == (409, "card_replacement_not_available")
    subscription.status = SubscriptionStatus.active
    session.commit()
    assert snapshot(session) == before
    assert count(session, Checkout) == 1


@pytest.mark.embedded
def test_a_terminal_changed_while_the_replacement_page_opens_keeps_nothing(
    client,
    org,  # noqa: F811
    card_server,
    session,
    session_factory,
    engine,
    monkeypatch,
):
    """The replacement page is opened before its checkout is written: a page opened on the
    terminal the gym has just left could never be read back on the new one (409
    page_terms_changed), and no checkout names it."""
    subscription = _active(client, org, card_server, session)
    provider = type(card_server.provider())
    create_page = provider.create_page

    def opened(self, *args, **kwargs):
        with session_factory() as owner:
            config = owner.scalar(
                select(PaymentProviderConfig).where(PaymentProviderConfig.organization_id == org.id)
            )
            config.terminal = "7654321"
            owner.commit()
        return create_page(self, *args, **kwargs)

    monkeypatch.setattr(provider, "create_page", opened)
    before = snapshot(session)
    refused = _replace(client, org, subscription)
    assert (refused.status_code, refused.json["code"]) == (409, "page_terms_changed")
    before["payment_provider_configs"] = snapshot(session)["payment_provider_configs"]
    assert snapshot(session) == before


@pytest.mark.embedded
@pytest.mark.parametrize("swept", [True, False], ids=["abandoned", "past_its_time"])
def test_an_older_replacement_page_completed_late_keeps_the_newer_card(
    client,
    org,  # noqa: F811
    card_server,
    session,
    session_factory,
    engine,
    swept,
):
    """A member left a replacement page (past its time, abandoned or not yet swept), saved a
    card on a new one, then finished the old tab: its late verified completion saved the older
    card and made it the payment method, silently replacing the card the member chose last."""
    subscription = _active(client, org, card_server, session)
    older = _replace(client, org, subscription).json["data"]["checkout"]["pageId"]
    aged = session.get(Checkout, _checkout_of(session, older))  # opened two hours ago
    aged.created_at -= checkout.CHECKOUT_TTL + timedelta(minutes=1)
    aged.expires_at -= checkout.CHECKOUT_TTL + timedelta(minutes=1)
    session.commit()
    if swept:
        checkout.abandoned_sweep(
            session_factory, card_server.provider(), now=NOW, cipher=TEST_CIPHER
        )
    newer, newest = _saved_on_a_new_page(client, org, card_server, session, subscription)

    card_server.complete_page(older, NEWER_LOOKING_CARD)
    assert webhook(client, org, older).status_code == 200
    assert webhook(client, org, older).status_code == 200  # a redelivery changes nothing

    session.expire_all()
    assert subscription.payment_method_id == newest
    assert session.get(PaymentMethod, newest).last4 == OTHER_CARD[-4:]
    late = session.get(Checkout, _checkout_of(session, older))
    assert late.status == CheckoutStatus.completed  # applied once: a redelivery is a repeat
    assert late.metadata_["supersededBy"] == str(_checkout_of(session, newer))
    replaced = session.scalars(
        select(AuditLog).where(AuditLog.action == "payment_method.replaced")
    ).all()
    assert [audit.data["paymentMethodId"] for audit in replaced] == [str(newest)]
    assert count(session, PaymentTransaction) == 1  # the purchase alone: nothing charged


def _checkout_of(session, page_id):
    return session.scalar(select(Checkout.id).where(Checkout.page_id == page_id))


@pytest.mark.embedded
def test_a_presales_purchase_page_completed_after_a_newer_replacement_keeps_the_newer_card(
    client,
    org,  # noqa: F811
    card_server,
    session,
):
    """A presale's purchase page (token only) left open; the member saved a card on a
    replacement page opened after it; the purchase page completed later and its card took
    over. The purchase still completes (the presale keeps its seat), with the newer card."""
    opens = (NOW + timedelta(days=10)).isoformat()
    set_day = client.patch(
        f"/organizations/{org.id}/billing/settings",
        json={"openingDay": opens},
        headers=org[Role.owner].headers,
    )
    assert set_day.status_code == 200, set_day.json
    bought = purchase(client, org, create_plan(client, org)).json["data"]
    subscription = session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))
    page = bought["checkout"]["pageId"]
    session.get(Checkout, _checkout_of(session, page)).created_at -= timedelta(minutes=5)
    session.commit()  # opened before the replacement (the tests' clock stands still)
    newer, chosen = _saved_on_a_new_page(client, org, card_server, session, subscription)

    card_server.complete_page(page, NEWER_LOOKING_CARD)
    assert webhook(client, org, page).status_code == 200

    session.expire_all()
    assert subscription.payment_method_id == chosen
    assert session.get(PaymentMethod, chosen).last4 == OTHER_CARD[-4:]
    assert subscription.status == SubscriptionStatus.scheduled  # the presale stands
    late = session.get(Checkout, _checkout_of(session, page))
    assert late.status == CheckoutStatus.completed
    assert late.metadata_["supersededBy"] == str(_checkout_of(session, newer))


def _saved_on_a_new_page(client, org, card_server, session, subscription):  # noqa: F811
    """The member opens a replacement page and saves OTHER_CARD on it: (its page id, the
    payment method now in use)."""
    opened = _replace(client, org, subscription)
    assert opened.status_code == 201, opened.json
    page = opened.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page, OTHER_CARD)
    assert webhook(client, org, page).status_code == 200
    session.expire_all()
    return page, subscription.payment_method_id


@pytest.mark.embedded
def test_a_purchase_not_paid_yet_takes_no_replacement_card(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    """s54 (a hunt found it): a card saved beside a purchase whose page was still open made the
    unpaid plan look like a presale with a card: neither its page failing nor its abandonment
    ended it, it kept its place and the member could not buy the plan again. Its own page
    charges it and saves its card."""
    bought = purchase(client, org, create_plan(client, org)).json["data"]
    subscription = session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))
    before = snapshot(session)

    refused = _replace(client, org, subscription)

    assert (refused.status_code, refused.json["code"]) == (409, "card_replacement_not_available")
    assert snapshot(session) == before


@pytest.mark.embedded
@pytest.mark.parametrize("how", ["failed", "abandoned"])
def test_an_unpaid_purchase_holding_a_card_saved_beside_it_still_ends_with_its_page(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
    how,
):
    """A row an older release let hold such a card: its page failing or abandoned cancels it
    and gives its place back, as any unpaid purchase (`checkout._cancel_unpaid`)."""
    plan = create_plan(client, org, maxPurchases=1)
    bought = purchase(client, org, plan).json["data"]
    active = _active(client, org, card_server, session)  # a card of the member's, saved
    subscription = session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))
    subscription.payment_method_id = active.payment_method_id
    session.commit()
    page = bought["checkout"]["pageId"]

    if how == "failed":
        card_server.complete_page(page, INVALID)
        assert webhook(client, org, page).json["outcome"] == "payment.failed"
    else:
        later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
        checkout.abandoned_sweep(
            session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
        )

    session.expire_all()
    assert session.get(Subscription, subscription.id).status is SubscriptionStatus.cancelled
    assert session.get(Plan, uuid.UUID(plan["id"])).purchases_count == 0
    assert purchase(client, org, plan).status_code == 201  # the member can buy it again
