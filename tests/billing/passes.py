"""The daemons' billing passes on a test clock, for tests that follow plans through months: the
lifecycle every TICK (the daemon's pass is hourly; every third hour here, the ends falling on
a tick) and the collector's daily sweep at 02:00."""

from __future__ import annotations

from datetime import datetime, timedelta

from dateutil.relativedelta import relativedelta

from gymctl.billing import collector
from gymctl.billing.lifecycle import run_lifecycle
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
