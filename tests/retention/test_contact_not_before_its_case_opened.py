"""A contact is logged about a case that exists: one dated before the case opened (2000-01-01 on
a case opened in 2026) acknowledged the case, made the period-end outcome lost_contacted and
kept the ending-soon escalation from firing, though no one spoke to the member about this
notice. It is refused with 422 contact_before_case_opened and nothing is written; one at the
opening instant or later (and not in the future) is logged."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import Role
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the HTTP route, on both engines

gym = access.gym  # one person per role, real tokens


@pytest.fixture
def case_url(client, session, gym):
    """A member's notice given at NOW (the app's clock): its case opened then."""
    subscription = bf.make_subscription(session, gym)
    session.commit()
    given = client.post(
        f"/organizations/{gym.id}/subscriptions/{subscription.id}/notice",
        json={},
        headers=gym[Role.member].headers,
    )
    assert given.json["data"]["case"]["openedAt"] == NOW.isoformat()
    return f"/organizations/{gym.id}/retention/cases/{given.json['data']['case']['id']}"


def test_a_contact_dated_before_its_case_opened_is_refused_and_writes_nothing(
    client, session, gym, case_url
):
    admin = gym[Role.admin].headers
    before = snapshot(session)
    for at in ("2000-01-01T00:00:00+00:00", (NOW - timedelta(seconds=1)).isoformat()):
        refused = client.post(
            f"{case_url}/contacts", json={"channel": "phone", "contactedAt": at}, headers=admin
        )
        assert (refused.status_code, refused.json["code"]) == (422, "contact_before_case_opened")
    assert snapshot(session) == before
    case = client.get(case_url, headers=admin).json["data"]
    assert (case["acknowledgedAt"], case["lastContactAt"], case["contacts"]) == (None, None, [])


def test_a_contact_in_the_future_is_refused_and_one_from_the_opening_on_is_logged(
    client, session, gym, case_url
):
    admin = gym[Role.admin].headers
    before = snapshot(session)
    ahead = client.post(
        f"{case_url}/contacts",
        json={"channel": "phone", "contactedAt": (NOW + timedelta(minutes=3)).isoformat()},
        headers=admin,
    )
    assert (ahead.status_code, ahead.json["code"]) == (422, "contact_in_future")
    assert snapshot(session) == before
    logged = client.post(
        f"{case_url}/contacts",
        json={"channel": "phone", "contactedAt": NOW.isoformat()},
        headers=admin,
    )
    assert logged.status_code == 201, logged.json
    assert logged.json["data"]["lastContactAt"] == NOW.isoformat()


def test_a_contact_a_device_logs_a_little_ahead_of_our_clock_is_logged_at_our_now(
    client, session, gym, case_url
):
    """A staff device whose clock runs up to two minutes ahead (cases.CLOCK_SKEW) logs "now":
    refused, the contact could not be logged at all; it is ours, never after it."""
    admin = gym[Role.admin].headers
    logged = client.post(
        f"{case_url}/contacts",
        json={"channel": "phone", "contactedAt": (NOW + timedelta(seconds=90)).isoformat()},
        headers=admin,
    )
    assert logged.status_code == 201, logged.json
    case = client.get(case_url, headers=admin).json["data"]
    assert (case["acknowledgedAt"], case["lastContactAt"]) == (NOW.isoformat(), NOW.isoformat())
    assert [c["contactedAt"] for c in case["contacts"]] == [NOW.isoformat()]
