"""The opening-day edit of a presale: staff move the day a presale starts and is first charged;
every refusal changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.db import get_engine
from gymctl.models import Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import TIMEOUT, connect_card_provider
from tests.billing.factories import TEST_KEY
from tests.billing.passes import collect, confirm_non_charges, retries_sent
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import DUE, audit_rows, card_of, card_subscription, pending_attempt
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)
from tests.conftest import NOW

D = timedelta(days=1)


def _z(at):
    return at.isoformat().replace("+00:00", "Z")


def _url(gym, subscription):
    return f"/organizations/{gym.organization.id}/subscriptions/{subscription.id}/opening-day"


@pytest.mark.embedded
def test_staff_move_a_presales_opening_day_and_its_first_charge(
    client,
    session,
    gym,
    headers,  # noqa: F811 (the fixture)
):
    presale = bf.make_subscription(session, gym, PlanType.card, presale_opening=NOW + 20 * D)
    session.commit()
    moved = client.put(
        _url(gym, presale), json={"openingDay": _z(NOW + 30 * D)}, headers=headers(gym.owner)
    )
    assert moved.status_code == 200, moved.json
    session.expire_all()
    presale = session.get(Subscription, presale.id)
    assert (presale.opening_day, presale.next_charge_date) == (NOW + 30 * D, NOW + 30 * D)
    assert presale.status == SubscriptionStatus.scheduled
    assert presale.current_period_end is None  # a presale holds no period
    [audit] = audit_rows(session, "subscription.opening_day_changed")
    assert audit.actor_user_id == gym.owner.id


def test_opening_day_refusals_change_nothing(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    presale = bf.make_subscription(session, gym, PlanType.card, presale_opening=NOW + 20 * D)
    active = card_subscription(session, gym, card_server)
    charging = card_subscription(
        session, gym, card_server, status=SubscriptionStatus.scheduled, opening_day=NOW
    )
    pending_attempt(session, charging, now=NOW - timedelta(minutes=5))
    other = bf.make_gym(session)
    theirs = bf.make_subscription(session, other, PlanType.card, presale_opening=NOW + 20 * D)
    session.commit()
    before = snapshot(session)
    later = _z(NOW + 30 * D)
    cases = [
        (presale, {"openingDay": _z(NOW - D)}, 422, "opening_day_invalid"),
        (presale, {"openingDay": "next week"}, 400, "invalid_body"),
        (active, {"openingDay": later}, 409, "not_a_presale"),
        (charging, {"openingDay": later}, 409, "presale_charge_in_flight"),
        (theirs, {"openingDay": later}, 404, "subscription_not_found"),
    ]
    for subscription, body, status, code in cases:
        answer = client.put(_url(gym, subscription), json=body, headers=headers(gym.owner))
        assert (answer.status_code, answer.json.get("code")) == (status, code), answer.json
    member = client.put(_url(gym, presale), json={"openingDay": later}, headers=headers(gym.member))
    assert member.status_code == 403
    assert snapshot(session) == before


@pytest.mark.embedded
@pytest.mark.parametrize("non_charges", [1, 4], ids=["retry_owed", "retries_exhausted"])
def test_an_opening_charge_owed_a_technical_retry_keeps_its_day_and_its_three_retries(
    client,
    session,
    session_factory,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
    non_charges,
):
    """Technical retries count per obligation, the opening charge by its day: at most three
    (spec B 8), then only the owner's authorize-retry. Edited after a confirmed non-charge
    (or all four), the day named a new obligation: its count started again at none, and a
    fifth attempt went out as technicalRetry 0. The presale's charge is still in flight."""
    provider = card_server.provider(timeout=0.3)  # the timeout card: never reaches it
    method = card_of(session, gym, card_server, TIMEOUT)
    presale = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=DUE, payment_method_id=method.id
    )
    session.commit()
    at = confirm_non_charges(session, session_factory, presale, provider, non_charges)
    assert presale.status == SubscriptionStatus.scheduled
    before = snapshot(session)

    moved = client.put(
        _url(gym, presale), json={"openingDay": _z(NOW + 30 * D)}, headers=headers(gym.owner)
    )
    after = snapshot(session)
    for then in (at, NOW + 30 * D):  # the retry owed, then the day asked for
        collect(session_factory, presale, provider, then)

    assert (moved.status_code, moved.json["code"]) == (409, "presale_charge_in_flight")
    assert moved.json["technicalNonCharges"] == non_charges
    assert after == before
    counts, obligations = retries_sent(session, presale)
    assert counts == list(range(min(non_charges + 1, 4)))
    assert len(obligations) == 1


def test_the_cli_moves_a_presales_opening_day(committed_pg, monkeypatch, frozen_clock):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 30 * D)
        presale = bf.make_subscription(session, gym, PlanType.card, presale_opening=NOW + 20 * D)
        session.commit()
    args = ["opening-day", str(gym.organization.id), str(presale.id), "--json"]
    moved = CliRunner().invoke(
        billing_app, [*args, "--on", _z(NOW + 40 * D), "--operator", str(gym.owner.id)]
    )
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output)["openingDay"] == (NOW + 40 * D).isoformat()
    with factory() as session:
        assert session.get(Subscription, presale.id).opening_day == NOW + 40 * D


def test_the_cli_moves_a_presale_to_a_day_read_as_the_gyms_local_midnight(
    committed_pg, monkeypatch, frozen_clock
):
    """The README's `billing opening-day ORG SUBSCRIPTION --on DAY`: a day, as the gym's own
    `--opening-day` takes one (s54: only an instant with its offset was taken)."""
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 30 * D)
        bf.make_billing_settings(session, gym.organization, timezone="Asia/Jerusalem")
        presale = bf.make_subscription(session, gym, PlanType.card, presale_opening=NOW + 20 * D)
        session.commit()
    args = ["opening-day", str(gym.organization.id), str(presale.id), "--json"]
    operator = ["--operator", str(gym.owner.id)]

    moved = CliRunner().invoke(billing_app, [*args, "--on", "2027-03-01", *operator])
    wrong = CliRunner().invoke(billing_app, [*args, "--on", "2027-03-01T10:00", *operator])

    assert moved.exit_code == 0, moved.output
    midnight = datetime(2027, 2, 28, 22, tzinfo=UTC)  # 2027-03-01 00:00 in Jerusalem (UTC+2)
    assert json.loads(moved.output)["openingDay"] == midnight.isoformat()
    assert wrong.exit_code != 0
    assert "neither a day (YYYY-MM-DD) nor an ISO time" in str(wrong.exception)
    with factory() as session:
        assert session.get(Subscription, presale.id).opening_day == midnight
