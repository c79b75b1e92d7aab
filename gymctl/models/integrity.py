"""Integrity errors read by constraint name, in one place (as procrastinate wraps its driver's).

PostgreSQL names the broken constraint in its diagnostics. SQLite names the columns
(`UNIQUE constraint failed: users.identity_id`) or, for an index on expressions, the index;
those columns are matched to the names the naming convention gives the models' unique keys. A
call site names the unique keys whose violation it expects (a race it loses, a replay) and says
what each means; every other violation (a foreign key, NOT NULL, a check, another unique key)
is re-raised as it was, never swallowed as if it were the expected duplicate.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from sqlalchemy import Index, PrimaryKeyConstraint, Table, UniqueConstraint
from sqlalchemy.exc import IntegrityError

UNIQUE = "unique"
_PG_KINDS = {"23505": UNIQUE, "23503": "foreign_key", "23502": "not_null", "23514": "check"}
_SQLITE_KINDS = {
    "SQLITE_CONSTRAINT_UNIQUE": UNIQUE,
    "SQLITE_CONSTRAINT_PRIMARYKEY": UNIQUE,
    "SQLITE_CONSTRAINT_FOREIGNKEY": "foreign_key",
    "SQLITE_CONSTRAINT_NOTNULL": "not_null",
    "SQLITE_CONSTRAINT_CHECK": "check",
}
_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (?:index '(?P<index>[^']+)'|(?P<cols>.+))")


@dataclass(frozen=True)
class Violation:
    """What a driver's integrity error broke: its kind (unique, foreign_key, not_null, check or
    other) and the names of the constraints that fit it (PostgreSQL names one; SQLite's columns
    fit every unique key of the table on exactly those columns)."""

    kind: str
    constraints: frozenset[str]


class UniqueViolation(Exception):
    """The violation a call site expected: `constraint` is the unique key that refused."""

    def __init__(self, constraint: str) -> None:
        super().__init__(constraint)
        self.constraint = constraint


def violation(error: IntegrityError) -> Violation:
    orig = error.orig
    diag = getattr(orig, "diag", None)
    if diag is not None:  # psycopg
        name = diag.constraint_name
        kind = _PG_KINDS.get(getattr(orig, "sqlstate", None) or "", "other")
        return Violation(kind, frozenset({name} if name else ()))
    kind = _SQLITE_KINDS.get(getattr(orig, "sqlite_errorname", ""), "other")
    match = _SQLITE_UNIQUE.match(str(orig))
    if match is None:
        return Violation(kind, frozenset())
    if match["index"]:
        return Violation(UNIQUE, frozenset({match["index"]}))
    columns = [part.strip().rpartition(".") for part in match["cols"].split(",")]
    tables = {table for table, _, _ in columns}
    if len(tables) != 1:
        return Violation(UNIQUE, frozenset())
    keys = _unique_keys().get(tables.pop(), {})
    names = tuple(column for _, _, column in columns)
    return Violation(UNIQUE, frozenset(key for key, cols in keys.items() if cols == names))


@contextmanager
def unique_violation(*constraints: str) -> Iterator[None]:
    """Turn the violation of one of `constraints` (unique keys, primary keys, unique indexes, by
    their names in the schema) into UniqueViolation; any other integrity error passes as is."""
    unknown = set(constraints) - _known_names()
    if unknown:
        raise ValueError(f"no unique key named {sorted(unknown)}")
    try:
        yield
    except IntegrityError as error:
        found = violation(error)
        hit = [name for name in constraints if name in found.constraints]
        if found.kind != UNIQUE or not hit:
            raise
        raise UniqueViolation(hit[0]) from error


@cache
def _unique_keys() -> dict[str, dict[str, tuple[str, ...]]]:
    """Table name -> {unique key name: its columns}, from the models' metadata."""
    from gymctl.models import Base

    return {table.name: _keys_of(table) for table in Base.metadata.tables.values()}


def _keys_of(table: Table) -> dict[str, tuple[str, ...]]:
    keys: dict[str, tuple[str, ...]] = {}
    for constraint in table.constraints:
        if isinstance(constraint, PrimaryKeyConstraint | UniqueConstraint) and constraint.name:
            keys[str(constraint.name)] = tuple(column.name for column in constraint.columns)
    for index in table.indexes:
        if isinstance(index, Index) and index.unique and index.name:
            keys[str(index.name)] = tuple(getattr(e, "name", "") for e in index.expressions)
    return keys


@cache
def _known_names() -> frozenset[str]:
    return frozenset(name for keys in _unique_keys().values() for name in keys)
