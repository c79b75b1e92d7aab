"""tenant isolation: national ids move from the shared user row to each organization's membership;
invitations carry the gym profile a link request waits to link

Revision ID: 0011_h20a
Revises: 0010
Create Date: 2026-11-24

A national id stored on users was bound (AES-GCM associated data) to users.national_id and its
row; on the membership it is bound to memberships.national_id and the membership's row. Existing
values are re-encrypted into the membership of the organization that stored them (the
organization of the newest user.national_id_set audit row). That needs NATIONAL_ID_ENCRYPTION_KEY
when there are values to move; a value no audit row attributes is dropped (attributing it to a
guessed organization would hand one gym another's data), and the count is logged.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0011_h20a"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMN = "national_id_ciphertext"


def upgrade() -> None:
    with op.batch_alter_table("memberships") as batch:
        batch.add_column(sa.Column(COLUMN, sa.String(length=512), nullable=True))
    with op.batch_alter_table("invitations") as batch:
        batch.add_column(sa.Column("profile_user_id", sa.Uuid(), nullable=True))
        batch.create_index("ix_invitations_profile_user_id", ["profile_user_id"])
    _move_national_ids()
    _drop_column("users", COLUMN)


def _drop_column(table: str, column: str) -> None:
    """SQLite drops it in place (3.35+): batch mode would recreate the table, and dropping the
    old copy cascades (foreign_keys is on) to every row that references it."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)


def _move_national_ids() -> None:
    bind = op.get_bind()
    users = sa.table("users", sa.column("id", sa.Uuid()), sa.column(COLUMN, sa.String()))
    held = bind.execute(sa.select(users.c.id, users.c[COLUMN]).where(users.c[COLUMN].is_not(None)))
    held = held.all()
    if not held:
        return
    from gymctl.config import get_settings
    from gymctl.crypto import national_id_cipher

    cipher = national_id_cipher(get_settings())  # ConfigError: the key is needed to move them
    audit = sa.table(
        "audit_log",
        sa.column("action", sa.String()),
        sa.column("target_id", sa.String()),
        sa.column("organization_id", sa.Uuid()),
        sa.column("at", sa.DateTime()),
    )
    memberships = sa.table(
        "memberships",
        sa.column("id", sa.Uuid()),
        sa.column("user_id", sa.Uuid()),
        sa.column("organization_id", sa.Uuid()),
        sa.column(COLUMN, sa.String()),
    )
    dropped = 0
    for user_id, ciphertext in held:
        organization_id = bind.scalar(
            sa.select(audit.c.organization_id)
            .where(audit.c.action == "user.national_id_set", audit.c.target_id == str(user_id))
            .order_by(audit.c.at.desc())
            .limit(1)
        )
        membership_id = organization_id and bind.scalar(
            sa.select(memberships.c.id).where(
                memberships.c.user_id == user_id,
                memberships.c.organization_id == organization_id,
            )
        )
        if not membership_id:
            dropped += 1
            continue
        plain = cipher.decrypt(ciphertext, table="users", column="national_id", row_id=str(user_id))
        bind.execute(
            sa.update(memberships)
            .where(memberships.c.id == membership_id)
            .values(
                {
                    COLUMN: cipher.encrypt(
                        plain, table="memberships", column="national_id", row_id=str(membership_id)
                    )
                }
            )
        )
    if dropped:
        logging.getLogger("alembic").warning(
            "0011_h20a: %d national id(s) no organization stored were dropped", dropped
        )


def downgrade() -> None:
    # Values are not moved back: on the shared row they would again be one gym's to overwrite.
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column(COLUMN, sa.String(length=512), nullable=True))
    op.drop_index("ix_invitations_profile_user_id", table_name="invitations")
    _drop_column("invitations", "profile_user_id")
    _drop_column("memberships", COLUMN)
