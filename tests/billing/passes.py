"""The daemons' billing passes on a test clock, for tests that follow plans through months: the
lifecycle every TICK (the daemon's pass is hourly; every third hour here, the ends falling on
a tick) and the collector's daily sweep at 02:00."""

from __future__ import annotations

from datetime import datetime, timedelta

from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import attempts, collector
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import PaymentTransaction
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

HOUR = timedelta(hours=1)
TICK = 3 * HOUR
MONTH = relativedelta(months=1)
START = NOW.replace(hour=5)  # after the daily sweep: a renewal due then is charged the next day


def run_passes(session, session_factory, sandbox, *, until: datetime, since: datetime = START):
    """Every pass from `since` to `until`, each in a transaction of its own; `session` then
    reads afresh."""
    at = since
    while at <= until:
        if at.hour == 2:
            collector.daily_sweep(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)
        with session_factory() as pass_session:
            run_lifecycle(pass_session, now=at)
            pass_session.commit()
        at += TICK
    session.expire_all()


def collect(session_factory, subscription, provider, at: datetime):
    """The collector's charge of one subscription at `at`: its outcome."""
    return collector.collect_subscription(
        session_factory,
        subscription.id,
        provider,
        now=at,
        cipher=TEST_CIPHER,
        summary=collector.Summary(),
    )


def confirm_non_charges(session, session_factory, subscription, provider, times: int) -> datetime:
    """`times` charges the provider never received (the timeout card), each confirmed so by
    the recovery's lookup past its executing grace: the instant the retry then owed is due."""
    at = NOW
    for _ in range(times):
        assert collect(session_factory, subscription, provider, at) == "pending"
        at += attempts.EXECUTING_GRACE
        collector.recover(session_factory, provider, now=at, cipher=TEST_CIPHER)
        session.expire_all()
        at = max(at, subscription.retry_at)
    return at


def retries_sent(session, subscription) -> tuple[list[int], set[str]]:
    """The subscription's attempts in order: their technicalRetry counts, their obligations."""
    sent = session.scalars(
        select(PaymentTransaction)
        .where(PaymentTransaction.subscription_id == subscription.id)
        .order_by(PaymentTransaction.created_at)
    ).all()
    return [t.billing_attempt["technicalRetry"] for t in sent], {t.obligation_key for t in sent}
