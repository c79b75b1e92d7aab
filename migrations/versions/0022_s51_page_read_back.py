"""checkouts: read_back_at and read_backs (when an abandoned page was last read back from the
card provider, and how many times since it was abandoned), indexed over the pages still read
back, so a page paid after the abandoned sweep whose webhook was lost is still recorded
(gymctl.billing.abandoned_pages). Pages abandoned in the last 8 days (the read-back window) are
read back from the first hour of the schedule; older ones are left as they were (never read).

Revision ID: 0022_s51_page_read_back
Revises: 0021_s48_identity_event_order
Create Date: 2026-12-01
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0022_s51_page_read_back"
down_revision = "0021_s48_identity_event_order"
branch_labels = None
depends_on = None

# As gymctl.models.billing.READ_BACK_WHERE at this revision.
READ_BACK_WHERE = "read_back_at IS NOT NULL"
WINDOW = timedelta(days=8)  # abandoned_pages.READ_BACK_SCHEDULE's span at this revision


def upgrade() -> None:
    # Plain ADD COLUMN on both engines (a server default fills the count): SQLite's batch mode
    # would copy the whole table to add them.
    op.add_column("checkouts", sa.Column("read_back_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "checkouts",
        sa.Column("read_backs", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.create_index(
        "ix_checkouts_read_back",
        "checkouts",
        ["status", "read_backs", "read_back_at"],
        postgresql_where=sa.text(READ_BACK_WHERE),
        sqlite_where=sa.text(READ_BACK_WHERE),
    )
    # The pages abandoned within the window before this revision: their first hourly read-back
    # is due at once (expires_at is within the sweep's 5 minutes of their abandonment).
    cutoff = datetime.now(UTC) - WINDOW
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":  # the models' UTCDateTime: naive UTC text on SQLite
        cutoff = cutoff.replace(tzinfo=None)
    checkouts = sa.table(
        "checkouts",
        sa.column("status", sa.String()),
        sa.column("expires_at", sa.DateTime(timezone=True)),
        sa.column("read_back_at", sa.DateTime(timezone=True)),
    )
    bind.execute(
        checkouts.update()
        .where(checkouts.c.status == "abandoned", checkouts.c.expires_at >= cutoff)
        .values(read_back_at=checkouts.c.expires_at)
    )


def downgrade() -> None:
    op.drop_index("ix_checkouts_read_back", table_name="checkouts")
    with op.batch_alter_table("checkouts") as batch:
        batch.drop_column("read_backs")
        batch.drop_column("read_back_at")
