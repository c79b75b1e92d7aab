"""`gymctl billing transaction confirm-no-debit --confirmed-at`: spec B 4.2 wants the
confirmation timestamp in "explicit UTC", as the HTTP door enforces (422
billing_confirmation_time_invalid for +02:00). The command line must refuse the same."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.db import get_engine
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_KEY
from tests.billing_ops.helpers import card_subscription, pending_attempt
from tests.conftest import NOW


@pytest.fixture
def world(committed_pg, card_server, monkeypatch):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_CARD_PROVIDER_URL", card_server.url)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    monkeypatch.setenv("COLUMNS", "250")
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        renewal = card_subscription(session, gym, card_server)
        attempt = pending_attempt(session, renewal, now=NOW - timedelta(minutes=5))
        session.commit()
    return factory, gym, attempt


def test_cli_confirm_no_debit_refuses_a_confirmation_time_not_in_utc(world):
    factory, gym, attempt = world
    evidence = attempt.billing_attempt
    local = (NOW - timedelta(minutes=1)).astimezone(
        __import__("datetime").timezone(timedelta(hours=2))
    )
    result = CliRunner().invoke(
        billing_app,
        [
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
        ],
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    assert getattr(result.exception, "code", None) == "billing_confirmation_time_invalid"
    with factory() as session:
        assert session.get(PaymentTransaction, attempt.id).status == TransactionStatus.pending
