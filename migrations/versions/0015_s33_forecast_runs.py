"""forecast_runs: billing forecasts asked for over HTTP, queued and run by the daemons (a
large gym's forecast takes longer than a request may), read back by the admin screen

Revision ID: 0015_s33_forecast_runs
Revises: 0014_s30_bridge_account_once
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015_s33_forecast_runs"
down_revision = "0014_s30_bridge_account_once"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "forecast_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("requested_by", sa.Uuid(), nullable=True),
        sa.Column("parameters", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("reached", sa.DateTime(timezone=True), nullable=True),
        sa.Column("report", JSON, nullable=True),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_forecast_runs_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["requested_by"],
            ["users.id"],
            name=op.f("fk_forecast_runs_requested_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forecast_runs")),
    )
    op.create_index(
        "ix_forecast_runs_organization_created", "forecast_runs", ["organization_id", "created_at"]
    )
    op.create_index("ix_forecast_runs_status_created", "forecast_runs", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_forecast_runs_status_created", table_name="forecast_runs")
    op.drop_index("ix_forecast_runs_organization_created", table_name="forecast_runs")
    op.drop_table("forecast_runs")
