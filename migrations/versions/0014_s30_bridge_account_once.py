"""bridge: one gym active per external account. A second gym connected with the same key (or
another key of the same account) wrote its members into the first gym's system and imported
that gym's roster as its own. A unique partial index holds the rule; connections already
sharing an account keep the first connected, and the later ones err with a message naming
the cause (their queued ops stay; the owner disconnects and connects the right account)

Revision ID: 0014_s30_bridge_account_once
Revises: 0013_s30_subscriptions_by_user
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_s30_bridge_account_once"
down_revision = "0013_s30_subscriptions_by_user"
branch_labels = None
depends_on = None

ACTIVE_ACCOUNT = "status = 'active' AND external_account_id IS NOT NULL"
MESSAGE = (
    "that external account is connected to another gym: disconnect it there first "
    "(found on upgrade)"
)
# An active connection sharing its account with one connected earlier (ties: the lower id).
LATER_SHARERS = """
UPDATE integration_connections SET status = 'error', last_error = :message
WHERE status = 'active' AND external_account_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM integration_connections AS earlier
    WHERE earlier.status = 'active'
      AND earlier.provider = integration_connections.provider
      AND earlier.external_account_id = integration_connections.external_account_id
      AND (
        COALESCE(earlier.connected_at, earlier.created_at)
            < COALESCE(integration_connections.connected_at, integration_connections.created_at)
        OR (
          COALESCE(earlier.connected_at, earlier.created_at)
              = COALESCE(integration_connections.connected_at, integration_connections.created_at)
          AND earlier.id < integration_connections.id
        )
      )
)
"""


def upgrade() -> None:
    op.execute(sa.text(LATER_SHARERS).bindparams(message=MESSAGE))
    op.create_index(
        "uq_integration_connections_active_account",
        "integration_connections",
        ["provider", "external_account_id"],
        unique=True,
        postgresql_where=sa.text(ACTIVE_ACCOUNT),
        sqlite_where=sa.text(ACTIVE_ACCOUNT),
    )


def downgrade() -> None:
    op.drop_index("uq_integration_connections_active_account", table_name="integration_connections")
