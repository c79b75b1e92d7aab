"""`gymctl billing readiness | verify-account | repair-schedule | transaction ...` through Typer's
runner, on PostgreSQL with real commits and the fake card provider on loopback."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta, timezone

import pytest
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import AuditLog, PaymentTransaction, Subscription
from gymctl.models.billing import TransactionStatus
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_KEY
from tests.billing_ops.helpers import card_subscription, pending_attempt, presale_with_checkout
from tests.conftest import NOW


@pytest.fixture
def world(committed_pg, card_server, monkeypatch):
    """A committed gym: a presale whose first charge went missing, a renewal attempt stored
    but never sent, and the environment a CLI process would have."""
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_CARD_PROVIDER_URL", card_server.url)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    monkeypatch.setenv("COLUMNS", "250")
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        presale, _ = presale_with_checkout(
            session, gym, card_server, opening=NOW + timedelta(days=20)
        )
        presale.next_charge_date = None
        renewal = card_subscription(session, gym, card_server)
        attempt = pending_attempt(session, renewal, now=NOW - timedelta(minutes=5))
        session.commit()
    return factory, gym, presale, attempt


def _run(*args: str):
    return CliRunner().invoke(billing_app, list(args))


def test_readiness_json_and_table(world):
    _, gym, _, attempt = world
    report = _run("readiness", str(gym.organization.id), "--json")
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    assert data["checkState"] == "blocked"
    assert data["unresolvedProviderTransactions"]["items"][0]["transactionId"] == str(attempt.id)
    every = json.loads(_run("readiness", gym.organization.slug, "--all", "--json").stdout)
    assert {i["subscriptionId"] for i in every["items"]} == {
        i["subscriptionId"] for i in data["items"]
    }
    table = _run("readiness", gym.organization.slug)
    assert table.exit_code == 0, table.output
    assert "blocked" in table.stdout
    assert "first_charge_missing" in table.stdout


def test_repair_schedule_dry_run_keeps_nothing_then_repairs(world):
    factory, gym, presale, _ = world
    args = ["repair-schedule", gym.organization.slug, str(presale.id)]
    operator = ["--operator", str(gym.owner.id)]
    dry = _run(*args, "--expected-next-charge-at", "none", *operator, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    with factory() as session:
        assert session.get(Subscription, presale.id).next_charge_date is None

    done = _run(*args, "--expected-next-charge-at", "none", *operator, "--json")
    assert done.exit_code == 0, done.output
    with factory() as session:
        assert session.get(Subscription, presale.id).next_charge_date == NOW + timedelta(days=20)

    stale = _run(*args, "--expected-next-charge-at", "none", *operator)
    assert isinstance(stale.exception, DomainError)
    assert stale.exception.code == "billing_readiness_state_changed"
    nobody = _run(*args, "--expected-next-charge-at", "none", "--operator", "user_nobody")
    assert nobody.exception.code == "operator_user_required"


def test_repair_schedule_refuses_an_empty_expected_charge(world):
    """`--expected-next-charge-at "$NEXT"` with NEXT unset states nothing: it was read as
    "none", so the guard against a stale report passed on a schedule nobody read."""
    factory, gym, presale, _ = world
    args = ["repair-schedule", gym.organization.slug, str(presale.id)]
    empty = _run(*args, "--expected-next-charge-at", "", "--operator", str(gym.owner.id))
    assert isinstance(empty.exception, DomainError)
    assert (empty.exception.code, empty.exception.status) == ("timestamp_not_utc", 400)
    with factory() as session:
        assert session.get(Subscription, presale.id).next_charge_date is None


def test_verify_account_from_the_cli(world):
    factory, gym, presale, _ = world
    answer = _run(
        "verify-account", gym.organization.slug, str(presale.id), "--operator", str(gym.owner.id)
    )
    assert answer.exit_code == 0, answer.output
    assert "already_verified" in answer.stdout
    with factory() as session:
        assert session.query(AuditLog).filter(AuditLog.target_id == str(presale.id)).count() == 2


def test_transaction_show_confirm_no_debit_and_authorize_retry(world):
    factory, gym, _, attempt = world
    org, tx = gym.organization.slug, str(attempt.id)
    shown = _run("transaction", "show", org, tx, "--json")
    assert json.loads(shown.stdout)["state"] == "unresolved"
    reconciled = _run("transaction", "reconcile", org, tx, "--operator", str(gym.owner.id))
    assert reconciled.exit_code == 0, reconciled.output
    assert "no_verified_success" in reconciled.stdout

    evidence = attempt.billing_attempt
    confirm = [
        "transaction", "confirm-no-debit", org, tx,
        "--request-id", str(uuid.uuid4()),
        "--provider-case-id", "CASE-9",
        "--confirmed-at", (NOW - timedelta(minutes=1)).isoformat(),
        "--external-attempt-id", evidence["externalAttemptId"],
        "--terminal", evidence["terminal"],
        "--amount-in-cents", str(evidence["amountInCents"]),
        "--currency", evidence["currency"],
        "--attest-no-debit", "--attest-cannot-settle-later",
        "--operator", str(gym.owner.id),
    ]  # fmt: skip
    member = _run(*confirm[:-1], str(gym.member.id))
    assert member.exception.code == "owner_required"
    done = _run(*confirm, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["state"] == "not_charged_paused"
    retry = _run("transaction", "authorize-retry", org, tx, "--operator", str(gym.owner.id))
    assert retry.exit_code == 0, retry.output
    with factory() as session:
        row = session.get(PaymentTransaction, attempt.id)
        assert row.status == TransactionStatus.cancelled
        assert row.billing_resolution["retryAuthorized"] is True


def test_cli_confirm_no_debit_refuses_a_confirmation_time_not_in_utc(world):
    """Spec B 4.2 wants the confirmation timestamp in "explicit UTC", as the HTTP door enforces
    (422 billing_confirmation_time_invalid for +02:00): the command line refuses the same."""
    factory, gym, _, attempt = world
    evidence = attempt.billing_attempt
    local = (NOW - timedelta(minutes=1)).astimezone(timezone(timedelta(hours=2)))
    result = _run(
        "transaction", "confirm-no-debit", gym.organization.slug, str(attempt.id),
        "--request-id", str(uuid.uuid4()),
        "--provider-case-id", "CASE-9",
        "--confirmed-at", local.isoformat(),  # ...+02:00: an instant, but not UTC
        "--external-attempt-id", evidence["externalAttemptId"],
        "--terminal", evidence["terminal"],
        "--amount-in-cents", str(evidence["amountInCents"]),
        "--currency", evidence["currency"],
        "--attest-no-debit", "--attest-cannot-settle-later",
        "--operator", str(gym.owner.id), "--json",
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    assert getattr(result.exception, "code", None) == "billing_confirmation_time_invalid"
    with factory() as session:
        assert session.get(PaymentTransaction, attempt.id).status == TransactionStatus.pending
