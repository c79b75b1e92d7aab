"""The sign-in's session record keeps what request headers say (the User-Agent, a geo header a
proxy let through): a client's NUL or other control character is dropped, not sent to
PostgreSQL, which stores no NUL and answered every first request of the session 500."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select

from gymctl.access import sessions
from gymctl.models import Role, UserSession
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.conftest import NOW

_sid = itertools.count(1)

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("header", "column", "kept"),
    [
        ({"X-Geo-City": "Tel\x00Aviv"}, "city", "TelAviv"),
        ({"X-Geo-Country": "I\x00L"}, "country", "IL"),
        ({"CF-IPCity": "\x00"}, "city", None),
        ({"CloudFront-Viewer-Country": "\x00x\x1b"}, "country", "X"),  # upper-cased
        ({"User-Agent": "Mozilla\x00/5.0\x07"}, "user_agent", "Mozilla/5.0"),
    ],
    ids=["geo-city", "geo-country", "cf-city", "cloudfront-country", "user-agent"],
)
def test_a_control_character_in_a_stored_header_is_dropped(
    client,
    engine,
    session,
    idp,
    gym,  # noqa: F811
    header,
    column,
    kept,
):
    sessions.clear_cache()
    owner = gym[Role.owner]
    sid = f"sess_headers_{next(_sid)}"
    token = idp.token(owner.user.identity_id, now=NOW, sid=sid)
    response = client.get("/users/me", headers={"Authorization": f"Bearer {token}", **header})
    assert response.status_code == 200, response.get_data(as_text=True)
    session.expire_all()
    record = session.scalar(select(UserSession).where(UserSession.session_id == sid))
    assert getattr(record, column) == kept
