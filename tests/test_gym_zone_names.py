"""The tz database's old names CET, EET, MET and WET are no gym's zone: PostgreSQL's AT TIME
ZONE reads them as abbreviations (a fixed offset, no summer time) where Python reads the zone
with its summer time, and every debt's grace ended an hour apart on the two engines from spring
to autumn (gymctl.billing.days). The settings refuse them (422 timezone_invalid, nothing
changed), and migration 0024 moves a gym that had one to the place it stands for."""

from __future__ import annotations

import sqlite3

import pytest

from gymctl import migrate
from gymctl.billing import org_settings
from gymctl.errors import DomainError
from gymctl.models import BillingSettings
from tests.conftest import NOW


@pytest.mark.embedded
@pytest.mark.parametrize("legacy", ["CET", "EET", "MET", "WET"])
def test_the_settings_refuse_a_zone_name_postgresql_reads_as_an_abbreviation(session, legacy):
    from tests import factories

    gym = factories.organization(session)
    session.flush()
    with pytest.raises(DomainError) as refused:
        org_settings.update_settings(session, gym.id, timezone=legacy, actor_user_id=None, now=NOW)
    assert (refused.value.code, refused.value.status) == ("timezone_invalid", 422)
    assert session.get(BillingSettings, gym.id) is None
    assert "Europe/Brussels" in org_settings.gym_zones()


def test_the_revision_moves_a_gym_on_an_old_name_to_its_place(tmp_path):
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, "0023_s58_folded_into")
    zones = {"1" * 32: "CET", "2" * 32: "WET", "3" * 32: "Asia/Jerusalem", "4" * 32: "EET"}
    with sqlite3.connect(path) as connection:  # the rows only: no gym behind them
        connection.execute("PRAGMA foreign_keys = OFF")
        connection.executemany(
            "INSERT INTO billing_settings (organization_id, timezone) VALUES (?, ?)",
            list(zones.items()),
        )
    migrate.upgrade(url)
    with sqlite3.connect(path) as connection:
        moved = dict(connection.execute("SELECT organization_id, timezone FROM billing_settings"))
    assert moved == {
        "1" * 32: "Europe/Brussels",
        "2" * 32: "Europe/Lisbon",
        "3" * 32: "Asia/Jerusalem",
        "4" * 32: "Europe/Athens",
    }
