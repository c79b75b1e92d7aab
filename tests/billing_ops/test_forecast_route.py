"""GET /admin/organizations/<org>/billing-forecast: the CLI's forecast for platform admins."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import func, select

from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.test_routes import headers, operator  # noqa: F401 (fixtures)
from tests.conftest import NOW


def _counts(session):
    return [
        session.scalar(select(func.count()).select_from(m))
        for m in (Subscription, PaymentTransaction)
    ]


def test_the_forecast_is_a_platform_admin_route(client, session, gym, headers, operator):  # noqa: F811
    subscription = bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    before = _counts(session)
    url = f"/admin/organizations/{gym.organization.id}/billing-forecast"
    until = (NOW + timedelta(days=45)).isoformat()

    assert (
        client.get(url, query_string={"until": until}, headers=headers(gym.owner)).status_code
        == 403
    )
    answer = client.get(
        url,
        query_string={"until": until, "by": "month", "explain": str(subscription.id)},
        headers=headers(operator),
    )
    assert answer.status_code == 200, answer.json
    assert sum(p["debtsOpened"] for p in answer.json["periods"]) == 1
    assert [s["event"] for s in answer.json["explain"]["timeline"]] == [
        "subscription.debt_opened",
        "subscription.cancelled",
    ]
    for query, status, code in (
        ({"until": "soon"}, 400, "invalid_query"),
        ({"until": until, "declineRate": "2"}, 400, "invalid_query"),
        ({"until": until, "by": {"deep": 1}}, 400, "invalid_query"),
        ({"until": "2026-12-01T00:00:00"}, 422, "timestamp_not_utc"),
        ({"until": (NOW - timedelta(days=1)).isoformat()}, 422, "forecast_date_past"),
    ):
        refused = client.get(url, query_string=query, headers=headers(operator))
        assert (refused.status_code, refused.json["code"]) == (status, code), query
    unknown = client.get(
        f"/admin/organizations/{uuid.uuid4()}/billing-forecast",
        query_string={"until": until},
        headers=headers(operator),
    )
    assert (unknown.status_code, unknown.json["code"]) == (404, "organization_not_found")
    assert _counts(session) == before


def test_until_is_a_day_as_on_the_command_line(client, session, gym, headers, operator):  # noqa: F811
    """`gymctl billing simulate --until 2027-02-26` takes a day; the route refused the same
    value (timestamp_not_utc). A day is its first instant in UTC, on both doors."""
    bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    url = f"/admin/organizations/{gym.organization.id}/billing-forecast"
    day = (NOW + timedelta(days=45)).date().isoformat()
    by_day = client.get(url, query_string={"until": day}, headers=headers(operator))
    at_midnight = client.get(
        url, query_string={"until": f"{day}T00:00:00+00:00"}, headers=headers(operator)
    )
    assert by_day.status_code == 200, by_day.json
    assert by_day.json["until"] == at_midnight.json["until"] == f"{day}T00:00:00+00:00"
    assert by_day.json["periods"] == at_midnight.json["periods"]


def test_a_refusal_names_the_field_the_route_takes(client, session, gym, headers, operator):  # noqa: F811
    """The refusals are the CLI's; over HTTP their message named only `--until`, a flag the
    admin screen has no way to pass. It names both doors' spelling."""
    url = f"/admin/organizations/{gym.organization.id}/billing-forecast"
    for until, code in (
        (NOW - timedelta(days=1), "forecast_date_past"),
        (NOW + timedelta(days=3 * 366 + 1), "forecast_date_too_far"),
    ):
        refused = client.get(
            url, query_string={"until": until.isoformat()}, headers=headers(operator)
        )
        assert (refused.status_code, refused.json["code"]) == (422, code)
        assert "until over HTTP" in refused.json["message"]
        assert "--until" in refused.json["message"]
