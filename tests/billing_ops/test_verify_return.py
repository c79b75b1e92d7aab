"""Recovery of a missed hosted-checkout return (spec B 4.3: POST .../payments/verify-return):
the member's own page is read back and applied once, like its webhook; a replay changes
nothing; a page still open, an unknown page or someone else's page is refused with nothing
changed."""

from __future__ import annotations

import pytest

from gymctl.models import PaymentTransaction, Role
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixture: the gym of the access tests)
from tests.billing.cards import APPROVE
from tests.billing.test_checkout_webhooks import app, count, create_plan, org, purchase  # noqa: F401

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _verify_return(client, org, page_id, role=Role.member):  # noqa: F811
    return client.post(
        f"/organizations/{org.id}/payments/verify-return",
        json={"pageId": page_id},
        headers=org[role].headers,
    )


def test_a_replayed_return_applies_once(client, org, card_server, session):  # noqa: F811
    page_id = purchase(client, org, create_plan(client, org)).json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)

    first = _verify_return(client, org, page_id)
    again = _verify_return(client, org, page_id)

    assert first.json["data"]["outcome"] == "completed"
    assert again.status_code == 200
    assert again.json["data"]["outcome"] == "already_completed"
    assert count(session, PaymentTransaction) == 1


def test_a_page_still_open_is_503_and_changes_nothing(client, org, session):  # noqa: F811
    page_id = purchase(client, org, create_plan(client, org)).json["data"]["checkout"]["pageId"]
    before = snapshot(session)
    answer = _verify_return(client, org, page_id)
    assert (answer.status_code, answer.json["code"]) == (503, "deal_not_finalized")
    assert snapshot(session) == before


def test_someone_elses_or_an_unknown_page_is_refused(client, org, card_server, session):  # noqa: F811
    page_id = purchase(client, org, create_plan(client, org)).json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    before = snapshot(session)
    theirs = _verify_return(client, org, page_id, role=Role.coach)
    assert (theirs.status_code, theirs.json["code"]) == (404, "checkout_not_found")
    unknown = _verify_return(client, org, "00000000-0000-0000-0000-000000000000")
    assert (unknown.status_code, unknown.json["code"]) == (404, "checkout_not_found")
    assert snapshot(session) == before
