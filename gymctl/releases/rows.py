"""One row per key, written by whoever comes first: a business check, a platform's state."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.orm import Session

from gymctl.models.integrity import UniqueViolation, unique_violation

Row = TypeVar("Row")


def write(
    session: Session, model: type[Row], key: dict[str, Any], constraint: str, fields: dict[str, Any]
) -> Row:
    """The row of `model` at primary key `key` (attribute -> value) with `fields` written on it,
    inserted when there is none yet. Two first writes at once (a double tap, a retry, a dispatch
    and a report): the insert is made in a savepoint, and the one that loses on `constraint`
    (the primary key) locks the rival's row and writes its fields there instead of failing."""
    row = session.get(model, key)
    if row is None:
        try:
            with unique_violation(constraint), session.begin_nested():
                row = model(**key, **fields)
                session.add(row)
                session.flush()
            return row
        except UniqueViolation:
            row = session.get(model, key, with_for_update=True, populate_existing=True)
    for name, value in fields.items():
        setattr(row, name, value)
    session.flush()
    return row
