"""Fixtures of the billing tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.billing.fake_card_provider import FakeCardProvider


@pytest.fixture
def card_server(tmp_path: Path) -> Iterator[FakeCardProvider]:
    """The fake card provider on loopback: `.url`, `.provider()` (an HTTP client of it),
    `.inject(endpoint, fault)`, `.complete_page(page_id, card)`, `.charge_count(unique_id)`."""
    server = FakeCardProvider(tmp_path / "card-provider")
    yield server
    server.close()
    assert not server.errors, server.errors
