"""Where the forecast meets production (issue 24: "the production rules, not a second model of
them"): the recovery job's every step, the lifecycle's own grace default, an attempt that was
in flight when the organization was copied, the alerts that page someone, and a caller who
leaves (Ctrl-C) while it runs."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from daemons.jobs import JOBS
from gymctl.billing import attempts, collector, refunds
from gymctl.billing import forecast as fc
from gymctl.billing.accounts import CARD_PROVIDER
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import (
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
)
from gymctl.providers.documents import LocalDocumentProvider
from tests import factories
from tests.billing import factories as bf
from tests.billing import test_due_rules as due_rules
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_forecast import run_daemons_hourly
from tests.conftest import NOW

gym = due_rules.gym  # the fixture: a gym on the card provider, committed


def card_subscription(session, gym, **fields):
    user = factories.user(session)
    membership = factories.membership(session, user=user, organization=gym.organization)
    card = bf.make_card(session, gym, user=user)
    return bf.make_subscription(
        session, gym, PlanType.card, membership=membership, payment_method_id=card.id, **fields
    )


def forecast(session, gym, tmp_path, days: int, **options):
    return fc.simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=NOW + timedelta(days=days),
        cipher=TEST_CIPHER,
        by="day",
        scratch_dir=tmp_path,
        **options,
    )


def final(result, table: str, row_id):
    return next(row for row in result.final[table] if row["id"] == row_id)


# The daemons' jobs a forecast leaves out, and why: none moves money or a subscription's status.
NOT_FORECAST = {
    "event_relay": "delivers outbox events to the sink",
    "invitation_expiry": "staff invitations",
    "invitation_batches": "staff invitations (bulk invites)",
    "member_imports": "roster imports",
    "link_requests": "emails asking a login to link a gym's profile",
    "job_runs_prune": "the runner's ledger",
    "outbox_prune": "forgets delivered outbox events",
    "rate_windows_prune": "rate-limit windows",
    "webhook_deliveries_prune": "webhook replay keys",
    "movement_jobs": "the movement library",
    "release_candidate_supersede": "app releases",
    "bridge_lease_rescue": "the bridge's queue",
    "bridge_schedule_poll": "the bridge's queue",
    "bridge_booking_reconcile": "the bridge's queue",
    "bridge_dispatch": "calls the external system",
    "billing_side_effects": "reports settled payments whose effects are pending (alerts only)",
    # It moves money only for a page the provider says was paid: a forecast's never is
    # (SeededCardProvider answers every page still pending).
    "billing_abandoned_read_back": "reads abandoned pages back; a forecast's are never paid",
    "billing_forecasts": "runs forecasts",
    "retention_escalation": "escalates staff tasks and closes cases of plans already ended",
    "retention_digest": "emails owners a digest",
    "refund_task_sweep": "bumps overdue staff tasks",
    "billing_member_emails": "records emails to members",
    "member_pushes": "pushes to members' devices",
    "booking_no_shows": "class attendance",
}


def test_every_daemon_job_is_forecast_at_its_cadence_or_left_out_for_a_reason():
    """The forecast runs the daemons' rows that move money or status, at their interval and
    offset; a job added to the daemons fails here until it joins the forecast or says why not."""
    forecast_rows = {
        job.name: (job.interval_seconds, job.offset_seconds)
        for job in fc.forecast_jobs(fc.SeededCardProvider(), TEST_CIPHER)
    }
    daemon_rows = {job.name: (job.interval_seconds, job.offset_seconds) for job in JOBS}
    assert set(forecast_rows).isdisjoint(NOT_FORECAST)
    assert set(daemon_rows) == set(forecast_rows) | set(NOT_FORECAST)
    assert {name: daemon_rows[name] for name in forecast_rows} == forecast_rows


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_grace_of_zero_days_cancels_at_the_first_midnight_as_the_daemons_do(
    session, session_factory, gym, tmp_path
):
    """billing_grace_days 0 is a setting a gym may choose (org_settings): day 0 ends at the
    gym's next midnight. The forecast's stepping read 0 as "unset" (7 days) and slept past that
    midnight to the debt's retry, which the recovery job then collected: a plan the daemons
    cancel for non-payment came out of the forecast active and paid."""
    bf.make_billing_settings(session, gym.organization, billing_grace_days=0)
    declined = NOW - timedelta(hours=1)
    subscription = card_subscription(
        session,
        gym,
        in_debt_since=declined,
        next_charge_date=declined,
        retry_at=NOW + timedelta(hours=20, minutes=30),
    )
    session.commit()

    result = forecast(session, gym, tmp_path, days=3)
    run_daemons_hourly(session_factory, NOW + timedelta(days=3), fc.SeededCardProvider())

    session.expire_all()
    real = session.get(Subscription, subscription.id)
    assert real.status == SubscriptionStatus.cancelled  # the daemons' answer, at midnight
    row = final(result, "subscriptions", subscription.id)
    assert (row["status"], row["cancelled_at"]) == (real.status, real.cancelled_at)
    assert sum(p["moneyInCents"] for p in result.periods()) == 0


def test_a_stored_refund_is_resumed_by_the_forecasts_recovery_as_by_the_daemons(
    session, gym, tmp_path
):
    """The daemons' recovery job resumes stored card refunds and pending desk charges as well
    as attempts (gymctl.billing.recovery, one pass for both): the forecast left a refund copied
    mid-flight pending for ever, and the charge it refunds with it."""
    charge = bf.make_transaction(
        session,
        gym,
        provider=CARD_PROVIDER,
        provider_transaction_id="p-1",
        billing_attempt={"terminal": "1000"},
        now=NOW - timedelta(days=2),
    )
    session.commit()
    refund = refunds.begin_refund(
        session,
        transaction=charge,
        amount_cents=1000,
        reason="goodwill",
        actor_user_id=None,
        now=NOW - timedelta(hours=1),
        documents=LocalDocumentProvider(),
    )
    session.commit()

    result = forecast(session, gym, tmp_path, days=1)

    assert final(result, "payment_transactions", refund.id)["status"] == TransactionStatus.refunded
    session.expire_all()
    assert session.get(PaymentTransaction, refund.id).status == TransactionStatus.refund_pending


def test_an_attempt_in_flight_when_copied_is_answered_as_a_charge_is(session, gym, tmp_path):
    """An attempt stored and sent by the real collector, its answer not applied yet when the
    organization was copied: the forecast cannot ask the real provider. Answered "never
    received" (the sandbox's answer to an id it did not issue), recovery closed it as not
    charged and the collector charged the member a second time; it is drawn as any charge is
    (approved, at the default decline rate of 0), so the member pays once."""
    subscription = card_subscription(session, gym, now=NOW - timedelta(days=31, hours=1))
    session.commit()
    began = attempts.begin_attempt(
        session, subscription.id, now=NOW - timedelta(minutes=1), cipher=TEST_CIPHER
    )
    assert began.outcome == attempts.BeganOutcome.started
    session.commit()

    result = forecast(session, gym, tmp_path, days=2)

    charges = [
        row
        for row in result.final["payment_transactions"]
        if row["subscription_id"] == subscription.id
    ]
    assert [(row["id"], row["status"]) for row in charges] == [
        (began.transaction_id, TransactionStatus.completed)
    ]
    assert final(result, "subscriptions", subscription.id)["status"] == SubscriptionStatus.active


class _Alerts(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_forecast_pages_no_one_and_the_real_collector_still_does(
    session, session_factory, gym, tmp_path
):
    """A billing alert is a warning the error tracker turns into a page, with the real
    subscription's id. A forecast that meets a held collection saw a simulation, not the gym:
    it raises no alert; the daemons' collector, meeting the same row, does."""
    held = card_subscription(session, gym, now=NOW - timedelta(days=31, hours=-1))
    held.collection_paused = True
    session.commit()
    alerts = _Alerts()  # not caplog: the suite may run with -p no:logging
    logging.getLogger("gymctl.billing.alerts").addHandler(alerts)
    try:
        forecast(session, gym, tmp_path, days=2)
        assert alerts.messages == []
        collector.catch_up(
            session_factory,
            fc.SeededCardProvider(),
            now=NOW + timedelta(hours=2),
            cipher=TEST_CIPHER,
        )
    finally:
        logging.getLogger("gymctl.billing.alerts").removeHandler(alerts)
    assert len(alerts.messages) == 1
    assert str(held.id) in alerts.messages[0]


def test_a_forecast_whose_caller_leaves_stops_at_its_next_tick(session, gym, tmp_path):
    """Ctrl-C in `gymctl billing simulate`: the interrupt reached the caller at once, but the
    forecast's worker ran on to the end (a minute or two for a large gym) before the command
    could exit. It now stops at its next tick and its scratch copy is dropped."""
    for _ in range(5):
        card_subscription(session, gym)
    session.commit()
    caller = threading.get_ident()
    ticks: list[object] = []

    def interrupt_the_caller(at) -> None:
        ticks.append(at)
        if len(ticks) == 3:
            signal.pthread_kill(caller, signal.SIGINT)  # what Ctrl-C does to the command

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            forecast(session, gym, tmp_path, days=365, progress=interrupt_the_caller)
    finally:
        signal.signal(signal.SIGINT, previous)
    full = forecast(session, gym, tmp_path, days=365)
    assert len(ticks) < 10 < full.ticks_run
    assert list(tmp_path.iterdir()) == []
    assert session.scalar(select(PaymentTransaction.id).limit(1)) is None
