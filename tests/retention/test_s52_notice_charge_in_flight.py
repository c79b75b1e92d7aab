"""A notice given while the renewal charge is in flight (spec B 2.1, 2.2, 3).

Spec B 2.1: cancel_at_period_end is "set by a notice" and cancellation_effective_at is the
"effective date of a notice"; spec B 1: "matured cancellations settle refunds owed for the
unused paid period"; spec B 3: the period-end sweep cancels a plan when
"cancellation_effective_at reached"; spec B 2.2: "A pending billing attempt means the local
outcome is unresolved, not that the card was uncharged." A notice ends the plan at the end of
the period the member paid (a plan whose period is behind it, in debt, ends now: s41).

While a renewal is in flight, the paid period is not known yet: the charge either pays the
next period or opens a debt. `give_notice` reads the period as it stands (over), so the notice
took effect at once, and:
- the sweep, first, cancelled the plan under the charge: the renewal then settled as a
  retry_date_changed review (the member charged for a month of a plan that has ended, an urgent
  follow-up for staff to refund it by hand);
- the renewal, first, granted the month it paid, and the sweep cut that month at once,
  refunding ceil(days) / 365 of it.
Now the sweep leaves a plan whose charge attempt is unresolved to a later pass, as the
lifecycle does (`lifecycle.no_unresolved_attempt`), and a renewal that settles onto a notice
already in effect moves it to the end of the period it paid: the same as a notice given a
moment after the charge settled. A declined charge leaves the notice where it was: the plan
ends now, owing its debt, as a notice given in debt does.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import attempts
from gymctl.models import CancellationNotice, CancellationSettlement, PaymentTransaction, Task
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import Doors, period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, DECLINE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice, staff_notice

pytestmark = pytest.mark.embedded  # the demo gym renews monthly card plans and takes notices

MINUTE = timedelta(minutes=1)
DUE = NOW - MINUTE  # the renewal date: the end of the period paid


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def sweep_doors(sandbox, mailer) -> Doors:
    return Doors(
        provider=sandbox.provider,
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=mailer,
    )


def _charge_in_flight(session, session_factory, gym, sandbox, card):
    """A monthly card plan whose renewal is due: the attempt stored and sent (the provider has
    answered, the answer not yet applied); then the member gives notice."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, card)
    subscription = bf.make_subscription(
        session,
        gym,
        payment_method_id=method.id,
        now=DUE - relativedelta(months=1),
    )
    assert subscription.next_charge_date == subscription.current_period_end == DUE
    session.commit()
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
    result = attempts.send_attempt(began, sandbox.provider)
    give_notice(session, gym, subscription, now=NOW + MINUTE)
    session.commit()
    assert subscription.cancellation_effective_at == NOW + MINUTE  # the period read is over
    return subscription, began, result


def _settle(session_factory, began, result, at):
    with session_factory() as worker:
        applied = attempts.apply_outcome(worker, began.transaction_id, result, now=at)
        worker.commit()
    return applied


@pytest.mark.parametrize("first", ["sweep", "renewal"])
def test_a_renewal_paid_while_notice_was_given_runs_to_the_end_of_the_month_it_paid(
    session, session_factory, gym, sandbox, sweep_doors, first
):
    subscription, began, result = _charge_in_flight(session, session_factory, gym, sandbox, APPROVE)
    paid_until = DUE + relativedelta(months=1)

    if first == "sweep":
        assert period_end_sweep(session_factory, sweep_doors, now=NOW + 2 * MINUTE).cancelled == []
    applied = _settle(session_factory, began, result, NOW + 3 * MINUTE)
    swept = period_end_sweep(session_factory, sweep_doors, now=NOW + 4 * MINUTE)

    assert (applied.outcome, applied.alert) == ("charged", None)  # no settlement review
    assert swept.cancelled == []
    session.expire_all()
    assert subscription.status == SubscriptionStatus.active
    assert subscription.current_period_end == paid_until
    assert subscription.cancellation_effective_at == paid_until
    notice = session.scalar(select(CancellationNotice))
    assert notice.effective_at == paid_until
    assert session.scalars(select(Task.kind).where(Task.kind == "payment_follow_up")).all() == []

    # The month runs out: the plan ends then, owing no refund, and nothing renews it.
    ended = period_end_sweep(session_factory, sweep_doors, now=paid_until)
    assert ended.cancelled == [str(subscription.id)]
    settled = session.scalar(select(CancellationSettlement))
    assert (settled.days, settled.amount_in_cents, settled.execution) == (0, 0, "nothing_owed")
    charges = session.scalars(select(PaymentTransaction.status)).all()
    assert charges == [TransactionStatus.completed]


def test_a_declined_renewal_leaves_the_notice_in_effect_and_the_debt_owed(
    session, session_factory, gym, sandbox, sweep_doors
):
    """No period was paid: the notice takes effect now, as one given in debt does (s41). The
    sweep waited for the outcome, then ends the plan; the debt stays owed."""
    subscription, began, result = _charge_in_flight(session, session_factory, gym, sandbox, DECLINE)

    assert period_end_sweep(session_factory, sweep_doors, now=NOW + 2 * MINUTE).cancelled == []
    assert _settle(session_factory, began, result, NOW + 3 * MINUTE).outcome == "declined"
    swept = period_end_sweep(session_factory, sweep_doors, now=NOW + 4 * MINUTE)

    assert swept.cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.ended_at == NOW + MINUTE
    assert subscription.debt_amount_in_cents == subscription.price_in_cents
    assert session.scalar(select(CancellationSettlement)).amount_in_cents == 0


def test_a_staff_date_set_before_the_charge_is_kept_when_the_charge_settles_after_it(
    session, session_factory, gym, sandbox, sweep_doors
):
    """Given before the attempt, the notice's date is the one the charge went out under: the
    charge settling after that date does not move it (the review found it moved to the end of
    the month paid, the member's prorated refund lost). The sweep, which waited for the charge,
    then ends the plan at the staff's date and refunds the rest of the month paid."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, APPROVE)
    subscription = bf.make_subscription(
        session, gym, payment_method_id=method.id, now=DUE - relativedelta(months=1)
    )
    effective = NOW + timedelta(days=1)
    staff_notice(session, gym, subscription, effective, now=NOW - MINUTE)  # before the attempt
    session.commit()
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
    assert began.outcome == "started"  # the date is after the renewal's instant
    result = attempts.send_attempt(began, sandbox.provider)
    assert period_end_sweep(session_factory, sweep_doors, now=effective).cancelled == []

    applied = _settle(session_factory, began, result, NOW + timedelta(days=2))
    swept = period_end_sweep(session_factory, sweep_doors, now=NOW + timedelta(days=2))

    assert applied.outcome == "charged"
    assert swept.cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.ended_at == effective
    assert session.scalar(select(CancellationNotice)).effective_at == effective
    settled = session.scalar(select(CancellationSettlement))
    assert settled.days > 0  # the rest of the month paid
    assert settled.amount_in_cents > 0
