"""verify-account (spec B 4.1) on a subscription that readiness does not list (paused,
cancelled): its answer's item was read from a readiness page of live plans, empty for it, and
the route answered 500 (the CLI crashed, exit 70) after asking the provider. The item is the
plan's whatever its status (readiness._page_filter's `only`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models.billing import SubscriptionStatus
from tests import factories
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import presale_with_checkout
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def headers(idp):
    def of(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {idp.token(user.identity_id, now=NOW)}"}

    return of


@pytest.fixture
def operator(session, idp):
    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={"platformRole": "admin"})
    return factories.user(session, identity_id="user_ops", email="ops@gymctl.example")


@pytest.mark.parametrize("status", [SubscriptionStatus.paused, SubscriptionStatus.cancelled])
def test_verify_account_of_a_plan_readiness_does_not_list_answers_its_item(
    client,
    session,
    gym,
    card_server,  # noqa: F811
    headers,
    operator,
    status,
):
    subscription, _ = presale_with_checkout(
        session, gym, card_server, opening=NOW + timedelta(days=20)
    )
    subscription.status = status
    session.commit()
    url = (
        f"/admin/organizations/{gym.organization.id}/billing-readiness/subscriptions/"
        f"{subscription.id}/verify-account"
    )

    answer = client.post(url, json={}, headers=headers(operator))

    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    item = answer.json["data"]["item"]
    assert (item["subscriptionId"], item["status"]) == (str(subscription.id), status.value)
    assert answer.json["outcome"] in ("verified", "already_verified", "not_verified")


def test_cli_verify_account_of_a_paused_plan_answers(
    committed_pg,
    card_server,  # noqa: F811
    monkeypatch,
):
    """The command line door: a crash exits 70; a refusal 1, an answer 0."""
    from sqlalchemy.orm import sessionmaker
    from typer.testing import CliRunner

    from gymctl.cli.billing import app as billing_app
    from gymctl.db import get_engine
    from tests.billing import factories as bf
    from tests.billing.cards import connect_card_provider
    from tests.billing.factories import TEST_KEY

    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_CARD_PROVIDER_URL", card_server.url)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW)
        subscription, _ = presale_with_checkout(
            session, gym, card_server, opening=NOW + timedelta(days=20)
        )
        subscription.status = SubscriptionStatus.paused
        session.commit()

    result = CliRunner().invoke(
        billing_app,
        [
            "verify-account", gym.organization.slug, str(subscription.id),
            "--operator", str(gym.owner.id), "--json",
        ],
    )  # fmt: skip

    assert result.exit_code == 0, (result.exception, result.output)
