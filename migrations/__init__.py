"""Alembic migrations: the journal is authoritative; every schema change is a revision."""
