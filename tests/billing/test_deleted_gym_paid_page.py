"""A hosted page paid after its gym was deleted: the money the provider took is on the ledger.

The s38 rule answers a payment webhook of a deleted organization organization_not_found and
writes nothing. A page the abandoned sweep had marked abandoned (or still open when the owner
deleted the gym) and paid after the deletion then left no trace: the webhook was refused with a
400 (the provider does not redeliver a rejection), the sweep reads back only open pages, and the
member's verify-return needs a live gym. Only a page one of the deleted gym's checkouts names is
read back (on the terminal that opened it) and settled; a made-up organization, or a page the
deleted gym never opened, still writes nothing and gets no throttle budget."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.gyms import delete_organization
from gymctl.billing import checkout
from gymctl.billing.webhooks import WEBHOOKS_PER_WINDOW
from gymctl.models import (
    Checkout,
    Membership,
    Organization,
    PaymentTransaction,
    RateWindow,
    Role,
    Subscription,
    Task,
)
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.models.organizations import MembershipStatus
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixtures)
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, buy_card_plan
from tests.billing.factories import TEST_CIPHER, TEST_KEY
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    GET_PAGE,
    app,
    count,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW
from tests.embedded_outside_calls import factory, watching  # noqa: F401 (fixtures)

LATER = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
ALERTS = "gymctl.billing.alerts"


def _bought(client, org):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    data = answer.json["data"]
    return data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])


def _delete_gym(client, org) -> None:
    reply = client.delete(f"/organizations/{org.id}", headers=org[Role.owner].headers)
    assert reply.status_code == 200, reply.json


def _paid_on(session, subscription_id) -> list[PaymentTransaction]:
    session.expire_all()
    return session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()


@pytest.mark.embedded
@pytest.mark.parametrize(
    ("when", "refusal"),
    [
        ("abandoned", "late_completion_of_an_ended_membership"),
        ("open", "late_completion_of_a_cancelled_plan"),
    ],
)
def test_a_page_paid_after_its_gym_was_deleted_is_recorded_for_a_refund(
    client, org, card_server, session, session_factory, caplog, when, refusal
):
    """Abandoned by the sweep, then the gym deleted, then paid (the defect); or still open
    when the gym was deleted (its plan ended with the gym), then paid. Either way the webhook
    reads the page back on the deleted gym's terminal and records the payment on the cancelled
    plan: no revival, a billing_contradiction alert, an urgent refund follow-up."""
    page_id, subscription_id = _bought(client, org)
    if when == "abandoned":
        swept = checkout.abandoned_sweep(
            session_factory, card_server.provider(), now=LATER, cipher=TEST_CIPHER
        )
        assert swept["abandoned"] == [str(subscription_id)]
    _delete_gym(client, org)
    session.expire_all()
    assert session.get(Organization, org.id).deleted_at is not None
    card_server.complete_page(page_id, APPROVE)
    reads = card_server.requests(GET_PAGE)

    with caplog.at_level(logging.WARNING, logger=ALERTS):
        reply = webhook(client, org, page_id)
    assert reply.status_code == 200, reply.json
    assert reply.json["outcome"] == "processed"
    assert card_server.requests(GET_PAGE) == reads + 1  # believed only after the read-back

    paid = _paid_on(session, subscription_id)
    assert [(t.status, t.amount_in_cents) for t in paid] == [(TransactionStatus.completed, 25000)]
    assert paid[0].provider_transaction_id
    assert paid[0].metadata_["notRevived"] == refusal
    assert paid[0].metadata_["pageId"] == page_id
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert (task.subject_id, task.priority) == (str(paid[0].id), "urgent")
    assert task.data["reason"] == refusal
    assert any(
        "billing_contradiction" in r.getMessage() and str(subscription_id) in r.getMessage()
        for r in caplog.records
    )
    # Nothing of the deleted gym comes back to life.
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.current_period_end is None
    assert subscription.next_charge_date is None
    member = session.get(Membership, subscription.membership_id)
    assert member.status == MembershipStatus.active  # as the deletion left it; no period
    assert session.get(Organization, org.id).deleted_at is not None
    assert session.get(Checkout, session.scalar(_checkout_of(subscription_id))).status == (
        CheckoutStatus.completed
    )

    # The provider's redelivery, and a later sweep, record nothing twice.
    assert webhook(client, org, page_id).json["outcome"] == "processed"
    checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=LATER + timedelta(hours=3), cipher=TEST_CIPHER
    )
    assert len(_paid_on(session, subscription_id)) == 1


def _checkout_of(subscription_id):
    return select(Checkout.id).where(Checkout.subscription_id == subscription_id)


@pytest.mark.embedded
def test_a_deleted_gym_still_writes_nothing_for_a_page_it_never_opened(
    client, org, card_server, session
):
    """The s38 protections hold: a deleted gym's webhook naming a page none of its checkouts
    names, and a made-up organization id (even with a real page id), answer
    organization_not_found with nothing written, no rate window and no read-back."""
    page_id, _ = _bought(client, org)
    _delete_gym(client, org)
    card_server.complete_page(page_id, APPROVE)
    before = snapshot(session)
    windows = count(session, RateWindow)
    reads = card_server.requests(GET_PAGE)
    for _ in range(12):
        for reply in (
            webhook(client, org, "not-a-page-of-this-gym"),
            client.post(f"/webhooks/card-provider/{org.id}", json={}),  # names no page
            client.post(f"/webhooks/card-provider/{uuid.uuid4()}", json={"LowProfileId": page_id}),
        ):
            assert reply.status_code == 400, reply.json
            assert reply.json["code"] == "organization_not_found"
    assert snapshot(session) == before
    assert count(session, RateWindow) == windows
    assert card_server.requests(GET_PAGE) == reads


@pytest.mark.embedded
def test_a_deleted_gyms_own_page_is_throttled_per_checkout(client, org, card_server, session):
    """A page the deleted gym opened is read back at most WEBHOOKS_PER_WINDOW times a minute,
    as a live gym's: its budget is the checkout's, so no one makes new budgets."""
    page_id, _ = _bought(client, org)
    _delete_gym(client, org)
    reads = card_server.requests(GET_PAGE)
    answers = [webhook(client, org, page_id).status_code for _ in range(WEBHOOKS_PER_WINDOW)]
    assert set(answers) == {503}  # not paid: still settling, the provider redelivers
    refused = webhook(client, org, page_id)
    assert refused.status_code == 429
    assert card_server.requests(GET_PAGE) == reads + WEBHOOKS_PER_WINDOW


def test_a_deleted_gyms_paid_page_holds_no_write_lock_across_its_read_back(
    factory, card_server, settings, clock
):
    """SQLite only, by its fixture: on the embedded default (a SQLite file, committed for
    real) the webhook of a deleted gym's page reads the page back with no write transaction
    open (the throttle's count is committed first, as for a live gym)."""
    from pydantic import SecretStr

    from webhooks.app import create_app

    provider = card_server.provider()
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
        plan = bf.make_plan(session, gym.organization)
        _, bought = buy_card_plan(session, provider, gym, plan)
        session.commit()
        organization_id, page_id, owner_id = gym.organization.id, bought.page_id, gym.owner.id
    checkout.abandoned_sweep(factory, provider, now=LATER, cipher=TEST_CIPHER)
    with factory() as session:
        organization = session.get(Organization, organization_id)
        delete_organization(session, organization, actor_user_id=owner_id, now=LATER)
        session.commit()
    card_server.complete_page(page_id, APPROVE)
    settings = settings.model_copy(update={"billing_encryption_key": SecretStr(TEST_KEY)})
    app = create_app(settings, session_factory=factory, clock=clock, card_provider=provider)
    with watching() as seen:
        reply = app.test_client().post(
            f"/webhooks/card-provider/{organization_id}", json={"LowProfileId": page_id}
        )
    assert reply.status_code == 200, reply.json
    assert "httpx" in seen.doors(), "the webhook never read the page back"
    assert not seen.calls, seen.report()
    with factory() as session:
        (paid,) = session.scalars(select(PaymentTransaction)).all()
        assert paid.status == TransactionStatus.completed
        assert paid.metadata_["notRevived"] == "late_completion_of_an_ended_membership"
