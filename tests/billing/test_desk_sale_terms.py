"""A plan sold at the desk (POST /organizations/:orgId/subscriptions): a pay-later sale is due
after now, and a cash sale gets its tax invoice and receipt, as every sale does."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import PaymentTransaction, Subscription
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)
from tests.conftest import NOW

D = timedelta(days=1)

pytestmark = pytest.mark.embedded  # the demo gym sells at the desk


@pytest.mark.parametrize("due", [NOW - 30 * D, NOW], ids=["a month ago", "now"])
def test_a_pay_later_sale_due_by_now_is_refused_and_nothing_is_sold(life, session, due):  # noqa: F811
    """Spec B 3: a pay-later term past payment_due_at enters debt, day 0 the due instant. A
    sale due a month ago (a month mistyped) was answered 201, and the next lifecycle pass put
    the plan the member had just bought in debt past its grace and cancelled it for
    non-payment, minutes after the sale: refused, nothing sold."""
    life.at(NOW)
    plan = create_plan(life.client, life.org, type="cash", priceInCents=8000)
    sale = {
        "userId": str(life.member.user.id),
        "planId": plan["id"],
        "method": "pay_later",
        "paymentDueAt": due.isoformat(),
    }
    refused = life.call("POST", "/subscriptions", life.owner, 422, json=sale)
    assert (refused["code"], refused["paymentDueAt"]) == ("payment_due_past", due.isoformat())
    session.expire_all()
    held = session.scalars(
        select(Subscription).where(Subscription.user_id == life.member.user.id)
    ).all()
    assert held == []


def test_a_plan_sold_at_the_desk_for_cash_gets_its_tax_invoice_and_receipt(life, session):  # noqa: F811
    """Every sale gets a TaxInvoiceAndReceipt (docs/decisions.md, documents): the desk's cash
    sale recorded its payment with no document, so the member had no receipt and a refund of
    it was filed as a ReceiptRefund of no tax invoice. A pay-later sale takes nothing yet."""
    life.at(NOW)
    plan = create_plan(life.client, life.org, type="cash", priceInCents=8000)
    sale = {"userId": str(life.member.user.id), "planId": plan["id"], "method": "cash"}
    sold = life.call("POST", "/subscriptions", life.owner, 201, json=sale)["data"]
    session.expire_all()
    payment = session.scalar(
        select(PaymentTransaction).where(
            PaymentTransaction.subscription_id == uuid.UUID(sold["id"])
        )
    )
    assert (payment.amount_in_cents, payment.document_type) == (8000, "TaxInvoiceAndReceipt")
    assert payment.document_number is not None
    refund = {"amountInCents": 1000, "reason": "goodwill"}
    path = f"/payments/transactions/{payment.id}/refund"
    refunded = life.call("POST", path, life.owner, 201, json=refund)["data"]
    assert refunded["documentType"] == "TaxInvoiceAndReceiptRefund"
