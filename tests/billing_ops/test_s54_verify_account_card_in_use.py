"""verify-account reads back the deal of the card in use (spec B 4.1: "the deal reference comes
from the subscription's token-only checkout row", compared with the saved card's token): the
completed, not superseded token-only checkout, newest first. It took the newest token-only
checkout of any status, so a replacement page the member left open, or that failed or was
abandoned, was read instead (not_verified, deal_has_no_token, though the card in use was good),
and a card with no token-only page of its own was "verified" against a page that saved nothing.
Over the platform admin's routes, on both engines."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.billing import checkout
from gymctl.models import BillingSettings, Checkout, Role
from gymctl.models.billing import CheckoutStatus
from gymctl.providers.card_http import GET_PAGE
from tests.access.conftest import gym, platform_admin, snapshot  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, INVALID
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.billing_ops.helpers import audit_rows
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _paid(client, org, card_server) -> dict:
    """A card plan bought and paid on its page (a presale's token-only page when the gym has
    an opening day ahead, else the charging page): its card is the one in use."""
    bought = purchase(client, org, create_plan(client, org))
    assert bought.status_code == 201, bought.json
    page = bought.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page, APPROVE)
    assert webhook(client, org, page).status_code == 200
    return bought.json["data"]


def _replacement_left(client, org, session, subscription_id) -> Checkout:
    """The member opens a card-replacement page and does not finish it, a day later (the
    tests' clock stands still: the newest page by created_at, as in real life)."""
    opened = client.post(
        f"/organizations/{org.id}/subscriptions/{subscription_id}/card-replacement",
        json={},
        headers=org[Role.member].headers,
    )
    assert opened.status_code == 201, opened.json
    row = session.get(Checkout, uuid.UUID(opened.json["data"]["checkout"]["id"]))
    row.created_at += timedelta(days=1)
    row.expires_at += timedelta(days=1)
    session.commit()
    return row


def _verify(client, org, admin, subscription_id):
    return client.post(
        f"/admin/organizations/{org.id}/billing-readiness/subscriptions/"
        f"{subscription_id}/verify-account",
        json={},
        headers=admin.headers,
    )


@pytest.mark.parametrize("fate", ["open", "failed", "abandoned"])
def test_verify_account_reads_the_page_that_saved_the_card_in_use_not_a_newer_unfinished_one(
    client, org, card_server, session, session_factory, platform_admin, fate
):
    session.add(BillingSettings(organization_id=org.id, opening_day=NOW + timedelta(days=10)))
    session.commit()
    bought = _paid(client, org, card_server)  # a presale: its card saved on its token-only page
    subscription_id = bought["subscription"]["id"]
    replacement = _replacement_left(client, org, session, subscription_id)
    if fate == "failed":
        card_server.complete_page(replacement.page_id, INVALID)
        assert webhook(client, org, replacement.page_id).json["outcome"] == "payment.failed"
    elif fate == "abandoned":
        checkout.abandoned_sweep(
            session_factory,
            card_server.provider(),
            now=replacement.expires_at + timedelta(minutes=1),
            cipher=TEST_CIPHER,
        )
    session.expire_all()
    assert session.get(Checkout, replacement.id).status == CheckoutStatus(fate)

    answer = _verify(client, org, platform_admin, subscription_id)

    assert answer.status_code == 200, answer.json
    # The gym's terminal went live when the tests' clock started: the card, saved inside its
    # 45 minutes, is proven now, on the deal of the page that saved it.
    assert answer.json["outcome"] == "verified", answer.json
    assert answer.json["data"]["item"]["card"]["accountCheck"] == "verified_on_current_terminal"
    [audit] = audit_rows(session, "billing.account_verification")
    assert audit.data["deal"] == bought["checkout"]["pageId"]


def test_a_card_with_no_completed_token_only_page_is_evidence_missing_and_changes_nothing(
    client, org, card_server, session, platform_admin
):
    """A plan bought on its charging page saved its card there; the only token-only checkout
    is a replacement page left open, which saved no card: no deal of the card in use to read."""
    bought = _paid(client, org, card_server)
    subscription_id = bought["subscription"]["id"]
    _replacement_left(client, org, session, subscription_id)
    before, reads = snapshot(session), card_server.requests(GET_PAGE)

    refused = _verify(client, org, platform_admin, subscription_id)

    assert (refused.status_code, refused.json["code"]) == (409, "billing_account_evidence_missing")
    assert snapshot(session) == before  # no payload written, no audit row
    assert card_server.requests(GET_PAGE) == reads  # nothing read back
    # The report agrees: the card in use has no token-only checkout.
    report = client.get(
        f"/admin/organizations/{org.id}/billing-readiness", headers=platform_admin.headers
    ).json
    [item] = report["items"]
    assert item["card"]["tokenOnlyCheckout"] is False
