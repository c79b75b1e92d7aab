"""The billing forecast (issue 24): the daemons' sweeps run on a scratch copy of one
organization, on a fixed clock; the real database is only read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import forecast as fc
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import AttemptKind, PlanType, TransactionStatus
from gymctl.providers.card import Outcome, Terminal
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider, connect_other_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

DAYS = 60
LEDGER = (
    "subscription_id",
    "type",
    "status",
    "provider",
    "amount_in_cents",
    "currency",
    "attempt_kind",
    "obligation_key",
    "created_at",
    "updated_at",
)


def small_gym(session):
    """Card renewals (one due tomorrow), a debt being retried, a presale opening in ten days,
    a cash plan that lapses, a pay-later pack and a gift: each on its own member."""
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))

    def member():
        user = factories.user(session)
        return user, factories.membership(session, user=user, organization=gym.organization)

    def card_sub(**fields):
        user, membership = member()
        card = bf.make_card(session, gym, user=user)
        return bf.make_subscription(
            session, gym, PlanType.card, membership=membership, payment_method_id=card.id, **fields
        )

    card_sub()
    card_sub(now=NOW - timedelta(days=29))
    card_sub(now=NOW - timedelta(days=20))
    card_sub(in_debt_since=NOW - timedelta(days=2), retry_at=NOW + timedelta(hours=5))
    card_sub(presale_opening=NOW + timedelta(days=10))
    bf.make_subscription(session, gym, PlanType.cash, membership=member()[1])
    bf.make_subscription(
        session, gym, PlanType.pack, membership=member()[1], pay_later_due=NOW + timedelta(days=3)
    )
    bf.make_subscription(session, gym, PlanType.gift, membership=member()[1])
    session.commit()
    return gym


def run_daemons_hourly(session_factory, until, provider):
    """The reference: the same jobs at every hourly tick (and the daily 02:00) on the test
    clock, on the real database. Every instant of `small_gym` falls on an hour."""
    jobs = fc.forecast_jobs(provider, TEST_CIPHER)
    at = NOW
    while at <= until:
        for job in jobs:
            if fc.next_tick(job, at) == at:
                job.run(session_factory, at)
        at += timedelta(hours=1)


def _rows(rows, columns=None):
    picked = [{k: v for k, v in row.items() if columns is None or k in columns} for row in rows]
    return sorted(picked, key=lambda row: sorted((k, str(v)) for k, v in row.items()))


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_forecast_is_what_the_daemons_do_on_the_test_clock(session, session_factory, tmp_path):
    """ "A test runs a small organization both ways, the forecast for 60 days and the real
    sweeps on the test clock for the same 60 days with the same provider answers, and compares
    every subscription's status, dates and ledger: identical." (issue 24)"""
    gym = small_gym(session)
    org = gym.organization.id
    until = NOW + timedelta(days=DAYS)
    before = session.scalar(select(func.count()).select_from(PaymentTransaction))

    forecast = fc.simulate(
        session,
        org,
        now=NOW,
        until=until,
        cipher=TEST_CIPHER,
        decline_rate=0.3,
        seed=7,
        scratch_dir=tmp_path,
    )

    # The real database was only read.
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == before
    assert list(tmp_path.iterdir()) == []  # the scratch database is dropped

    run_daemons_hourly(session_factory, until, fc.SeededCardProvider(0.3, seed=7))
    session.expire_all()
    real_subs = [
        dict(r._mapping)
        for r in session.execute(
            select(Subscription.__table__).where(Subscription.organization_id == org)
        )
    ]
    real_ledger = [
        dict(r._mapping)
        for r in session.execute(
            select(PaymentTransaction.__table__).where(PaymentTransaction.organization_id == org)
        )
    ]
    assert _rows(forecast.final["subscriptions"]) == _rows(real_subs)
    assert _rows(forecast.final["payment_transactions"], LEDGER) == _rows(real_ledger, LEDGER)
    # The run was not trivial: money came in, a debt was opened, plans ended.
    periods = forecast.periods()
    assert sum(p["moneyInCents"] for p in periods) > 0
    assert sum(p["debtsOpened"] for p in periods) > 0
    # The presale's opening day came: opened, or declined into debt (ids order the draws).
    assert "scheduled" not in {str(row["status"]) for row in forecast.final["subscriptions"]}
    assert sum(p["cancelledForNonPayment"] for p in periods) > 0


def _counts(session):
    return [
        session.scalar(select(func.count()).select_from(model))
        for model in (Subscription, PaymentTransaction)
    ]


def test_an_organization_on_another_provider_is_refused_unless_lifecycle_only(session, tmp_path):
    """ "an organization on a provider the collector cannot reconcile (say so; its renewals are
    provider-direct and only the lifecycle part is forecast)" (issue 24)."""
    gym = bf.make_gym(session)
    connect_other_provider(session, gym, "other_pay")
    bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    before = _counts(session)
    until = NOW + timedelta(days=40)

    with pytest.raises(DomainError) as refused:
        fc.simulate(session, gym.organization.id, now=NOW, until=until, cipher=TEST_CIPHER)
    assert refused.value.code == "provider_not_reconcilable"
    assert refused.value.status == 422
    assert "only the lifecycle part" in str(refused.value)

    partial = fc.simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=until,
        cipher=TEST_CIPHER,
        lifecycle_only=True,
        scratch_dir=tmp_path,
    )
    assert partial.lifecycle_only
    assert sum(p["debtsOpened"] for p in partial.periods()) == 1  # the cash plan lapses
    assert _counts(session) == before


@pytest.mark.parametrize(
    ("until", "code", "status"),
    [
        (NOW - timedelta(days=1), "forecast_date_past", 422),
        (NOW + timedelta(days=3 * 366), "forecast_date_too_far", 422),
    ],
)
def test_a_date_in_the_past_or_beyond_three_years_is_refused(session, until, code, status):
    gym = bf.make_gym(session)
    session.commit()
    before = _counts(session)
    with pytest.raises(DomainError) as refused:
        fc.simulate(session, gym.organization.id, now=NOW, until=until, cipher=TEST_CIPHER)
    assert (refused.value.code, refused.value.status) == (code, status)
    assert _counts(session) == before


def test_explain_lists_each_sweep_that_touched_the_subscription(session, tmp_path):
    gym = bf.make_gym(session)
    subscription = bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    result = fc.simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=NOW + timedelta(days=45),
        cipher=TEST_CIPHER,
        scratch_dir=tmp_path,
    )
    timeline = result.explain(subscription.id)
    assert [(step["job"], step["event"]) for step in timeline] == [
        ("billing_lifecycle", "subscription.debt_opened"),
        ("billing_lifecycle", "subscription.cancelled"),
    ]
    assert timeline[1]["payload"]["reason"] == "non_payment"


def test_explain_names_a_subscription_of_the_organization_or_is_refused(session):
    """--explain of another gym's subscription or of a made-up id is 404 subscription_not_found
    (the CLI checks it before the forecast runs), not an empty timeline."""
    import uuid

    gym, other = bf.make_gym(session), bf.make_gym(session)
    own = bf.make_subscription(session, gym, PlanType.cash)
    theirs = bf.make_subscription(session, other, PlanType.cash)
    session.commit()
    fc.check_explain(session, gym.organization.id, own.id)
    for wanted in (theirs.id, uuid.uuid4()):
        with pytest.raises(DomainError) as refused:
            fc.check_explain(session, gym.organization.id, wanted)
        assert (refused.value.code, refused.value.status) == ("subscription_not_found", 404)


def test_what_happens_at_the_until_instant_counts_in_the_last_period(session, tmp_path):
    """The clock runs up to and including --until: a debt opened at that very tick is counted
    in the last period, not lost (nor a crash)."""
    gym = bf.make_gym(session)
    cash = bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    result = fc.simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=cash.cash_prepaid_through,
        cipher=TEST_CIPHER,
        by="day",  # `until` is a period boundary
        scratch_dir=tmp_path,
    )
    assert [p["debtsOpened"] for p in result.periods()][-1] == 1


def test_from_history_uses_the_declined_share_of_the_last_90_days(session):
    """--from-history: the organization's own decline rate of the last 90 days; a technical
    failure the provider confirmed it never charged is not a decline."""
    gym = bf.make_gym(session)
    recurring = {"attempt_kind": AttemptKind.recurring, "provider": "card_provider"}
    for status in ("completed", "completed", "completed", "failed"):
        bf.make_transaction(session, gym, status=TransactionStatus(status), **recurring)
    bf.make_transaction(
        session,
        gym,
        status=TransactionStatus.failed,
        billing_resolution={"decision": "not_charged"},
        **recurring,
    )
    bf.make_transaction(
        session, gym, status=TransactionStatus.failed, now=NOW - timedelta(days=91), **recurring
    )
    session.commit()
    assert fc.history_decline_rate(session, gym.organization.id, now=NOW) == 0.25


def test_a_debt_retry_that_settles_counts_as_money_in_and_a_debt_cleared(session, tmp_path):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    card = bf.make_card(session, gym)
    declined_at = NOW - timedelta(days=1)
    bf.make_subscription(
        session,
        gym,
        PlanType.card,
        now=declined_at - timedelta(days=30),
        payment_method_id=card.id,
        in_debt_since=declined_at,
        next_charge_date=declined_at,
        retry_at=NOW + timedelta(hours=2),
    )
    session.commit()
    result = fc.simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=NOW + timedelta(days=3),
        cipher=TEST_CIPHER,
        by="day",
        scratch_dir=tmp_path,
    )
    first = result.periods()[0]
    assert (first["debtsCleared"], first["moneyInCents"]) == (1, 9900)


def test_a_cards_decline_is_its_own_whatever_the_order_and_the_other_cards():
    """Seeded per card: the n-th charge of a card draws from the seed, its token and n, so the
    sweeps' order and a member added since move no one else's fate."""
    terminal = Terminal(number="1000", api_name="forecast")

    def fates(tokens, seed=5):
        provider = fc.SeededCardProvider(0.5, seed=seed)
        answers = {}
        for n, token in enumerate(tokens):
            result = provider.charge_token(
                terminal,
                token=token,
                expiry=None,
                amount_in_cents=9900,
                currency="ILS",
                unique_id=f"attempt-{n}",
            )
            answers.setdefault(token, []).append(result.outcome)
        return answers

    cards = [f"tok_{n}" for n in range(40)] * 3
    first = fates(cards)
    assert fates(list(reversed(cards))) == first
    assert {k: v for k, v in fates(["tok_new", *cards]).items() if k != "tok_new"} == first
    outcomes = [o for answers in first.values() for o in answers]
    assert Outcome.declined in outcomes
    assert Outcome.approved in outcomes
    assert fates(cards, seed=6) != first


def test_the_scratch_migration_logs_no_alembic_info_lines(tmp_path, caplog):
    """A queued forecast's scratch database is migrated in the daemon: alembic's INFO lines
    (about 20 a forecast) are left out of its log, and alembic's level is put back after."""
    import logging

    from gymctl.db import release_engine

    caplog.set_level(logging.INFO)
    url = f"sqlite:///{tmp_path / 'scratch.sqlite3'}"
    before = logging.getLogger("alembic").level
    try:
        fc.scratch_engine(url)
    finally:
        release_engine(url)
    assert [r for r in caplog.records if r.name.startswith("alembic")] == []
    assert logging.getLogger("alembic").level == before
    logging.getLogger("alembic.runtime.migration").info("after the scratch migration")
    assert [r.getMessage() for r in caplog.records] == ["after the scratch migration"]


def test_the_copy_puts_each_row_before_the_rows_that_name_it(session):
    """Users were copied last, each clearing deferred foreign-key violations that SQLite
    found by looking through every table naming users (16 of the 20 s of a 20,000-subscription
    copy): the read order is now the order of the keys."""
    gym = small_gym(session)
    session.commit()
    found = fc._read_organization(session, gym.organization.id, NOW)
    order = [table.name for table, _rows in found]
    assert order[0] == "users"
    assert order.count("users") == 1
    for position, (table, _rows) in enumerate(found):
        named = {fk.column.table.name for fk in table.foreign_keys} - {table.name}
        assert all(order.index(other) < position for other in named if other in order), table
    users = dict(found[0][1][0])
    assert users["id"] in {
        row["user_id"] for _t, rows in found[1:] for row in rows if "user_id" in row
    }
