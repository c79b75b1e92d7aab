"""Inputs that no honest client sends never reach the database as a 500: NUL characters in
paths, bodies and CSV rows, and over-long headers or addresses."""

from __future__ import annotations

import pytest

from gymctl.access.join import create_join_link
from gymctl.models import Role
from tests.access.conftest import imported
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def link(session, gym):
    created = create_join_link(
        session, gym.id, actor_user_id=gym[Role.owner].user.id, label=None, plan_id=None, now=NOW
    )
    session.commit()
    return created


@pytest.mark.parametrize("path", ["/join/%00", "/admin/users/%00/ownership-trail"])
def test_a_nul_in_the_path_is_a_400(client, gym, path):
    response = client.get(path, headers=gym[Role.owner].headers)
    assert (response.status_code, response.json["code"]) == (400, "path_invalid")


@pytest.mark.parametrize(
    "body", [{"email": "nul\u0000@example.test"}, {"email": "ok@example.test", "name": "a\u0000b"}]
)
def test_a_nul_in_a_body_is_400_invalid_body(client, gym, body):
    response = client.post(
        f"/organizations/{gym.id}/members", json=body, headers=gym[Role.owner].headers
    )
    assert (response.status_code, response.json["code"]) == (400, "invalid_body")


def test_a_nul_in_a_csv_row_marks_the_row_invalid(client, gym):
    queued = client.post(
        f"/organizations/{gym.id}/members/import",
        data="email\nnul\u0000@example.test\nfine@example.test\n",
        headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
    )
    members = imported(client, queued, gym[Role.owner].headers).json["results"]["members"]
    assert members["invalid"] == [{"row": 2, "reason": "nul_character"}]
    assert members["created"] == ["fine@example.test"]


def test_long_addresses_and_headers_are_cut_to_fit(client, link):
    email = ("a" * 300) + "@example.test"
    headers = {"User-Agent": "x" * 2000, "X-Forwarded-For": "y" * 200}
    failed = client.post(
        f"/join/{link.token}/checkout-failed", json={"email": email[:320]}, headers=headers
    )
    assert failed.status_code == 202
    invited = client.post(
        f"/join/{link.token}/request-invite", json={"email": "n@example.test"}, headers=headers
    )
    assert invited.status_code == 201
