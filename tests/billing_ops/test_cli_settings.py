"""`gymctl billing settings show|set` and `gymctl billing charges schedule|move` through
Typer's runner, on PostgreSQL with real commits: the same functions as the routes, audited
under the operator, refusals with their code and a non-zero exit."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from gymctl import clock
from gymctl.cli.billing import app as billing_app
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import AuditLog, BillingSettings, Subscription
from tests.billing import factories as bf
from tests.conftest import NOW


@pytest.fixture
def world(committed_pg, monkeypatch, frozen_clock):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("COLUMNS", "250")
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        renewal = bf.make_subscription(
            session,
            gym,
            payment_method_id=bf.make_card(session, gym).id,
            now=NOW + timedelta(days=3) - relativedelta(months=1),  # renews in 3 days
        )
        session.commit()
    return factory, gym, renewal


def _run(*args: str):
    return CliRunner().invoke(billing_app, list(args))


def test_settings_set_and_show_as_the_operator(world):
    factory, gym, _ = world
    org = str(gym.organization.id)
    changed = _run(
        "settings", "set", org, "--grace-days", "3", "--lifecycle-day", "5",
        "--timezone", "Asia/Jerusalem", "--plan-required-to-book",
        "--operator", str(gym.owner.id), "--json",
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    assert json.loads(changed.stdout) == {
        "billingGraceDays": 3,
        "billingLifecycleDay": 5,
        "timezone": "Asia/Jerusalem",
        "planRequiredToBook": True,
        "openingDay": None,
    }
    off = _run(
        "settings", "set", org, "--no-plan-required-to-book",
        "--operator", str(gym.owner.id), "--json",
    )  # fmt: skip
    assert json.loads(off.stdout)["planRequiredToBook"] is False
    shown = json.loads(_run("settings", "show", gym.organization.slug, "--json").stdout)
    assert shown["timezone"] == "Asia/Jerusalem"
    with factory() as session:
        audit = session.scalar(
            select(AuditLog).where(AuditLog.action == "billing.settings_changed")
        )
        assert audit.actor_user_id == gym.owner.id


def test_a_refused_setting_exits_non_zero_and_writes_nothing(world):
    factory, gym, _ = world
    refused = _run(
        "settings", "set", str(gym.organization.id), "--timezone", "Mars/Base",
        "--operator", str(gym.owner.id),
    )  # fmt: skip
    assert refused.exit_code != 0
    assert isinstance(refused.exception, DomainError)
    assert refused.exception.code == "timezone_invalid"
    # '\u00b2' passed str.isdigit() and int() refused it (a traceback); '\u0967' (Devanagari
    # one) was read as day 1.
    for day in ("\u00b2", "\u0967"):
        odd = _run(
            "settings", "set", str(gym.organization.id), "--lifecycle-day", day,
            "--operator", str(gym.owner.id),
        )  # fmt: skip
        assert isinstance(odd.exception, DomainError), odd.output
        assert odd.exception.code == "billing_lifecycle_day_invalid"
    # The operator is the audit row's actor: one who is no user was dropped and the change
    # audited with none. And "localtime" names the server's own zone, not the gym's.
    for args, code in (
        (("--grace-days", "6", "--operator", "nobody-at-all"), "operator_user_required"),
        (("--timezone", "localtime", "--operator", str(gym.owner.id)), "timezone_invalid"),
        # An empty value (a script's unset variable) cleared the setting; `none` clears it.
        (("--lifecycle-day", "", "--operator", str(gym.owner.id)), "billing_lifecycle_day_invalid"),
        (("--opening-day", " ", "--operator", str(gym.owner.id)), "timestamp_not_utc"),
    ):
        odd = _run("settings", "set", str(gym.organization.id), *args)
        assert isinstance(odd.exception, DomainError), odd.output
        assert odd.exception.code == code
    with factory() as session:
        assert session.get(BillingSettings, gym.organization.id) is None


def test_charges_schedule_and_move(world):
    factory, gym, renewal = world
    org = str(gym.organization.id)
    schedule = json.loads(_run("charges", "schedule", org, "--days", "30", "--json").stdout)
    [item] = schedule["items"]
    assert item["subscriptionId"] == str(renewal.id)
    to = (NOW + timedelta(days=9)).isoformat()
    dry = _run(
        "charges", "move", org, str(renewal.id), "--expected", item["nextChargeDate"],
        "--to", to, "--operator", str(gym.owner.id), "--dry-run", "--json",
    )  # fmt: skip
    assert dry.exit_code == 0, dry.output
    with factory() as session:
        assert session.get(Subscription, renewal.id).next_charge_date == renewal.next_charge_date
    moved = _run(
        "charges", "move", org, str(renewal.id), "--expected", item["nextChargeDate"],
        "--to", to, "--operator", str(gym.owner.id), "--json",
    )  # fmt: skip
    assert json.loads(moved.stdout)["nextChargeDate"] == to


def test_the_opening_day_is_set_as_a_date_in_the_gyms_zone_and_cleared(world):
    """--opening-day takes a day (the gym's local midnight), refuses what is neither a day
    nor an instant with its offset, and `none` clears it."""
    factory, gym, _ = world
    org, owner = str(gym.organization.id), str(gym.owner.id)
    day = (clock.now() + timedelta(days=400)).date()
    set_ = _run(
        "settings", "set", org, "--timezone", "Asia/Jerusalem",
        "--opening-day", day.isoformat(), "--operator", owner, "--json",
    )  # fmt: skip
    assert set_.exit_code == 0, set_.output
    midnight = datetime.combine(day, time(0), ZoneInfo("Asia/Jerusalem"))
    assert json.loads(set_.stdout)["openingDay"] == midnight.astimezone(UTC).isoformat()
    refused = _run("settings", "set", org, "--opening-day", "soon", "--operator", owner)
    assert refused.exit_code != 0
    assert isinstance(refused.exception, DomainError)
    assert refused.exception.code == "timestamp_not_utc"
    cleared = _run("settings", "set", org, "--opening-day", "none", "--operator", owner, "--json")
    assert json.loads(cleared.stdout)["openingDay"] is None
    with factory() as session:
        row = session.scalar(
            select(BillingSettings).where(BillingSettings.organization_id == gym.organization.id)
        )
        assert row.opening_day is None
