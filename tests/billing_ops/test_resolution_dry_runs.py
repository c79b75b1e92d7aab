"""A `--dry-run` of reconcile or confirm-no-debit changes nothing (DESIGN 4: "--dry-run where it
writes"): no row, no event (the outbox), and no billing alert, the one effect a rollback cannot
undo (it pages someone). Asking the provider, a read, is allowed: the dry run shows what the
real run would answer. On both engines, through the CLI."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from sqlalchemy import func, select
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.errors import DomainError
from gymctl.models import AuditLog, OutboxEvent, PaymentTransaction, Task
from gymctl.models.billing import TransactionStatus
from tests.billing_ops.contradictions import cli_gym, contradicted_attempt
from tests.conftest import NOW


def _world(url, card_server, monkeypatch):
    """A renewal the provider charged for another amount than the one stored: its reconcile,
    or the owner's confirm-no-debit, finds a contradiction (the alert billing_contradiction)."""
    with cli_gym(url, card_server, monkeypatch) as (factory, session, gym):
        attempt, _ = contradicted_attempt(session, gym, card_server)
    return factory, gym, attempt


def _counts(factory) -> tuple[int, ...]:
    with factory() as session:
        return tuple(
            session.scalar(select(func.count()).select_from(model))
            for model in (AuditLog, OutboxEvent, Task, PaymentTransaction)
        )


def _alerts(caplog) -> list[str]:
    return [r.args["reason"] for r in caplog.records if r.name == "gymctl.billing.alerts"]


def test_a_dry_run_reconcile_raises_no_alert_and_keeps_nothing(
    committed_database, card_server, monkeypatch, caplog
):
    factory, gym, attempt = _world(committed_database, card_server, monkeypatch)
    before = _counts(factory)
    args = ["transaction", "reconcile", str(gym.organization.id), str(attempt.id)]
    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        dry = CliRunner().invoke(
            billing_app, [*args, "--operator", str(gym.owner.id), "--dry-run", "--json"]
        )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["outcome"] == "contradiction"  # what the real run would find
    assert _alerts(caplog) == []
    assert _counts(factory) == before
    with factory() as session:
        kept = session.get(PaymentTransaction, attempt.id)
        assert kept.status == TransactionStatus.pending
        assert "contradiction" not in kept.billing_attempt

    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        real = CliRunner().invoke(billing_app, [*args, "--operator", str(gym.owner.id), "--json"])
    assert real.exit_code == 0, real.output
    assert _alerts(caplog) == ["billing_contradiction"]  # the real run still pages


def test_a_dry_run_confirm_no_debit_vetoed_by_the_provider_raises_no_alert(
    committed_database, card_server, monkeypatch, caplog
):
    factory, gym, attempt = _world(committed_database, card_server, monkeypatch)
    before = _counts(factory)
    evidence = attempt.billing_attempt
    args = [
        "transaction", "confirm-no-debit", str(gym.organization.id), str(attempt.id),
        "--request-id", str(uuid.uuid4()),
        "--provider-case-id", "CASE-1",
        "--confirmed-at", (NOW - timedelta(minutes=1)).isoformat(),
        "--external-attempt-id", evidence["externalAttemptId"],
        "--terminal", evidence["terminal"],
        "--amount-in-cents", str(evidence["amountInCents"]),
        "--currency", evidence["currency"],
        "--attest-no-debit", "--attest-cannot-settle-later",
        "--operator", str(gym.owner.id), "--dry-run", "--json",
    ]  # fmt: skip
    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        dry = CliRunner().invoke(billing_app, args)
    assert isinstance(dry.exception, DomainError), dry.output  # the provider's approval vetoes
    assert dry.exception.code == "billing_evidence_mismatch"
    assert _alerts(caplog) == []
    assert _counts(factory) == before
    with factory() as session:
        kept = session.get(PaymentTransaction, attempt.id)
        assert kept.status == TransactionStatus.pending
        assert "contradiction" not in kept.billing_attempt
