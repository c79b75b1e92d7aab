"""The billing sweeps by name: what the daemons run on their schedule and what
`gymctl billing sweep NAME` runs by hand. Each builds its provider and cipher from settings.

A dry run (dry_runs.py) reports what the sweep would touch, under its caps; no provider call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import (
    abandoned_pages,
    checkout,
    codes,
    collector,
    dry_runs,
    forecast_runs,
    lifecycle,
)
from gymctl.billing.recovery import recovery_pass
from gymctl.config import Settings
from gymctl.crypto import billing_cipher
from gymctl.errors import not_found
from gymctl.providers.card_factory import card_provider_from_settings
from gymctl.providers.documents import default_document_provider

SweepResult = dict[str, Any]
Sweep = Callable[[sessionmaker[Session], datetime, Settings], SweepResult]


def catch_up(factory: sessionmaker[Session], now: datetime, settings: Settings) -> SweepResult:
    summary = collector.catch_up(
        factory, card_provider_from_settings(settings), now=now, cipher=billing_cipher(settings)
    )
    url = settings.heartbeat_member_billing_catchup_url
    return _with_heartbeat(summary, url, "memberBillingCatchup")


def daily(factory: sessionmaker[Session], now: datetime, settings: Settings) -> SweepResult:
    summary = collector.daily_sweep(
        factory, card_provider_from_settings(settings), now=now, cipher=billing_cipher(settings)
    )
    url = settings.heartbeat_member_recurring_charge_url
    return _with_heartbeat(summary, url, "memberRecurringCharge")


def _with_heartbeat(summary: collector.Summary, url: str | None, name: str) -> SweepResult:
    return {**summary.as_dict(), "heartbeat": collector.ping_heartbeat(url, summary, name=name)}


def recovery(factory: sessionmaker[Session], now: datetime, settings: Settings) -> SweepResult:
    return recovery_pass(
        factory,
        card_provider_from_settings(settings),
        billing_cipher(settings),
        now=now,
        documents=default_document_provider(),
    )


def side_effects(factory: sessionmaker[Session], now: datetime, settings: Settings) -> SweepResult:
    return collector.side_effect_recovery(factory, now=now).as_dict()


def abandoned_checkouts(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> SweepResult:
    return checkout.abandoned_sweep(
        factory, card_provider_from_settings(settings), now=now, cipher=billing_cipher(settings)
    )


def abandoned_read_back(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> SweepResult:
    """Abandoned pages read back again on their schedule (abandoned_pages): a page paid after
    the abandoned sweep whose webhook was lost is recorded."""
    return abandoned_pages.read_back_abandoned(
        factory, card_provider_from_settings(settings), now=now, cipher=billing_cipher(settings)
    )


def lifecycle_pass(
    factory: sessionmaker[Session], now: datetime, settings: Settings
) -> SweepResult:
    with factory() as session:
        result = lifecycle.run_lifecycle(session, now=now)
        session.commit()
    return result


def forecasts(factory: sessionmaker[Session], now: datetime, settings: Settings) -> SweepResult:
    """The forecasts platform admins queued over HTTP (one per pass; not a money sweep, so not
    in SWEEPS)."""
    return forecast_runs.work_forecast_runs(factory, now=now, cipher=billing_cipher(settings))


SWEEPS: dict[str, Sweep] = {
    "lifecycle": lifecycle_pass,
    "catch-up": catch_up,
    "daily": daily,
    "recovery": recovery,
    "side-effects": side_effects,
    "abandoned-checkouts": abandoned_checkouts,
    "abandoned-read-back": abandoned_read_back,
}


def run_sweep(
    name: str,
    factory: sessionmaker[Session],
    now: datetime,
    settings: Settings,
    *,
    dry_run: bool = False,
) -> SweepResult:
    if name not in SWEEPS:
        raise not_found(codes.UNKNOWN_SWEEP, f"unknown sweep {name}; sweeps: {', '.join(SWEEPS)}")
    if dry_run:  # the sweep's own selection and caps, read and rolled back
        with factory() as session:
            result = dry_runs.DRY_RUNS[name](session, now)
            session.rollback()
        return {**result, "dryRun": True}
    return SWEEPS[name](factory, now, settings)
