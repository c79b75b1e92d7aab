"""movements: movement library, workouts that reference it, video reports, search quota, jobs

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "movement_jobs",
        sa.Column("queue", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "result",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_user_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movement_jobs")),
    )
    op.create_index(
        "ix_movement_jobs_queue_created", "movement_jobs", ["queue", "created_at"], unique=False
    )
    op.create_index(
        "ix_movement_jobs_ready",
        "movement_jobs",
        ["run_after"],
        unique=False,
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )
    op.create_table(
        "video_search_quota",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("units_used", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("day", name=op.f("pk_video_search_quota")),
    )
    op.create_table(
        "movements",
        sa.Column("organization_id", sa.Uuid(), nullable=True),
        sa.Column("slug", sa.String(length=160), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=True),
        sa.Column("movement_pattern", sa.String(length=64), nullable=True),
        sa.Column("equipment", sa.String(length=64), nullable=True),
        sa.Column("primary_muscles", sa.JSON(), nullable=False),
        sa.Column("instructions", sa.JSON(), nullable=False),
        sa.Column("thumbnail_url", sa.String(length=1024), nullable=True),
        sa.Column("video_url", sa.String(length=1024), nullable=True),
        sa.Column("video_status", sa.String(length=16), nullable=False),
        sa.Column("video_candidates", sa.JSON(), nullable=False),
        sa.Column("video_rejected_ids", sa.JSON(), nullable=False),
        sa.Column("cues", sa.JSON(), nullable=False),
        sa.Column("common_faults", sa.JSON(), nullable=False),
        sa.Column("scaling_options", sa.JSON(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("embedding_model", sa.String(length=128), nullable=True),
        sa.Column("merged_into_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["merged_into_id"],
            ["movements.id"],
            name=op.f("fk_movements_merged_into_id_movements"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_movements_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movements")),
    )
    op.create_index(
        "uq_movements_canonical_slug",
        "movements",
        ["slug"],
        unique=True,
        postgresql_where=sa.text("organization_id IS NULL"),
        sqlite_where=sa.text("organization_id IS NULL"),
    )
    op.create_index(
        "uq_movements_organization_slug",
        "movements",
        ["organization_id", "slug"],
        unique=True,
        postgresql_where=sa.text("organization_id IS NOT NULL"),
        sqlite_where=sa.text("organization_id IS NOT NULL"),
    )
    op.create_table(
        "workouts",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_workouts_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workouts")),
    )
    op.create_index(
        op.f("ix_workouts_organization_id"), "workouts", ["organization_id"], unique=False
    )
    op.create_table(
        "movement_video_reports",
        sa.Column("movement_id", sa.Uuid(), nullable=False),
        sa.Column("video_url", sa.String(length=1024), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("negative", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["movement_id"],
            ["movements.id"],
            name=op.f("fk_movement_video_reports_movement_id_movements"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_movement_video_reports_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_movement_video_reports_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movement_video_reports")),
        sa.UniqueConstraint(
            "movement_id",
            "video_url",
            "user_id",
            name=op.f("uq_movement_video_reports_movement_id_video_url_user_id"),
        ),
    )
    op.create_index(
        op.f("ix_movement_video_reports_movement_id"),
        "movement_video_reports",
        ["movement_id"],
        unique=False,
    )
    op.create_table(
        "workout_movements",
        sa.Column("workout_id", sa.Uuid(), nullable=False),
        sa.Column("movement_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("prescription", sa.String(length=200), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["movement_id"],
            ["movements.id"],
            name=op.f("fk_workout_movements_movement_id_movements"),
        ),
        sa.ForeignKeyConstraint(
            ["workout_id"],
            ["workouts.id"],
            name=op.f("fk_workout_movements_workout_id_workouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workout_movements")),
    )
    op.create_index(
        op.f("ix_workout_movements_movement_id"), "workout_movements", ["movement_id"], unique=False
    )
    op.create_index(
        op.f("ix_workout_movements_workout_id"), "workout_movements", ["workout_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_workout_movements_workout_id"), table_name="workout_movements")
    op.drop_index(op.f("ix_workout_movements_movement_id"), table_name="workout_movements")
    op.drop_table("workout_movements")
    op.drop_index(
        op.f("ix_movement_video_reports_movement_id"), table_name="movement_video_reports"
    )
    op.drop_table("movement_video_reports")
    op.drop_index(op.f("ix_workouts_organization_id"), table_name="workouts")
    op.drop_table("workouts")
    op.drop_index(
        "uq_movements_organization_slug",
        table_name="movements",
        postgresql_where=sa.text("organization_id IS NOT NULL"),
        sqlite_where=sa.text("organization_id IS NOT NULL"),
    )
    op.drop_index(
        "uq_movements_canonical_slug",
        table_name="movements",
        postgresql_where=sa.text("organization_id IS NULL"),
        sqlite_where=sa.text("organization_id IS NULL"),
    )
    op.drop_table("movements")
    op.drop_table("video_search_quota")
    op.drop_index(
        "ix_movement_jobs_ready",
        table_name="movement_jobs",
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )
    op.drop_index("ix_movement_jobs_queue_created", table_name="movement_jobs")
    op.drop_table("movement_jobs")
