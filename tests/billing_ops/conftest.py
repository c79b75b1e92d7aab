"""Fixtures of the billing operator tools: a gym on the card provider (the fake provider on
loopback), a member's saved card, a paid card charge, and the local document provider."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.providers.documents import LocalDocumentProvider
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
