"""Fixtures of the billing operator tools: a gym on the card provider (the fake provider on
loopback), a member's saved card, a paid card charge, the local document provider, and `org`,
the access tests' gym selling a card plan through hosted pages."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.providers.documents import LocalDocumentProvider
from tests.access.conftest import gym as access_gym  # noqa: F401 (fixture)
from tests.billing import factories as bf
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.conftest import NOW


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


@pytest.fixture
def provider(card_server):  # noqa: F811
    return card_server.provider()


@pytest.fixture
def documents() -> LocalDocumentProvider:
    return LocalDocumentProvider()


@pytest.fixture
def org(access_gym, client, card_server):  # noqa: F811
    from tests.billing.test_checkout_webhooks import org as make_org

    return make_org.__wrapped__(access_gym, client, card_server)


@pytest.fixture
def charged_elsewhere(client, clock, idp, session, gym, card_server):  # noqa: F811
    """contradictions.desk_charged_elsewhere: a desk charge the provider took on another
    terminal than its attempt names (its tests import the fake provider's `app`)."""
    from tests.billing_ops.contradictions import desk_charged_elsewhere

    return desk_charged_elsewhere(client, clock, idp, session, gym, card_server)
