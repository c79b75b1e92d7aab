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


def test_access_revision_upgrades_a_populated_database(tmp_path):
    """0002 adds NOT NULL columns with server defaults and marks already-linked logins proven."""
    from sqlalchemy import text

    from gymctl.db import get_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0001")
    with get_engine(url).begin() as connection:
        connection.execute(
            text(
                "INSERT INTO users (id, identity_id, email, created_at, updated_at) VALUES "
                "('00000000000000000000000000000001', 'user_old', 'old@example.test', "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00'),"
                "('00000000000000000000000000000002', NULL, 'gym@example.test', "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO organizations (id, name, slug, status, created_at) VALUES "
                "('00000000000000000000000000000003', 'Old Gym', 'old-gym', 'active', "
                "'2026-01-01 00:00:00')"
            )
        )
    migrate.upgrade(url)
    with get_engine(url).connect() as connection:
        users = connection.execute(
            text(
                "SELECT identity_id, email_verified_at IS NOT NULL, signup_origin FROM users "
                "ORDER BY id"
            )
        ).all()
        gym = connection.execute(text("SELECT tier, join_enabled FROM organizations")).one()
    assert users == [("user_old", 1, "self"), (None, 0, "self")]
    assert tuple(gym) == ("starter", 1)
