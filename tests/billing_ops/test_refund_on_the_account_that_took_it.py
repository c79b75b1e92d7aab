"""A refund goes back through the merchant account that took the money (docs/decisions.md: "The
original merchant account of an attempt (or of a refunded payment) is the organization's
card-provider config on the attempt's terminal, the active one or one since replaced ...
refunds still ask that account"). A hosted-page payment carries no billing attempt: the
terminal that took it is its checkout's, not the one the gym moved to since (the provider
knows a deal only on the terminal that made it, and refuses the refund anywhere else)."""

from __future__ import annotations

from datetime import timedelta

from gymctl.billing import accounts, checkout
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card import Terminal
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, TERMINAL
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import send_refund, store_refund
from tests.conftest import NOW

NEW_TERMINAL = Terminal("2000", "moved2026")
URLS = checkout.Urls("https://x.example/ok", "https://x.example/no", "https://x.example/hook")


def _paid_on_a_hosted_page(session, gym, card_server) -> PaymentTransaction:
    plan = bf.make_plan(session, gym.organization)
    paid_at = NOW - timedelta(days=3)
    _, page = checkout.purchase_card_plan(
        session,
        card_server.provider(),
        organization_id=gym.organization.id,
        plan_id=plan.id,
        user_id=gym.member.id,
        urls=URLS,
        now=paid_at,
        cipher=TEST_CIPHER,
    )
    card_server.complete_page(page.page_id, APPROVE)
    outcome, _ = checkout.verify_and_apply(
        session,
        card_server.provider(),
        organization_id=gym.organization.id,
        page_id=page.page_id,
        now=paid_at,
        cipher=TEST_CIPHER,
    )
    assert outcome == "completed", outcome
    session.flush()
    sale = session.query(PaymentTransaction).filter_by(organization_id=gym.organization.id).one()
    assert sale.status == TransactionStatus.completed
    assert not sale.billing_attempt
    return sale


def test_a_hosted_page_payment_is_refunded_on_the_terminal_that_took_it(
    session, gym, card_server, documents
):
    sale = _paid_on_a_hosted_page(session, gym, card_server)
    accounts.configure_provider(  # the gym moves terminal after the member paid
        session,
        gym.organization.id,
        provider=accounts.CARD_PROVIDER,
        terminal=NEW_TERMINAL.number,
        api_name=NEW_TERMINAL.api_name,
        now=NOW - timedelta(days=1),
        cipher=TEST_CIPHER,
    )
    session.commit()

    refund = store_refund(session, sale, 2000, documents)
    assert refund.billing_attempt["terminal"] == TERMINAL.number
    done = send_refund(session, card_server, refund.id, documents)

    assert done.status == TransactionStatus.refunded
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [2000]
    session.refresh(sale)
    assert (sale.status, sale.metadata_["refundedInCents"]) == (TransactionStatus.completed, 2000)
