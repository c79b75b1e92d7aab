"""release snapshots and evidence refuse DELETE as well as UPDATE

Revision ID: 0011_h23
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0011_h23"
down_revision = "0011_h20a"
branch_labels = None
depends_on = None

# Spec A 2.14: a snapshot is never rewritten and evidence is append-only. 0010 refuses UPDATE;
# a deleted row is rewritten history too. Nothing in gymctl deletes these rows (organizations
# are soft-deleted), so a cascade reaching them is refused as well, on purpose.
APPEND_ONLY = {
    "release_candidates": "release_candidate_immutable",
    "release_evidence": "release_evidence_append_only",
}


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table, message in APPEND_ONLY.items():
        if postgresql:
            # gymctl_refuse_update (0010) raises its argument whatever the operation.
            op.execute(
                f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION gymctl_refuse_update('{message}')"
            )
        else:
            op.execute(
                f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
            )


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table in APPEND_ONLY:
        op.execute(f"DROP TRIGGER {table}_no_delete" + (f" ON {table}" if postgresql else ""))
