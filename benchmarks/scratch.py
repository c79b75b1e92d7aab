"""A throwaway PostgreSQL database for one benchmark run: created, migrated to head, and dropped
on the way out (even when the run fails), so a benchmark never touches a real database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from gymctl import migrate

DEFAULT_ADMIN_URL = os.environ.get(
    "GYMCTL_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def scratch_database(name: str, admin_url: str = DEFAULT_ADMIN_URL) -> Iterator[Engine]:
    """`admin_url` must be a role allowed to create databases."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    drop = text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    with admin.connect() as connection:
        connection.execute(drop)
        connection.execute(text(f"CREATE DATABASE {name}"))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    try:
        migrate.upgrade(url)
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as connection:
            connection.execute(drop)
        admin.dispose()
