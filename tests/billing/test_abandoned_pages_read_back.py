"""A page paid after the abandoned sweep, whose webhook never arrives, is still recorded (s51).

The abandoned-checkouts sweep reads an expired page back once and marks it abandoned; the member
can still pay it at the provider. The webhook was then the only path to our records: lost for
good (the provider's ~25 h of redelivery spent on an app that was down or answered 5xx), the
provider held the member's money with no ledger row, since the abandoned sweep reads back only
open pages and verify-return needs the member to come back. The daemons now read each
abandoned page back on a bounded schedule (gymctl.billing.abandoned_pages: hourly for a day,
then daily for a week) through the webhook's own read-back and apply path.

Against the fake card provider on loopback, over real HTTP; no webhook is ever posted."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from daemons.jobs import JOBS
from gymctl.billing import checkout
from gymctl.billing.sweeps import run_sweep
from gymctl.db import get_engine
from gymctl.models import Checkout, Organization, PaymentTransaction, Role, Subscription, Task
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, DECLINE, buy_card_plan
from tests.billing.factories import TEST_CIPHER, TEST_KEY
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    GET_PAGE,
    app,
    create_plan,
    org,
    purchase,
)
from tests.conftest import NOW

ABANDONED_AT = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=5)  # the sweep's next tick
HOUR, DAY = timedelta(hours=1), timedelta(days=1)
ALERTS = "gymctl.billing.alerts"
# The daemons' billing rows that touch checkouts or take money (the forecasts' is not money).
BILLING_JOBS = [job for job in JOBS if job.name.startswith("billing_")]
BILLING_JOBS = [job for job in BILLING_JOBS if job.name != "billing_forecasts"]


@pytest.fixture
def daemon_settings(settings, card_server):
    """The daemons' settings: the fake provider's URL and the test billing key."""
    return settings.model_copy(
        update={
            "billing_encryption_key": SecretStr(TEST_KEY),
            "card_provider_url": card_server.url,
        }
    )


def run_billing_daemons(session_factory, settings, at) -> None:
    """Every billing job of the daemons' table, as a tick at `at` runs them."""
    for job in BILLING_JOBS:
        if job.own_transactions:
            job.run(session_factory, at, settings)
            continue
        with session_factory() as session:  # the runner's one transaction
            job.run(session, at, settings)
            session.commit()


def _abandoned_and_paid(client, org, card_server, session_factory):
    """The member buys through the purchase route, leaves the page, the abandoned sweep marks
    it abandoned (cancelling the plan), then the member pays it at the provider: no webhook."""
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    data = answer.json["data"]
    page_id, subscription_id = data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])
    swept = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=ABANDONED_AT, cipher=TEST_CIPHER
    )
    assert swept["abandoned"] == [str(subscription_id)]
    card_server.complete_page(page_id, APPROVE)
    return page_id, subscription_id


def _paid_on(session, subscription_id) -> list[PaymentTransaction]:
    session.expire_all()
    return session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()


def _checkout(session, page_id) -> Checkout:
    session.expire_all()
    return session.scalar(select(Checkout).where(Checkout.page_id == page_id))


@pytest.mark.embedded  # both engines
def test_a_page_paid_after_it_was_abandoned_is_recorded_without_its_webhook(
    client, org, card_server, session, session_factory, daemon_settings
):
    """The defect: the daemons' billing jobs ran over the next day and nothing recorded the
    payment. Now the first hourly read-back finds it paid and applies it as the webhook would:
    the abandoned plan is revived and paid, once."""
    page_id, subscription_id = _abandoned_and_paid(client, org, card_server, session_factory)
    reads = card_server.requests(GET_PAGE)

    run_billing_daemons(session_factory, daemon_settings, ABANDONED_AT + 30 * timedelta(minutes=1))
    assert _paid_on(session, subscription_id) == []  # not yet due: an hour after the sweep
    assert card_server.requests(GET_PAGE) == reads

    for hours in range(1, 25):
        run_billing_daemons(session_factory, daemon_settings, ABANDONED_AT + hours * HOUR)
    paid = _paid_on(session, subscription_id)
    assert [(t.status, t.amount_in_cents) for t in paid] == [(TransactionStatus.completed, 25000)]
    assert paid[0].provider_transaction_id
    assert paid[0].metadata_["pageId"] == page_id
    found = _checkout(session, page_id)
    assert found.status == CheckoutStatus.completed
    assert (found.read_backs, found.read_back_at) == (1, ABANDONED_AT + HOUR)
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.active  # revived: the member still is one
    assert subscription.payment_method_id is not None
    assert card_server.requests(GET_PAGE) == reads + 1  # read once, then never again


@pytest.mark.embedded  # both engines
def test_a_page_paid_and_recorded_is_not_read_again(
    client, org, card_server, session, session_factory
):
    page_id, subscription_id = _abandoned_and_paid(client, org, card_server, session_factory)
    reads = card_server.requests(GET_PAGE)
    provider = card_server.provider()
    first = _pass(session_factory, provider, ABANDONED_AT + HOUR)
    assert first["completed"] == [str(_checkout(session, page_id).id)]
    for hours in range(2, 10 * 24):
        again = _pass(session_factory, provider, ABANDONED_AT + hours * HOUR)
        assert again["due"] == 0, (hours, again)
    assert card_server.requests(GET_PAGE) == reads + 1
    assert len(_paid_on(session, subscription_id)) == 1


@pytest.mark.embedded  # both engines
def test_a_page_read_back_the_full_number_of_times_is_not_read_again(
    client, org, card_server, session, session_factory
):
    """Never paid: read hourly through the first day, daily through the week after, 31 times in
    all (abandoned_pages.READ_BACK_SCHEDULE), at those instants only; then never again, even
    once it is paid (the window is the bound)."""
    from gymctl.billing.abandoned_pages import READ_BACK_WINDOW, READ_BACKS

    plan = create_plan(client, org)
    page_id = purchase(client, org, plan).json["data"]["checkout"]["pageId"]
    provider = card_server.provider()
    checkout.abandoned_sweep(session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER)
    read_at = []
    for hours in range(1, 12 * 24):
        at = ABANDONED_AT + hours * HOUR
        before = card_server.requests(GET_PAGE)
        _pass(session_factory, provider, at)
        read_at += [at] * (card_server.requests(GET_PAGE) - before)
    expected = [ABANDONED_AT + hours * HOUR for hours in range(1, 25)]
    expected += [ABANDONED_AT + DAY + days * DAY for days in range(1, 8)]
    assert read_at == expected
    assert (READ_BACKS, READ_BACK_WINDOW) == (31, 8 * DAY)
    found = _checkout(session, page_id)
    assert (found.status, found.read_backs) == (CheckoutStatus.abandoned, 31)
    assert found.read_back_at == expected[-1]

    card_server.complete_page(page_id, APPROVE)
    reads = card_server.requests(GET_PAGE)
    assert _pass(session_factory, provider, ABANDONED_AT + 60 * DAY)["due"] == 0
    assert card_server.requests(GET_PAGE) == reads


@pytest.mark.embedded  # both engines
def test_a_deleted_gyms_abandoned_page_paid_later_is_recorded_for_a_refund(
    client, org, card_server, session, session_factory, caplog
):
    """s51 serves a deleted gym's webhook for its own pages; with the webhook lost, the
    read-back records the payment the same way: on the cancelled plan, not revived, with a
    billing_contradiction alert and an urgent refund follow-up."""
    plan = create_plan(client, org)
    data = purchase(client, org, plan).json["data"]
    page_id, subscription_id = data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])
    provider = card_server.provider()
    checkout.abandoned_sweep(session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER)
    reply = client.delete(f"/organizations/{org.id}", headers=org[Role.owner].headers)
    assert reply.status_code == 200, reply.json
    card_server.complete_page(page_id, APPROVE)

    with caplog.at_level(logging.WARNING, logger=ALERTS):
        result = _pass(session_factory, provider, ABANDONED_AT + 3 * HOUR)
    assert result["read"] == 1, result
    paid = _paid_on(session, subscription_id)
    assert [(t.status, t.amount_in_cents) for t in paid] == [(TransactionStatus.completed, 25000)]
    refusal = "late_completion_of_an_ended_membership"
    assert paid[0].metadata_["notRevived"] == refusal
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert (task.subject_id, task.priority, task.data["reason"]) == (
        str(paid[0].id),
        "urgent",
        refusal,
    )
    assert any(
        "billing_contradiction" in r.getMessage() and str(subscription_id) in r.getMessage()
        for r in caplog.records
    )
    assert session.get(Subscription, subscription_id).status == SubscriptionStatus.cancelled
    assert session.get(Organization, org.id).deleted_at is not None
    assert _checkout(session, page_id).status == CheckoutStatus.completed


def _pass(factory, provider, at):
    from gymctl.billing.abandoned_pages import read_back_abandoned

    return read_back_abandoned(factory, provider, now=at, cipher=TEST_CIPHER)


def test_two_read_back_passes_at_once_record_one_payment(committed_pg, card_server):
    """PostgreSQL, committed for real: two passes (two daemons, or a daemon and an operator's
    run) select the same due page at once. The read-back is claimed by a compare-and-set on its
    count: one pass reads it and records the payment; the other reads nothing."""
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    provider = card_server.provider()
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
        plan = bf.make_plan(session, gym.organization)
        subscription, bought = buy_card_plan(session, provider, gym, plan)
        session.commit()
        subscription_id, page_id = subscription.id, bought.page_id
    checkout.abandoned_sweep(factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER)
    card_server.complete_page(page_id, APPROVE)
    reads = card_server.requests(GET_PAGE)

    start, results, errors = threading.Barrier(2), [], []

    def one_pass():
        try:
            start.wait(timeout=10)
            results.append(_pass(factory, card_server.provider(), ABANDONED_AT + HOUR))
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(results) == 2
    assert sum(result["read"] for result in results) == 1, results
    assert sum(len(result["completed"]) for result in results) == 1, results
    assert card_server.requests(GET_PAGE) == reads + 1
    with factory() as session:
        paid = session.scalars(
            select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
        ).all()
        assert [t.status for t in paid] == [TransactionStatus.completed]
        found = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
        assert (found.status, found.read_backs) == (CheckoutStatus.completed, 1)


@pytest.mark.embedded  # both engines
def test_the_operators_sweep_lists_the_due_page_then_records_it(
    client, org, card_server, session, session_factory, daemon_settings
):
    """`gymctl billing sweep abandoned-read-back [--dry-run]`: the dry run lists the page due
    and asks the provider nothing; the sweep then records the payment as the daemons' job."""
    page_id, subscription_id = _abandoned_and_paid(client, org, card_server, session_factory)
    reads, at = card_server.requests(GET_PAGE), ABANDONED_AT + HOUR
    listed = run_sweep("abandoned-read-back", session_factory, at, daemon_settings, dry_run=True)
    assert listed == {"wouldRead": [str(_checkout(session, page_id).id)], "dryRun": True}
    assert card_server.requests(GET_PAGE) == reads
    assert _checkout(session, page_id).read_backs == 0
    swept = run_sweep("abandoned-read-back", session_factory, at, daemon_settings)
    assert swept["completed"] == [str(_checkout(session, page_id).id)]
    assert [t.amount_in_cents for t in _paid_on(session, subscription_id)] == [25000]


@pytest.mark.embedded  # both engines
def test_a_page_read_back_as_failed_is_final_and_not_read_again(
    client, org, card_server, session, session_factory
):
    """Declined at the provider after the sweep abandoned it, the webhook lost: the read-back
    records the failure (spec B 6: a failed page is processed as payment.failed) and the page
    is not read again; the provider's page takes no second payment."""
    plan = create_plan(client, org)
    data = purchase(client, org, plan).json["data"]
    page_id, subscription_id = data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])
    provider = card_server.provider()
    checkout.abandoned_sweep(session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER)
    assert not card_server.complete_page(page_id, DECLINE).succeeded
    reads = card_server.requests(GET_PAGE)
    assert _pass(session_factory, provider, ABANDONED_AT + HOUR)["failed"] == 1
    assert _checkout(session, page_id).status == CheckoutStatus.failed
    for hours in range(2, 10 * 24):
        assert _pass(session_factory, provider, ABANDONED_AT + hours * HOUR)["due"] == 0
    assert card_server.requests(GET_PAGE) == reads + 1
    assert _paid_on(session, subscription_id) == []
