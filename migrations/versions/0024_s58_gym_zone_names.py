"""billing_settings.timezone: the tz database's old names PostgreSQL reads as abbreviations
(CET, EET, MET, WET: a fixed offset with no summer time in AT TIME ZONE, the zone with its
summer time in Python) become the place they stand for, as the tz database links them today;
a debt's grace ended an hour apart on the two engines all summer. The settings refuse them
from now on (gymctl.billing.org_settings.LEGACY_ZONES).

Revision ID: 0024_s58_gym_zone_names
Revises: 0023_s58_folded_into
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_s58_gym_zone_names"
down_revision = "0023_s58_folded_into"
branch_labels = None
depends_on = None

# As gymctl.billing.org_settings.LEGACY_ZONES at this revision.
LEGACY_ZONES = {
    "CET": "Europe/Brussels",
    "EET": "Europe/Athens",
    "MET": "Europe/Brussels",
    "WET": "Europe/Lisbon",
}


def upgrade() -> None:
    settings = sa.table("billing_settings", sa.column("timezone", sa.String()))
    bind = op.get_bind()
    for legacy, place in LEGACY_ZONES.items():
        bind.execute(settings.update().where(settings.c.timezone == legacy).values(timezone=place))


def downgrade() -> None:
    """The names stay the places' (which of the old names a gym had is not kept)."""
