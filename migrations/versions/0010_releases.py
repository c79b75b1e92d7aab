"""branded apps, push registrations, release requests, candidates, approvals, evidence, operations

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

# Spec A 2.14: a release candidate's snapshot is never rewritten, evidence is append-only, and a
# branded app's identity (application IDs, link slug, organization) is locked (2.12). The
# database refuses such an UPDATE itself, whatever code runs against it.
IMMUTABLE = {
    "release_candidates": "release_candidate_immutable",
    "release_evidence": "release_evidence_append_only",
}
IDENTITY = ("organization_id", "link_slug", "apple_bundle_id", "android_package")
# Tables looked up by organization (the models' `index=True` on organization_id).
ORGANIZATION_INDEXED = (
    "push_registrations",
    "release_candidates",
    "release_approvals",
    "release_operations",
    "release_evidence",
)


def _cascade(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    """Every foreign key of this revision: to `target`.id, named by the metadata convention,
    deleted with its parent."""
    return sa.ForeignKeyConstraint(
        [column],
        [f"{target}.id"],
        name=op.f(f"fk_{table}_{column}_{target}"),
        ondelete="CASCADE",
    )


def _create_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION gymctl_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'restrict_violation'; END $$"
        )
        for table, message in IMMUTABLE.items():
            op.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION gymctl_refuse_update('{message}')"
            )
        changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in IDENTITY)
        op.execute(
            "CREATE TRIGGER organization_branded_apps_identity_lock BEFORE UPDATE ON "
            f"organization_branded_apps FOR EACH ROW WHEN ({changed}) "
            "EXECUTE FUNCTION gymctl_refuse_update('branded_app_identity_locked')"
        )
        return
    for table, message in IMMUTABLE.items():
        op.execute(
            f"CREATE TRIGGER {table}_immutable BEFORE UPDATE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in IDENTITY)
    op.execute(
        "CREATE TRIGGER organization_branded_apps_identity_lock BEFORE UPDATE ON "
        f"organization_branded_apps WHEN {changed} "
        "BEGIN SELECT RAISE(ABORT, 'branded_app_identity_locked'); END"
    )


def upgrade() -> None:
    op.create_table(
        "organization_branded_apps",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("link_slug", sa.String(length=40), nullable=False),
        sa.Column("apple_bundle_id", sa.String(length=155), nullable=False),
        sa.Column("android_package", sa.String(length=150), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("config_revision", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("organization_branded_apps", "organization_id", "organizations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organization_branded_apps")),
        sa.UniqueConstraint(
            "android_package", name=op.f("uq_organization_branded_apps_android_package")
        ),
        sa.UniqueConstraint(
            "apple_bundle_id", name=op.f("uq_organization_branded_apps_apple_bundle_id")
        ),
        sa.UniqueConstraint("link_slug", name=op.f("uq_organization_branded_apps_link_slug")),
        sa.UniqueConstraint(
            "organization_id", name=op.f("uq_organization_branded_apps_organization_id")
        ),
    )
    op.create_table(
        "organization_feature_switches",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _cascade("organization_feature_switches", "organization_id", "organizations"),
        sa.PrimaryKeyConstraint(
            "organization_id", "name", name=op.f("pk_organization_feature_switches")
        ),
    )
    op.create_table(
        "push_registrations",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("branded_app_id", sa.Uuid(), nullable=True),
        sa.Column("app_id", sa.String(length=155), nullable=False),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("token", sa.String(length=4096), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_reason", sa.String(length=32), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("push_registrations", "branded_app_id", "organization_branded_apps"),
        _cascade("push_registrations", "organization_id", "organizations"),
        _cascade("push_registrations", "user_id", "users"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_registrations")),
        sa.UniqueConstraint(
            "app_id", "token_sha256", name=op.f("uq_push_registrations_app_id_token_sha256")
        ),
    )
    op.create_table(
        "release_requests",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("branded_app_id", sa.Uuid(), nullable=False),
        sa.Column("submission", JSON, nullable=True),
        sa.Column("submission_revision", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("release_requests", "branded_app_id", "organization_branded_apps"),
        _cascade("release_requests", "organization_id", "organizations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_requests")),
        sa.UniqueConstraint("organization_id", name=op.f("uq_release_requests_organization_id")),
    )
    op.create_table(
        "release_business_checks",
        sa.Column("release_request_id", sa.Uuid(), nullable=False),
        sa.Column("target", sa.String(length=16), nullable=False),
        sa.Column("generation", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("check", sa.String(length=48), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_by_user_id", sa.Uuid(), nullable=True),
        _cascade("release_business_checks", "release_request_id", "release_requests"),
        sa.PrimaryKeyConstraint(
            "release_request_id",
            "target",
            "generation",
            "check",
            name=op.f("pk_release_business_checks"),
        ),
    )
    op.create_table(
        "release_candidates",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("release_request_id", sa.Uuid(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("snapshot", JSON, nullable=False),
        sa.Column("snapshot_sha256", sa.String(length=64), nullable=False),
        sa.Column("brand_schema_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("release_candidates", "organization_id", "organizations"),
        _cascade("release_candidates", "release_request_id", "release_requests"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_candidates")),
        sa.UniqueConstraint(
            "release_request_id",
            "generation",
            name=op.f("uq_release_candidates_release_request_id_generation"),
        ),
        sa.UniqueConstraint("snapshot_sha256", name=op.f("uq_release_candidates_snapshot_sha256")),
    )
    op.create_table(
        "release_approvals",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("release_request_id", sa.Uuid(), nullable=False),
        sa.Column("candidate_id", sa.Uuid(), nullable=True),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("snapshot_sha256", sa.String(length=64), nullable=True),
        sa.Column("approved_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("release_approvals", "candidate_id", "release_candidates"),
        _cascade("release_approvals", "organization_id", "organizations"),
        _cascade("release_approvals", "release_request_id", "release_requests"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_approvals")),
    )
    op.create_table(
        "release_candidate_supersessions",
        sa.Column("candidate_id", sa.Uuid(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=False),
        _cascade("release_candidate_supersessions", "candidate_id", "release_candidates"),
        sa.PrimaryKeyConstraint("candidate_id", name=op.f("pk_release_candidate_supersessions")),
    )
    op.create_table(
        "release_operations",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("candidate_id", sa.Uuid(), nullable=False),
        sa.Column("snapshot_sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("nonce_sha256", sa.String(length=64), nullable=False),
        sa.Column("nonce_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ci", JSON, nullable=False),
        sa.Column("access_sha256", sa.String(length=64), nullable=True),
        sa.Column("access_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("release_operations", "candidate_id", "release_candidates"),
        _cascade("release_operations", "organization_id", "organizations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_operations")),
    )
    op.create_table(
        "release_platform_states",
        sa.Column("release_request_id", sa.Uuid(), nullable=False),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("candidate_id", sa.Uuid(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _cascade("release_platform_states", "candidate_id", "release_candidates"),
        _cascade("release_platform_states", "release_request_id", "release_requests"),
        sa.PrimaryKeyConstraint(
            "release_request_id", "platform", name=op.f("pk_release_platform_states")
        ),
    )
    op.create_table(
        "release_evidence",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("candidate_id", sa.Uuid(), nullable=False),
        sa.Column("operation_id", sa.Uuid(), nullable=True),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("result", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", JSON, nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _cascade("release_evidence", "candidate_id", "release_candidates"),
        _cascade("release_evidence", "operation_id", "release_operations"),
        _cascade("release_evidence", "organization_id", "organizations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_evidence")),
    )
    for table in ORGANIZATION_INDEXED:
        op.create_index(
            op.f(f"ix_{table}_organization_id"), table, ["organization_id"], unique=False
        )
    _create_triggers()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP TRIGGER organization_branded_apps_identity_lock ON organization_branded_apps"
        )
        for table in IMMUTABLE:
            op.execute(f"DROP TRIGGER {table}_immutable ON {table}")
        op.execute("DROP FUNCTION gymctl_refuse_update()")
    for table in (
        "release_evidence",
        "release_platform_states",
        "release_operations",
        "release_candidate_supersessions",
        "release_approvals",
        "release_candidates",
        "release_business_checks",
        "release_requests",
        "push_registrations",
        "organization_feature_switches",
        "organization_branded_apps",
    ):
        op.drop_table(table)
