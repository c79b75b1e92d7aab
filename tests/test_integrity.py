"""The one place that reads an integrity error: the constraint it names, on both engines."""

from __future__ import annotations

import sqlite3
import uuid

import pytest
from sqlalchemy.exc import IntegrityError

from gymctl.models import User, UserSession
from gymctl.models.integrity import UniqueViolation, unique_violation, violation
from tests import factories


def _broken(session, row) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught, session.begin_nested():
        session.add(row)
    return caught.value


@pytest.mark.embedded
def test_a_unique_key_is_named_by_its_constraint(engine, session):
    factories.user(session, identity_id="user_same")
    found = violation(_broken(session, User(identity_id="user_same")))
    assert (found.kind, found.constraints) == ("unique", frozenset({"uq_users_identity_id"}))


@pytest.mark.embedded
def test_a_primary_key_and_a_two_column_key_are_named(engine, session):
    person = factories.user(session)
    at, person_id = person.created_at, person.id
    session.expunge(person)  # a second row of the same id, as another session would write it
    assert violation(_broken(session, User(id=person_id))).constraints == {"pk_users"}
    first = UserSession(user_id=person_id, session_id="s", first_seen_at=at, last_seen_at=at)
    session.add(first)
    session.flush()
    again = UserSession(user_id=person_id, session_id="s", first_seen_at=at, last_seen_at=at)
    assert violation(_broken(session, again)).constraints == {"uq_user_sessions_user_id_session_id"}


@pytest.mark.embedded
def test_a_foreign_key_or_not_null_failure_is_no_unique_violation(engine, session):
    at = factories.user(session).created_at
    orphan = UserSession(user_id=uuid.uuid4(), session_id="s", first_seen_at=at, last_seen_at=at)
    assert violation(_broken(session, orphan)).kind == "foreign_key"
    person = factories.user(session)
    unset = UserSession(user_id=person.id, session_id=None, first_seen_at=at, last_seen_at=at)
    assert violation(_broken(session, unset)).kind == "not_null"


@pytest.mark.embedded
def test_only_the_named_keys_are_translated(engine, session):
    person = factories.user(session, identity_id="user_twice")
    translated = unique_violation("uq_users_identity_id")
    with pytest.raises(UniqueViolation) as caught, translated, session.begin_nested():
        session.add(User(identity_id="user_twice"))
    assert caught.value.constraint == "uq_users_identity_id"
    person_id = person.id
    session.expunge(person)
    translated = unique_violation("uq_users_identity_id")
    with pytest.raises(IntegrityError), translated, session.begin_nested():
        session.add(User(id=person_id))
    assert session.get(User, person_id).identity_id == "user_twice"


def test_a_name_the_schema_does_not_have_is_a_mistake():
    with pytest.raises(ValueError, match="uq_users_nothing"), unique_violation("uq_users_nothing"):
        pass


def test_sqlite_names_an_index_on_expressions_by_its_name():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a TEXT)")
    db.execute("CREATE UNIQUE INDEX uq_t_lower_a ON t (lower(a))")
    db.execute("INSERT INTO t VALUES ('A')")
    with pytest.raises(sqlite3.IntegrityError) as caught:
        db.execute("INSERT INTO t VALUES ('a')")
    error = IntegrityError("INSERT", {}, caught.value)
    assert violation(error).constraints == {"uq_t_lower_a"}
