"""`gymctl billing verify-account --low-profile-id` as an operator runs it, on both engines: a page
id for a checkout that kept another deal reference was silently set aside (the kept one was read
back); now it is refused, naming both, and nothing changes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from gymctl.models import AuditLog, PaymentMethod
from gymctl.providers.card_http import GET_PAGE
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_KEY
from tests.billing_ops.helpers import presale_with_checkout
from tests.conftest import NOW
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


@pytest.fixture
def presale(home_env, committed_database, card_server):  # noqa: F811
    """A committed presale whose token-only checkout kept its page id, and a CLI's environment."""
    home_env |= {
        "GYMCTL_DATABASE_URL": committed_database,
        "GYMCTL_CARD_PROVIDER_URL": card_server.url,
        "GYMCTL_BILLING_ENCRYPTION_KEY": TEST_KEY,
    }
    factory = sessionmaker(bind=get_engine(committed_database), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        subscription, checkout = presale_with_checkout(
            session, gym, card_server, opening=NOW + timedelta(days=20)
        )
        session.commit()
    org, operator = gym.organization.slug, str(gym.owner.id)
    args = ("billing", "verify-account", org, str(subscription.id), "--operator", operator)
    return home_env, factory, args, subscription, checkout


def _state(factory, subscription) -> tuple:
    with factory() as session:
        method = session.get(PaymentMethod, subscription.payment_method_id)
        audits = session.scalar(
            select(func.count())
            .select_from(AuditLog)
            .where(AuditLog.target_id == str(subscription.id))
        )
        return method.payload_ciphertext, audits


def test_a_page_id_other_than_the_checkouts_is_refused_naming_both(presale, card_server):  # noqa: F811
    env, factory, args, subscription, checkout = presale
    before, reads = _state(factory, subscription), card_server.requests(GET_PAGE)

    other = gymctl(env, *args, "--low-profile-id", "some-other-page", "--json", check=False)

    assert other.returncode == 1, other.stdout + other.stderr
    refused = json.loads(other.stdout)
    assert refused["code"] == "billing_evidence_mismatch"
    assert (refused["field"], refused["given"], refused["kept"]) == (
        "lowProfileId",
        "some-other-page",
        checkout.page_id,
    )
    table = gymctl(env, *args, "--low-profile-id", "some-other-page", check=False)
    assert table.returncode == 1
    assert "some-other-page" in table.stderr
    assert checkout.page_id in table.stderr
    assert _state(factory, subscription) == before  # no payload, no audit row
    assert card_server.requests(GET_PAGE) == reads  # nothing read back

    same = gymctl(env, *args, "--low-profile-id", checkout.page_id, "--json")
    assert json.loads(same.stdout)["outcome"] == "already_verified"  # the same deal: no conflict
