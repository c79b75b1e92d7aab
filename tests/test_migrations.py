"""The migration journal is authoritative: it upgrades from empty and matches the models."""

from __future__ import annotations

import pytest

from gymctl import migrate


@pytest.mark.embedded
def test_upgrade_from_empty_reaches_head_and_alembic_check_finds_no_drift(engine):
    url = engine.url.render_as_string(hide_password=False)
    assert migrate.current(url) == migrate.head()
    migrate.check(url)


def test_history_lists_the_foundation_revision():
    revisions = [rev for rev, _down, _doc in migrate.history()]
    assert "0001" in revisions
