"""The desk charge's own route (GET .../payments/desk-charges/:id, and its reconcile's answer)
offered only reconcile for a contradicted charge, while inspect showed the door that settles
it (`actions.settleContradiction`). Both now build the hint from the same code
(`resolution.settles_contradiction`): a contradiction the door takes, on a merchant account
still connected."""

from __future__ import annotations

import pytest

from gymctl.models import PaymentProviderConfig
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER, desk_contradiction, settle

pytestmark = pytest.mark.embedded  # the demo gym charges at the desk


def test_a_desk_charges_contradiction_offers_the_settle_door_on_its_own_route(
    client, clock, idp, session, session_factory, gym, card_server, provider, documents
):
    transaction_id = desk_contradiction(
        session, session_factory, gym, card_server, provider, documents
    )
    clock.set(LATER)
    owner = {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=LATER)}"}
    url = f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}"

    def shown() -> tuple:
        answer = client.get(url, headers=owner)
        assert answer.status_code == 200, answer.json
        data = answer.json["data"]
        return data["state"], data["actions"]

    assert shown() == ("unresolved", {"reconcile": True, "settleContradiction": False})
    reconciled = client.post(f"{url}/reconcile", headers=owner).json["data"]
    assert (reconciled["outcome"], reconciled["actions"]) == (
        "contradiction",
        {"reconcile": True, "settleContradiction": True},
    )
    assert shown() == ("contradiction", {"reconcile": True, "settleContradiction": True})

    account = session.query(PaymentProviderConfig).one()
    kept = account.credentials_ciphertext
    account.credentials_ciphertext = None  # the merchant account that took it is gone
    session.commit()
    assert shown() == ("contradiction", {"reconcile": True, "settleContradiction": False})
    account.credentials_ciphertext = kept
    session.commit()

    settled = settle(client, gym, transaction_id, owner, "accept", 4500)
    assert settled.status_code == 200, settled.json
    assert shown() == ("charged", {"reconcile": False, "settleContradiction": False})
