"""A protected collector attempt (a renewal, a manual or a debt charge) the provider approved at
another amount, currency or terminal than the one stored, or one reopened on a late approval and
then contradicted, stayed a pending contradiction for ever: reconcile waits for the provider to
agree with the stored terms, and the settle-contradiction door refused it (billing_no_contradiction)
while the gym held the member's money. The same door now settles it: accept settles the
obligation as the charge would have (period granted or debt cleared, once), refund gives all of
it back and leaves the obligation unpaid as a decline leaves it. The provider is asked again by
the stored attempt id first; a refusal changes nothing; a second settlement replays."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gymctl.billing import refunds
from gymctl.cli.billing import app as billing_app
from gymctl.models import (
    AuditLog,
    OutboxEvent,
    PaymentTransaction,
    Subscription,
    Task,
)
from gymctl.models.billing import SubscriptionStatus, TransactionStatus, TransactionType
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE, REFUND
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import (
    cli_gym,
    contradicted_attempt,
    reconciled,
    reconciled_on_the_cli,
    settle,
)
from tests.billing_ops.helpers import (
    DUE,
    Crash,
    audit_rows,
    dies,
)
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # as the page and desk contradiction door's own tests


def _state(session) -> tuple:
    """Every row count the door could touch, and every payment's and subscription's state."""
    session.expire_all()
    counts = tuple(
        session.scalar(select(func.count()).select_from(model))
        for model in (AuditLog, OutboxEvent, PaymentTransaction, Task)
    )
    payments = tuple(
        session.execute(
            select(
                PaymentTransaction.status,
                PaymentTransaction.amount_in_cents,
                PaymentTransaction.billing_resolution,
            ).order_by(PaymentTransaction.id)
        ).all()
    )
    subscriptions = tuple(
        session.execute(
            select(
                Subscription.status,
                Subscription.current_period_end,
                Subscription.next_charge_date,
                Subscription.debt_amount_in_cents,
                Subscription.retry_at,
                Subscription.collection_paused,
            ).order_by(Subscription.id)
        ).all()
    )
    return counts, payments, subscriptions


def test_a_renewal_taken_at_another_amount_is_accepted_and_its_period_granted_once(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"  # it never agrees

    before = _state(session)
    stale = settle(client, gym, transaction.id, owner, "accept", 1)
    assert (stale.status_code, stale.json["code"]) == (409, "billing_evidence_mismatch")
    assert stale.json["providerAmountInCents"] == taken
    assert _state(session) == before

    settled = settle(client, gym, transaction.id, owner, "accept", taken)
    assert settled.status_code == 200, settled.json
    data = settled.json["data"]
    assert (data["outcome"], data["transaction"]["status"]) == ("accepted", "completed")
    assert data["transaction"]["amountInCents"] == taken
    assert data["resolution"]["expected"] == {"amountInCents": 1, "currency": "ILS"}
    assert data["resolution"]["taken"] == {"amountInCents": taken, "currency": "ILS"}
    session.expire_all()
    row = session.get(PaymentTransaction, transaction.id)
    assert (row.status, row.amount_in_cents) == (TransactionStatus.completed, taken)
    assert row.provider_transaction_id
    assert row.billing_attempt["amountInCents"] == 1  # the stored attempt is kept as it was
    subscription = session.get(Subscription, row.subscription_id)
    assert subscription.current_period_start == DUE
    assert subscription.next_charge_date == subscription.current_period_end > DUE
    assert subscription.status == SubscriptionStatus.active
    [audited] = audit_rows(session, "billing.contradiction_settled")
    assert audited.actor_user_id == gym.owner.id
    granted = subscription.current_period_end

    again = settle(client, gym, transaction.id, owner, "accept", taken)
    assert (again.status_code, again.json["data"]["outcome"]) == (200, "already_settled")
    assert again.json["data"]["replayed"] is True
    other = settle(client, gym, transaction.id, owner, "refund", taken)
    assert (other.status_code, other.json["code"]) == (409, "billing_contradiction_settled")
    session.expire_all()
    assert session.get(Subscription, row.subscription_id).current_period_end == granted
    renewed = session.scalar(
        select(func.count())
        .select_from(OutboxEvent)
        .where(OutboxEvent.name == "subscription.renewed")
    )
    assert renewed == 1  # settled exactly once
    assert card_server.requests(CHARGE) == 1  # asked again, never charged again
    assert card_server.requests(REFUND) == 0


def test_a_renewal_refunded_in_full_leaves_the_obligation_unpaid_as_a_decline_would(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"

    settled = settle(client, gym, transaction.id, owner, "refund", taken)
    assert settled.status_code == 200, settled.json
    data = settled.json["data"]
    assert data["outcome"] == "refund_stored"
    assert (data["refund"]["status"], data["refund"]["amountInCents"]) == ("refunded", taken)
    session.expire_all()
    row = session.get(PaymentTransaction, transaction.id)
    assert (row.status, row.amount_in_cents) == (TransactionStatus.refunded, taken)
    subscription = session.get(Subscription, row.subscription_id)
    # Unpaid: no period granted, the debt opened at the decision (day 0: the member had paid
    # until the gym gave it back), retried as a declined renewal is, at the stored price.
    assert subscription.current_period_end == DUE
    assert subscription.status == SubscriptionStatus.debt
    assert (subscription.debt_since, subscription.debt_amount_in_cents) == (NOW, 1)
    assert subscription.retry_at == NOW + timedelta(days=1)
    assert subscription.decline_count == 0  # the card declined nothing

    again = settle(client, gym, transaction.id, owner, "refund", taken)
    assert (again.status_code, again.json["data"]["outcome"]) == (200, "already_settled")
    other = settle(client, gym, transaction.id, owner, "accept", taken)
    assert (other.status_code, other.json["code"]) == (409, "billing_contradiction_settled")
    assert card_server.requests(REFUND) == 1
    kinds = session.scalars(
        select(PaymentTransaction.type).where(PaymentTransaction.type == TransactionType.refund)
    ).all()
    assert len(kinds) == 1


def test_a_debt_charge_taken_at_another_amount_is_accepted_and_the_debt_cleared(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(
        session, gym, card_server, in_debt_since=NOW - timedelta(days=2)
    )
    assert transaction.attempt_kind.value == "debt"
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    settled = settle(client, gym, transaction.id, owner, "accept", taken)
    assert settled.status_code == 200, settled.json
    session.expire_all()
    subscription = session.get(Subscription, transaction.subscription_id)
    assert subscription.status == SubscriptionStatus.active
    assert (subscription.debt_amount_in_cents, subscription.debt_since) == (0, None)


def test_a_reopened_attempt_then_contradicted_is_accepted_and_its_hold_lifted(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    """Closed as never charged, reopened on the provider's approval (collection held), then
    contradicted by the amount the provider reports: the hold stayed for ever."""
    transaction, taken = contradicted_attempt(session, gym, card_server)
    transaction.status = TransactionStatus.failed
    transaction.billing_resolution = {"decision": "not_charged"}
    session.commit()
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "late_positive_evidence"
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    session.expire_all()
    assert session.get(Subscription, transaction.subscription_id).collection_paused

    settled = settle(client, gym, transaction.id, owner, "accept", taken)
    assert settled.status_code == 200, settled.json
    session.expire_all()
    subscription = session.get(Subscription, transaction.subscription_id)
    assert (subscription.collection_paused, subscription.collection_hold) == (False, None)
    assert subscription.current_period_end > DUE


def test_refusals_change_nothing(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    other = bf.make_gym(session)
    connect_card_provider(session, other, since=NOW - timedelta(days=30))
    theirs, _ = contradicted_attempt(session, other, card_server)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    before = _state(session)
    lookups = card_server.requests(LOOKUP_CHARGE)

    foreign = settle(client, gym, theirs.id, owner, "refund", taken)
    assert (foreign.status_code, foreign.json["code"]) == (404, "transaction_not_found")
    wrong = settle(client, gym, transaction.id, owner, "give-back", taken)
    assert (wrong.status_code, wrong.json["code"]) == (400, "invalid_body")
    assert card_server.requests(LOOKUP_CHARGE) == lookups  # refused before asking anyone
    currency = settle(client, gym, transaction.id, owner, "refund", taken, "USD")
    assert (currency.status_code, currency.json["code"]) == (409, "billing_evidence_mismatch")
    stale = settle(client, gym, transaction.id, owner, "refund", taken + 1)
    assert (stale.status_code, stale.json["code"]) == (409, "billing_evidence_mismatch")
    card_server.inject(LOOKUP_CHARGE, Fault.error, times=None)
    unreachable = settle(client, gym, transaction.id, owner, "refund", taken)
    assert (unreachable.status_code, unreachable.json["code"]) == (
        409,
        "billing_provider_unavailable",
    )
    card_server.clear_faults()
    member = settle(client, gym, transaction.id, headers(gym.member), "refund", taken)
    assert member.status_code == 403
    assert _state(session) == before
    assert card_server.requests(REFUND) == 0


def test_a_crash_before_the_refund_is_sent_leaves_it_stored_for_recovery(
    client,
    session,
    session_factory,
    gym,
    card_server,
    documents,
    monkeypatch,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    dies(monkeypatch, refunds, "execute_refund", after=False)
    with pytest.raises(Crash):
        settle(client, gym, transaction.id, owner, "refund", taken)
    monkeypatch.undo()  # the restart
    session.expire_all()
    row = session.get(PaymentTransaction, transaction.id)
    assert row.status == TransactionStatus.refund_pending  # committed with its stored refund
    assert card_server.requests(REFUND) == 0

    counts = refunds.resume_refunds(
        session_factory,
        card_server.provider(),
        TEST_CIPHER,
        now=NOW + timedelta(minutes=5),
        documents=documents,
    )
    assert counts["refunded"] == 1, counts
    session.expire_all()
    assert session.get(PaymentTransaction, transaction.id).status == TransactionStatus.refunded
    assert card_server.requests(REFUND) == 1
    replay = settle(client, gym, transaction.id, owner, "refund", taken)
    assert replay.json["data"]["outcome"] == "already_settled"
    assert card_server.requests(REFUND) == 1


def test_the_cli_refunds_a_contradicted_renewal_and_its_dry_run_keeps_nothing(
    committed_database, card_server, monkeypatch
):
    with cli_gym(committed_database, card_server, monkeypatch) as (factory, session, gym):
        transaction, taken = contradicted_attempt(session, gym, card_server)
        org, owner = str(gym.organization.id), str(gym.owner.id)
    reconciled_on_the_cli(org, transaction.id, owner)
    args = [
        "transaction", "settle-contradiction", org, str(transaction.id),
        "--decision", "refund", "--amount-in-cents", str(taken), "--currency", "ILS",
        "--operator", owner, "--json",
    ]  # fmt: skip
    with factory() as session:
        before = _state(session)
    dry = CliRunner().invoke(billing_app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["outcome"] == "refund_stored"
    with factory() as session:
        assert _state(session) == before
    assert card_server.requests(REFUND) == 0  # a dry run sends no refund

    real = CliRunner().invoke(billing_app, args)
    assert real.exit_code == 0, real.output
    assert json.loads(real.stdout)["refund"]["status"] == "refunded"
    with factory() as session:
        row = session.get(PaymentTransaction, transaction.id)
        assert (row.status, row.amount_in_cents) == (TransactionStatus.refunded, taken)
        subscription = session.get(Subscription, row.subscription_id)
        assert subscription.status == SubscriptionStatus.debt
        assert subscription.current_period_end == DUE
    assert card_server.requests(REFUND) == 1
    replay = CliRunner().invoke(billing_app, args)
    assert json.loads(replay.stdout)["outcome"] == "already_settled", replay.output
    assert card_server.requests(REFUND) == 1


def test_a_debt_charge_refunded_keeps_the_debt_and_its_day_0(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    """As a debt retry's decline does (spec B 3: day N counted from debt_since)."""
    since = NOW - timedelta(days=2)
    transaction, taken = contradicted_attempt(session, gym, card_server, in_debt_since=since)
    session.expire_all()
    owed = session.get(Subscription, transaction.subscription_id).debt_amount_in_cents
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    settled = settle(client, gym, transaction.id, owner, "refund", taken)
    assert settled.status_code == 200, settled.json
    assert settled.json["data"]["refund"]["status"] == "refunded"
    session.expire_all()
    subscription = session.get(Subscription, transaction.subscription_id)
    assert subscription.status == SubscriptionStatus.debt
    assert (subscription.debt_since, subscription.debt_amount_in_cents) == (since, owed)
    assert subscription.retry_at == NOW + timedelta(days=1)
