"""Alembic environment: one transaction, under an advisory lock so two upgraders never race."""

from __future__ import annotations

import warnings

from alembic import context
from sqlalchemy import text

from gymctl.db import get_engine, lock_key
from gymctl.models import Base
from gymctl.models.base import UTCDateTime

config = context.config

# SQLite cannot reflect expression indexes (lower(email)); PostgreSQL is where they are checked.
warnings.filterwarnings("ignore", message=".*expression-based index.*")
MIGRATION_LOCK = "gymctl:migrations"
# Indexes on JSON members are written per dialect by their revision (0011_h18) and have no
# portable model form; `alembic check` leaves them to the migrations.
MIGRATION_ONLY_INDEXES = frozenset(
    {"ix_bridge_entity_map_day", "ix_bridge_entity_map_schedule_ref"}
)


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    return not (type_ == "index" and reflected and name in MIGRATION_ONLY_INDEXES)


def render_item(type_: str, obj, autogen_context):
    """Render our column types as plain SQLAlchemy types so revisions never import models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=render_item,
        include_object=include_object,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key(MIGRATION_LOCK)}
            )
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    with get_engine(config.get_main_option("sqlalchemy.url")).connect() as connection:
        _run(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
