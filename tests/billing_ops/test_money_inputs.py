"""Money comes in as strict integer cents in a currency the provider takes and the gym sells
in; anything else is refused before an attempt is stored (issue 19, defect 10)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from gymctl.models import PaymentTransaction
from gymctl.models.billing import PlanType
from gymctl.providers.card_http import CHARGE
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import card_of, paid_charge
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)


def _rows(session):
    session.expire_all()
    return session.scalar(select(func.count()).select_from(PaymentTransaction))


def _desk(gym, **overrides):
    return {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": str(gym.member.id),
        "amountInCents": 3000,
        "currency": "ILS",
        "description": "towel",
        **overrides,
    }


@pytest.mark.parametrize(
    ("currency", "status", "code"),
    [("JPY", 422, "currency_not_supported"), ("USD", 409, "currency_mismatch")],
)
def test_a_desk_charge_in_a_currency_the_provider_or_gym_does_not_take_stores_nothing(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
    currency,
    status,
    code,
):
    card_of(session, gym, card_server)
    bf.make_plan(session, gym.organization, PlanType.card)  # the gym sells in ILS
    session.commit()
    answer = client.post(
        f"/organizations/{gym.organization.id}/payments/desk-charges",
        json=_desk(gym, currency=currency),
        headers=headers(gym.owner),
    )
    assert (answer.status_code, answer.json["code"]) == (status, code)
    assert _rows(session) == 0
    assert card_server.requests(CHARGE) == 0


@pytest.mark.parametrize("amount", [True, "100", 100.0, 12.5])
def test_amounts_are_strict_integer_cents_on_every_money_route(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
    amount,
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    base = f"/organizations/{gym.organization.id}/payments"
    bodies = {
        f"{base}/desk-charges": _desk(gym, amountInCents=amount),
        f"{base}/transactions/{sale.id}/refund": {"amountInCents": amount, "reason": "x"},
        f"{base}/transactions/{sale.id}/credit-notes": {
            "idempotencyKey": str(uuid.uuid4()),
            "amountInCents": amount,
            "cashReturned": True,
        },
    }
    for url, body in bodies.items():
        answer = client.post(url, json=body, headers=headers(gym.owner))
        assert (answer.status_code, answer.json["code"]) == (400, "invalid_body"), url
    assert _rows(session) == 1  # the sale alone
