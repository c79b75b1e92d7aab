"""Money safety of the period-end sweep (DESIGN 6): a crash between the provider's refund and
the commit, and two daemons sweeping at once, never refund twice."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.billing.attempts import lock_subscription
from gymctl.db import get_engine
from gymctl.models import CancellationSettlement, PaymentTransaction
from gymctl.models.billing import TransactionType
from gymctl.providers.card_http import REFUND
from gymctl.providers.mail import read_mailbox
from gymctl.retention import settlement
from gymctl.retention.settlement import period_end_sweep, settle_one
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.conftest import NOW, wait_for_a_lock_wait
from tests.retention.conftest import give_notice, paid_card_subscription

D = timedelta(days=1)


def _matured(session, gym, card_server):
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 40 * D
    )
    give_notice(session, gym, subscription, now=NOW - 30 * D)
    subscription.cancellation_effective_at = NOW
    return subscription


def test_the_settlement_never_asks_the_provider_before_its_refund_is_committed(
    session, session_factory, gym, card_server, doors, mailbox
):
    """A crash before the claim's COMMIT: the provider was never asked, so nothing can have
    been refunded that the ledger does not know about."""
    subscription = _matured(session, gym, card_server)
    session.commit()
    with session_factory() as crashed:
        locked = lock_subscription(crashed, subscription.id)
        settle_one(crashed, locked, doors, now=NOW)
        assert card_server.requests(REFUND) == 0
        crashed.rollback()  # the process died before COMMIT
    assert session.scalar(select(func.count()).select_from(CancellationSettlement)) == 0
    result = period_end_sweep(session_factory, doors, now=NOW + timedelta(minutes=5))
    assert result.cancelled == [str(subscription.id)]
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [4000]
    assert len(read_mailbox(mailbox)) == 1


def test_a_crash_after_the_claim_is_committed_is_refunded_once_by_the_next_sweep(
    session, session_factory, gym, card_server, doors, mailbox
):
    subscription = _matured(session, gym, card_server)
    session.commit()
    with session_factory() as crashed:
        locked = lock_subscription(crashed, subscription.id)
        settle_one(crashed, locked, doors, now=NOW)
        crashed.commit()  # the refund is stored; the process dies before sending it
    result = period_end_sweep(session_factory, doors, now=NOW + timedelta(minutes=5))
    assert (result.cancelled, result.refunded) == ([], 1)
    refunds = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
    ).all()
    assert [refund.amount_in_cents for refund in refunds] == [4000]  # 36500 x 40 / 365
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [4000]
    assert period_end_sweep(session_factory, doors, now=NOW + D).refunded == 0
    assert card_server.requests(REFUND) == 1


def test_two_daemons_sweeping_at_once_settle_each_notice_once(committed_pg, card_server, doors):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        matured = [_matured(session, gym, card_server) for _ in range(3)]
        session.commit()
    start = threading.Barrier(2)
    results, errors = [], []

    def sweep() -> None:
        try:
            start.wait()
            results.append(period_end_sweep(factory, doors, now=NOW))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    cancelled = sorted(i for result in results for i in result.cancelled)
    assert cancelled == sorted(str(s.id) for s in matured)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(CancellationSettlement)) == 3
    assert card_server.requests(REFUND) == 3
    assert sum(result.emailed for result in results) == 3


def test_a_notice_skipped_while_another_daemon_held_its_member_is_settled_in_the_same_pass(
    committed_pg, card_server, doors
):
    """PostgreSQL locks the membership first (spec B 4.1): a daemon settling another plan of
    the same member holds this notice's rows too. The sweep skips it rather than wait, then
    tries it once more after the others, waiting this time: two sweeps at once each left it
    to the other, which had moved on (a notice matured and unsettled for a pass)."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        held = _matured(session, gym, card_server)
        session.commit()
    swept = []
    with factory() as other_daemon:
        assert lock_subscription(other_daemon, held.id) is not None
        sweep = threading.Thread(
            target=lambda: swept.append(period_end_sweep(factory, doors, now=NOW))
        )
        sweep.start()
        wait_for_a_lock_wait(engine)  # skipped once, now waiting on the second try
        other_daemon.rollback()
    sweep.join()

    assert swept[0].cancelled == [str(held.id)]
    assert card_server.requests(REFUND) == 1


def test_a_notice_whose_rows_stay_held_past_the_wait_is_left_for_the_next_pass(
    committed_pg, card_server, doors, monkeypatch
):
    """The second try waits at most WAIT_FOR_ROWS (lock_timeout): a holder left idle in its
    transaction does not stop the sweep for good, and the next pass settles the notice."""
    monkeypatch.setattr(settlement, "WAIT_FOR_ROWS", "200ms")
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        held = _matured(session, gym, card_server)
        session.commit()
    with factory() as idle_holder:
        assert lock_subscription(idle_holder, held.id) is not None
        stalled = period_end_sweep(factory, doors, now=NOW)
        idle_holder.rollback()

    assert (stalled.cancelled, card_server.requests(REFUND)) == ([], 0)
    assert period_end_sweep(factory, doors, now=NOW).cancelled == [str(held.id)]
    assert card_server.requests(REFUND) == 1
