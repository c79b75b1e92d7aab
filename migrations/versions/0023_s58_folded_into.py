"""users: folded_into_id, the row a retired row's person goes on as (access.folding), so an
erasure reaches what a link left on the retired rows (the gym's ended membership with its
national id, the gym's profile with the name its desk typed). Rows folded before this revision
are marked by 0026_s59_folded_into_backfill, from the audit trail's user.linked rows.

Revision ID: 0023_s58_folded_into
Revises: 0022_s51_page_read_back
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_s58_folded_into"
down_revision = "0022_s51_page_read_back"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("folded_into_id", sa.Uuid(), nullable=True))
    op.create_index("ix_users_folded_into_id", "users", ["folded_into_id"])


def downgrade() -> None:
    op.drop_index("ix_users_folded_into_id", table_name="users")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("folded_into_id")
