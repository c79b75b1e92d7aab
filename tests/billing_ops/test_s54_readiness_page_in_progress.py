"""A purchase whose hosted page is still open (scheduled, no opening day) is not a presale (spec B
2.1: "a presale is a subscription in status scheduled with an opening day"): its first charge is
the page the member is on. Readiness read it as a presale missing its first charge (blocked:
first_charge_missing, no_saved_card, account_evidence_missing) and sent the operator to
repair-schedule, which gave it a next charge at its creation: the collector would then charge the
price while the member paid the page too. Over the platform admin's routes, on both engines."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import pytest

from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus
from tests.access.conftest import gym, platform_admin, snapshot  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    count,
    create_plan,
    org,
    purchase,
    webhook,
)

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

IN_PROGRESS = {
    "code": "checkout_in_progress",
    "severity": "info",
    "nextAction": "member_completes_checkout",
}


def _readiness(client, org, admin):
    answer = client.get(f"/admin/organizations/{org.id}/billing-readiness", headers=admin.headers)
    assert answer.status_code == 200, answer.json
    return answer.json


def _bought(client, org):
    answer = purchase(client, org, create_plan(client, org))  # no opening day: the page charges
    assert answer.status_code == 201, answer.json
    return answer.json["data"]


def test_a_purchase_page_in_progress_is_listed_as_a_checkout_in_progress_and_blocks_nothing(
    client, org, card_server, session, platform_admin
):
    bought = _bought(client, org)
    subscription_id = bought["subscription"]["id"]

    report = _readiness(client, org, platform_admin)

    assert report["checkState"] == "no_known_blockers", report["items"]
    [item] = report["items"]
    assert item["subscriptionId"] == subscription_id
    assert item["status"] == "scheduled"
    assert item["issues"] == [IN_PROGRESS]  # no presale issue, no card to ask for yet
    assert item["nextChargeAt"] is None
    assert item["expectedFirstCharge"] is None
    assert report["pageTotals"]["ILS"]["subscriptions"] == 1  # listed like any live plan

    # Paid on its page, it is an ordinary active plan: the marker goes with the page.
    card_server.complete_page(bought["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought["checkout"]["pageId"]).status_code == 200
    [paid] = _readiness(client, org, platform_admin)["items"]
    assert paid["status"] == "active"
    assert paid["issues"] == []


def test_repair_schedule_refuses_a_purchase_page_in_progress_and_changes_nothing(
    client, org, card_server, session, platform_admin
):
    bought = _bought(client, org)
    subscription_id = bought["subscription"]["id"]
    url = (
        f"/admin/organizations/{org.id}/billing-readiness/subscriptions/"
        f"{subscription_id}/repair-schedule"
    )
    before = snapshot(session)

    refused = client.post(url, json={"expectedNextChargeAt": None}, headers=platform_admin.headers)

    assert (refused.status_code, refused.json["code"]) == (409, "billing_first_charge_unresolved")
    assert snapshot(session) == before  # no next charge, no audit row

    # The member pays the page they were on: charged once, by the page.
    card_server.complete_page(bought["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought["checkout"]["pageId"]).status_code == 200
    charged = count(
        session, PaymentTransaction, PaymentTransaction.status == TransactionStatus.completed
    )
    assert charged == 1
