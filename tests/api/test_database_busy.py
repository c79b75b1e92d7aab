"""A request the database turns away for a moment (a lock it cannot give in time, a deadlock
it broke, a serialization conflict) rolled back and changed nothing: the client is told to try
again (503 database_busy, Retry-After), not that the server failed (500)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from tests.conftest import NOW
from webhooks.app import create_app
from webhooks.context import db


@pytest.fixture
def busy_app(settings, clock, committed_pg, idp):
    engine = get_engine(committed_pg)
    app = create_app(settings, session_factory=sessionmaker(bind=engine), clock=clock)

    @app.get("/waits-for-a-lock")
    def waits_for_a_lock():
        session = db()
        session.execute(text("SET LOCAL lock_timeout = '50ms'"))
        session.execute(text("SELECT count(*) FROM job_runs"))
        return {"waited": False}

    @app.get("/fails")
    def fails():
        db().execute(text("SELECT 1 / 0"))  # not a moment's refusal: still a 500
        return {}

    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {idp.token('user_busy', now=NOW)}"
    return client, engine


def test_a_lock_the_database_cannot_give_in_time_answers_503_database_busy(busy_app):
    client, engine = busy_app
    with engine.connect() as holder:
        holder.execute(text("LOCK TABLE job_runs IN ACCESS EXCLUSIVE MODE"))
        response = client.get("/waits-for-a-lock")
        holder.rollback()

    assert (response.status_code, response.json["code"]) == (503, "database_busy")
    assert response.headers["Retry-After"] == "1"
    assert client.get("/waits-for-a-lock").json == {"waited": False}  # the lock gone


def test_any_other_database_error_is_still_a_500(busy_app):
    client, _ = busy_app
    response = client.get("/fails")
    assert (response.status_code, response.json["code"]) == (500, "internal_error")
