"""Who the caller is and what the logs keep (issue 20): X-Forwarded-For is believed only from
the configured proxy hops, and a database error never logs its statement's parameters."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select, text

from gymctl.models import JoinSubmission
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.access.test_join import make_link
from webhooks.app import create_app
from webhooks.guard import public


def _recorded_ip(settings, session_factory, clock, session, organization, **headers) -> str:
    link = make_link(session, organization)
    session.commit()
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    answer = client.post(f"/join/{link.token}/checkout-failed", json={}, headers=headers)
    assert answer.status_code == 202
    session.expire_all()
    return session.scalar(select(JoinSubmission.ip).where(JoinSubmission.join_link_id == link.id))


@pytest.mark.parametrize(
    ("hops", "forwarded", "recorded"),
    [
        (0, "198.51.100.66", "127.0.0.1"),  # no proxy configured: the header is anyone's word
        (1, "198.51.100.66, 203.0.113.9", "203.0.113.9"),  # the client's own hop is ignored
        (2, "198.51.100.66, 203.0.113.9, 10.0.0.1", "203.0.113.9"),
    ],
)
def test_x_forwarded_for_is_believed_only_from_the_configured_proxy_hops(
    settings,
    session_factory,
    clock,
    session,
    gym,  # noqa: F811
    hops,
    forwarded,
    recorded,
):
    settings = settings.model_copy(update={"proxy_hops": hops})
    ip = _recorded_ip(
        settings,
        session_factory,
        clock,
        session,
        gym.organization,
        **{"X-Forwarded-For": forwarded},
    )
    assert ip == recorded


def test_an_unhandled_database_error_never_logs_the_statements_parameters(app, caplog):
    """An email reached the log through a DataError's message: the engine hides parameters."""

    @app.get("/boom-db")
    @public
    def boom():
        from webhooks.context import db

        db().execute(
            text("SELECT CAST(:email AS integer)"), {"email": "hidden.person@example.test"}
        )

    with caplog.at_level(logging.DEBUG):
        response = app.test_client().get("/boom-db")
    assert (response.status_code, response.json["code"]) == (500, "internal_error")
    logged = "\n".join(
        record.getMessage()
        + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert "unhandled database error DataError" in logged
    assert "hidden.person" not in logged
    assert "hidden.person" not in response.get_data(as_text=True)
