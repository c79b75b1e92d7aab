"""The period-end sweep (spec B 3, 6, 7, 8): cancellation, outcome, standing order, the refund
owed (floor(charge x ceil(days) / 365)) settled exactly once, and the one email about it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import charge_dates, collector, lifecycle
from gymctl.billing.attempts import begin_attempt
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.errors import DomainError
from gymctl.models import (
    AuditLog,
    CancellationSettlement,
    PaymentTransaction,
    RetentionCase,
    Task,
)
from gymctl.models.billing import (
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.providers.card_http import REFUND
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailError, read_mailbox
from gymctl.retention import notices, settlement
from gymctl.retention.proration import prorated_refund, refund_days
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import (
    TEST_CIPHER,
    make_plan,
    make_subscription,
    make_transaction,
)
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import card_of
from tests.conftest import NOW
from tests.retention.conftest import (
    give_notice,
    log_contact,
    paid_card_subscription,
    staff_notice,
)

D = timedelta(days=1)


# --- the proration formula on its boundaries ---------------------------------------------


def test_effective_on_the_period_end_refunds_nothing():
    assert refund_days(NOW, NOW, []) == 0
    assert refund_days(NOW + D, NOW, []) == 0


def test_one_day_before_the_period_end_is_one_day():
    assert refund_days(NOW - D, NOW, []) == 1
    assert prorated_refund(36500, 1) == 100


def test_a_part_day_counts_as_a_whole_day():
    assert refund_days(NOW - timedelta(hours=1), NOW, []) == 1
    assert refund_days(NOW - D - timedelta(seconds=1), NOW, []) == 2


def test_leap_years_count_the_leap_day_but_divide_by_365():
    start = datetime(2028, 2, 28, tzinfo=UTC)
    assert refund_days(start, datetime(2028, 3, 1, tzinfo=UTC), []) == 2
    assert (
        refund_days(datetime(2028, 1, 1, tzinfo=UTC), datetime(2029, 1, 1, tzinfo=UTC), []) == 366
    )
    assert prorated_refund(36500, 366) == 36500  # never more than the charge
    assert refund_days(datetime(2027, 2, 28, tzinfo=UTC), datetime(2027, 3, 1, tzinfo=UTC), []) == 1


def test_the_refund_is_floored():
    assert prorated_refund(9999, 10) == 273  # 273.94...


def test_opening_delay_pauses_keep_the_refund_basis_and_others_do_not():
    pauses = [{"reason": "opening_delay", "days": 14}, {"reason": "vacation", "days": 5}]
    assert refund_days(NOW - 30 * D, NOW, pauses) == 25
    assert refund_days(NOW - 30 * D, NOW, pauses[:1]) == 30
    spanned = [
        {"reason": "injury", "from": (NOW - 9 * D).isoformat(), "until": (NOW - 6 * D).isoformat()}
    ]
    assert refund_days(NOW - 30 * D, NOW, spanned) == 27


def test_a_dated_pause_counts_only_its_days_inside_the_span_refunded():
    """cashPauses is append-only: a pause taken in an earlier period extended that period, and
    cut every later refund by its days again."""
    earlier = {
        "reason": "travel",
        "from": (NOW - 70 * D).isoformat(),
        "until": (NOW - 60 * D).isoformat(),
    }
    astride = {
        "reason": "travel",
        "from": (NOW - 35 * D).isoformat(),
        "until": (NOW - 25 * D).isoformat(),
    }
    assert refund_days(NOW - 30 * D, NOW, [earlier]) == 30
    assert refund_days(NOW - 30 * D, NOW, [astride]) == 25  # 5 of its 10 days are in the span
    assert refund_days(NOW - 30 * D, NOW, [{"reason": "travel", "days": 10}]) == 20  # undated


# --- the sweep ------------------------------------------------------------------------------


def _sweep(session_factory, doors, at):
    return period_end_sweep(session_factory, doors, now=at)


def _audit(session):
    return session.scalars(
        select(AuditLog).where(AuditLog.action == "subscription.cancellation_settled")
    ).all()


def test_a_matured_card_notice_is_cancelled_and_refunded_once_through_the_provider(
    session, session_factory, gym, card_server, doors, mailbox
):
    subscription, charge = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 100 * D
    )
    staff_notice(session, gym, subscription, NOW + 10 * D)
    session.commit()
    at = NOW + 10 * D
    assert _sweep(session_factory, doors, at - timedelta(seconds=1)).cancelled == []
    result = _sweep(session_factory, doors, at)
    assert result.cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.retention_outcome == "lost_no_contact"
    assert (subscription.ended_at, subscription.next_charge_date) == (at, None)
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.days, settlement.amount_in_cents, settlement.mode, settlement.execution) == (
        90,
        9000,  # floor(36500 x 90 / 365)
        "card",
        "refunded",
    )
    refund = session.get(PaymentTransaction, settlement.refund_transaction_id)
    assert (refund.type, refund.status, refund.amount_in_cents) == (
        TransactionType.refund,
        TransactionStatus.refunded,
        9000,
    )
    assert refund.metadata_["refundedTransactionId"] == str(charge.id)
    [audit] = _audit(session)
    assert audit.data["after"] == {"amountInCents": 9000, "mode": "card"}
    assert audit.data["execution"] == "refund_pending"  # the claim, stored before the provider call
    case = session.scalar(select(RetentionCase))
    assert (case.status, case.outcome) == ("closed", "lost_no_contact")
    [email] = read_mailbox(mailbox)  # the only email about it
    assert email["To"] == gym.member.email
    assert "has ended" in email["Subject"]
    assert "We refunded 90.00 ILS" in email.get_content()

    again = _sweep(session_factory, doors, at + D)
    assert (again.cancelled, again.refunded, again.emailed) == ([], 0, 0)
    assert card_server.requests(REFUND) == 1
    assert len(_audit(session)) == 1
    assert len(read_mailbox(mailbox)) == 1


def test_a_logged_contact_makes_the_outcome_lost_contacted(session, session_factory, gym, doors):
    subscription = make_subscription(session, gym, PlanType.cash, current_period_end=NOW + D)
    case = staff_notice(session, gym, subscription, NOW + D)
    log_contact(session, gym, case)
    session.commit()
    _sweep(session_factory, doors, NOW + D)
    session.expire_all()
    assert subscription.retention_outcome == "lost_contacted"


def test_a_refund_the_provider_refuses_becomes_a_high_priority_owner_task_and_still_cancels(
    session, session_factory, gym, card_server, doors, mailbox
):
    subscription, charge = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 100 * D
    )
    charge.provider_transaction_id = "987654321"  # no such deal there: the provider refuses
    staff_notice(session, gym, subscription, NOW + 50 * D)
    session.commit()
    result = _sweep(session_factory, doors, NOW + 50 * D)
    assert result.cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.execution, settlement.amount_in_cents) == ("refund_failed", 5000)
    assert settlement.detail == {"refundsBefore": [], "error": "refund_declined"}
    task = session.scalar(select(Task).where(Task.kind == "manual_refund"))
    assert (task.priority, task.assignee_id, task.due_at) == (
        "high",
        gym.owner.id,
        NOW + 50 * D + 3 * D,
    )
    refund = session.get(PaymentTransaction, settlement.refund_transaction_id)
    assert refund.status == TransactionStatus.failed
    assert card_server.simulator.refunds() == []
    [email] = read_mailbox(mailbox)
    assert "processing this refund" in email.get_content()
    asked = card_server.requests(REFUND)
    assert _sweep(session_factory, doors, NOW + 51 * D).cancelled == []
    assert card_server.requests(REFUND) == asked  # the owner refunds; the sweep never retries
    assert session.scalar(select(func.count()).select_from(CancellationSettlement)) == 1


def test_a_refund_left_unknown_stays_stored_and_the_next_sweep_sends_the_same_one(
    session, session_factory, gym, card_server, doors, mailbox
):
    """An unknown outcome is not a failure: no owner task (the owner would refund a second
    time); the stored refund is sent again under its own unique id and settles once."""
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 100 * D
    )
    staff_notice(session, gym, subscription, NOW + 50 * D)
    session.commit()
    card_server.inject(REFUND, Fault.answer_lost)
    assert _sweep(session_factory, doors, NOW + 50 * D).cancelled == [str(subscription.id)]
    session.expire_all()
    settlement = session.scalar(select(CancellationSettlement))
    assert settlement.execution == "refund_pending"
    assert session.scalar(select(Task).where(Task.kind == "manual_refund")) is None

    again = _sweep(session_factory, doors, NOW + 50 * D + timedelta(minutes=5))
    assert (again.cancelled, again.refunded) == ([], 1)
    session.expire_all()
    assert settlement.execution == "refunded"
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [5000]
    assert len({b["ExternalUniqTranId"] for b in card_server.received(REFUND)}) == 1
    assert len(read_mailbox(mailbox)) == 1


@pytest.mark.embedded
def test_a_cash_payment_becomes_an_owner_task_due_in_3_days(
    session, session_factory, gym, doors, mailbox
):
    subscription = make_subscription(
        session, gym, PlanType.cash, current_period_end=NOW + 73 * D, price_in_cents=36500
    )
    make_transaction(
        session, gym, subscription_id=subscription.id, method="cash", amount_in_cents=36500
    )
    staff_notice(session, gym, subscription, NOW)
    session.commit()
    _sweep(session_factory, doors, NOW)
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.mode, settlement.execution, settlement.amount_in_cents) == (
        "manual",
        "owner_task",
        7300,
    )
    task = session.scalar(select(Task).where(Task.kind == "manual_refund"))
    assert task.due_at == NOW + 3 * D
    assert "70.00" not in read_mailbox(mailbox)[0].get_content()
    assert "73.00 ILS" in read_mailbox(mailbox)[0].get_content()


def test_effective_on_the_period_end_owes_nothing_and_says_so(
    session, session_factory, gym, card_server, doors, mailbox
):
    subscription, _ = paid_card_subscription(session, gym, card_server)
    staff_notice(session, gym, subscription, subscription.current_period_end)
    session.commit()
    _sweep(session_factory, doors, subscription.current_period_end)
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.amount_in_cents, settlement.mode, settlement.execution) == (
        0,
        "none",
        "nothing_owed",
    )
    assert card_server.requests(REFUND) == 0
    assert "Nothing is owed" in read_mailbox(mailbox)[0].get_content()


def test_a_standing_order_that_cannot_be_cancelled_opens_a_reminder_and_still_cancels(
    session, session_factory, gym, doors
):
    subscription = make_subscription(
        session, gym, payment_collection_method=CollectionMethod.provider_direct
    )
    staff_notice(session, gym, subscription, NOW)
    session.commit()
    assert _sweep(session_factory, doors, NOW).cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    settlement = session.scalar(select(CancellationSettlement))
    assert settlement.standing_order == "failed"
    reminder = session.scalar(select(Task).where(Task.kind == "standing_order_cancellation"))
    assert (reminder.priority, reminder.assignee_id) == ("high", gym.owner.id)


def test_an_email_not_handed_over_is_sent_by_the_next_run_without_settling_again(
    session, session_factory, gym, card_server, doors, mailbox
):
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 30 * D
    )
    staff_notice(session, gym, subscription, NOW)
    session.commit()

    class Down:
        def send(self, email):
            raise MailError("SMTP smtp://127.0.0.1:1 failed: ConnectionRefusedError")

    first = _sweep(session_factory, replace(doors, mailer=Down()), NOW)
    assert (len(first.cancelled), first.emailed) == (1, 0)
    second = _sweep(session_factory, doors, NOW + timedelta(minutes=5))
    assert (second.cancelled, second.emailed, second.refunded) == ([], 1, 0)
    assert card_server.requests(REFUND) == 1
    assert len(read_mailbox(mailbox)) == 1


def test_rows_without_a_matured_notice_are_left_alone(session, session_factory, gym, doors):
    running = make_subscription(session, gym)
    later = make_subscription(session, gym, current_period_end=NOW + 9 * D)
    staff_notice(session, gym, later, NOW + 9 * D)
    session.commit()
    assert _sweep(session_factory, doors, NOW + D).cancelled == []
    session.expire_all()
    assert {running.status, later.status} == {SubscriptionStatus.active}


def test_a_refunded_current_charge_owes_nothing_and_never_refunds_an_older_period(
    session, session_factory, gym, card_server, doors
):
    """The charge of the current period, refunded by staff already, bounds what is owed: the
    sweep must not fall back to last year's completed charge and refund that."""
    subscription, charge = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 100 * D
    )
    make_transaction(
        session,
        gym,
        now=NOW - 365 * D,
        subscription_id=subscription.id,
        type=TransactionType.recurring,
        amount_in_cents=36500,
    )
    charge.status = TransactionStatus.refunded
    charge.metadata_ = {"refundedInCents": 36500}
    staff_notice(session, gym, subscription, NOW + 10 * D)
    session.commit()
    assert _sweep(session_factory, doors, NOW + 10 * D).cancelled == [str(subscription.id)]
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.charge_transaction_id, settlement.amount_in_cents, settlement.execution) == (
        charge.id,
        0,
        "nothing_owed",
    )
    assert card_server.requests(REFUND) == 0
    assert session.scalar(select(func.count()).select_from(Task)) == 1  # the review task only


def test_a_renewal_falling_on_or_after_the_notice_is_never_collected(
    session, session_factory, gym, card_server, doors
):
    """The collector runs every minute, the period-end sweep hourly: a member's notice takes
    effect on the period end, the very instant the renewal falls due. Charging it would take a
    whole period's money and refund only floor(charge x days / 365) of it."""
    end = NOW + 10 * D
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=end, next_charge_date=end
    )
    give_notice(session, gym, subscription)
    session.commit()
    # Not even selected: the catch-up's 5 places per organization go to renewals really due.
    assert collector.due_in(session, gym.organization.id, now=end) == []
    began = begin_attempt(session, subscription.id, now=end, cipher=TEST_CIPHER)
    assert (began.outcome, began.reason) == ("skipped", "not_due")
    session.rollback()
    notices.withdraw_notice(
        session,
        gym.organization.id,
        subscription.id,
        actor_user_id=gym.member.id,
        by_member=True,
        locale="en",
        now=NOW,
    )
    assert collector.due_in(session, gym.organization.id, now=end) == [subscription.id]
    assert begin_attempt(session, subscription.id, now=end, cipher=TEST_CIPHER).outcome == (
        "started"
    )


def _cash_month_paid_at_the_desk(session, gym):
    """A cash plan bought 35 days ago, lapsed into debt at NOW and the debt taken at the desk:
    the subscription and the instant it lapsed."""
    plan = make_plan(session, gym.organization, PlanType.cash, price_in_cents=36500)
    subscription = make_subscription(session, gym, plan=plan, now=NOW - 35 * D)
    session.commit()
    lifecycle.run_lifecycle(session, now=NOW)
    assert (subscription.status, subscription.debt_reason) == (
        SubscriptionStatus.debt,
        "cash_lapsed",
    )
    lapsed = subscription.cash_prepaid_through
    clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        actor_user_id=gym.owner.id,
        now=NOW,
        documents=LocalDocumentProvider(),
    )
    return subscription, lapsed


def test_a_cash_month_paid_at_the_desk_is_the_period_a_notice_ends_and_a_settlement_prorates(
    session, session_factory, gym, doors
):
    """A cash plan renews by its lapse into debt and the desk taking that debt (spec B 3): the
    month paid is the current period. Left at the first month's end, the member's own notice was
    "in the past" and a staff notice mid-month settled nothing of the 12 unused paid days."""
    subscription, lapsed = _cash_month_paid_at_the_desk(session, gym)
    session.commit()
    assert (subscription.current_period_start, subscription.current_period_end) == (
        lapsed,
        subscription.cash_prepaid_through,
    )
    assert subscription.current_period_end > NOW

    effective = NOW + 14 * D
    give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        reason_code="moving_away",
        actor_user_id=gym.owner.id,
        effective_at=effective,
    )
    session.commit()
    period_end_sweep(session_factory, doors, now=effective)

    settlement = session.scalar(
        select(CancellationSettlement).where(
            CancellationSettlement.subscription_id == subscription.id
        )
    )
    days = refund_days(effective, subscription.current_period_end, [])
    assert (settlement.period_end, settlement.days) == (subscription.current_period_end, days)
    assert settlement.amount_in_cents == prorated_refund(36500, days) > 0


def test_the_members_own_notice_on_a_cash_month_paid_at_the_desk_ends_it_at_its_end(session, gym):
    subscription, _lapsed = _cash_month_paid_at_the_desk(session, gym)

    give_notice(session, gym, subscription, now=NOW + D)

    assert subscription.cancellation_effective_at == subscription.cash_prepaid_through


@pytest.mark.embedded
def test_a_cash_notice_at_the_paid_through_day_opens_no_debt_whichever_job_runs_first(
    session, session_factory, gym, doors
):
    """A cash plan's period ends on its paid-through day, where a notice takes effect. The
    hourly pass runs before the period-end sweep (daemons/jobs.py): it opened a cash_lapsed
    debt of a month for the plan the sweep then ended, and the member owed it, blocked from
    booking, for a month they had cancelled."""
    subscription = make_subscription(session, gym, PlanType.cash, now=NOW - 20 * D)
    give_notice(session, gym, subscription)
    session.commit()
    assert subscription.cancellation_effective_at == subscription.cash_prepaid_through
    tick = subscription.cash_prepaid_through + timedelta(minutes=5)

    assert lifecycle.run_lifecycle(session, now=tick)["cash_lapsed"] == 0
    session.commit()
    assert period_end_sweep(session_factory, doors, now=tick).cancelled == [str(subscription.id)]

    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert (subscription.debt_amount_in_cents, subscription.debt_since) == (0, None)


@pytest.mark.embedded
def test_a_charge_date_moved_before_the_period_end_does_not_collect_past_a_notice(
    session, session_factory, gym, card_server, doors
):
    """The renewal pays for the period starting at the current one's end: a notice effective
    by then ends the plan first, wherever staff moved the charge date (spec B 3). Moved five
    days ahead, the renewal was charged, and the member kept paying a month after notice less
    a prorated refund."""
    method = card_of(session, gym, card_server)
    subscription = make_subscription(
        session, gym, PlanType.card, now=NOW - 10 * D, payment_method_id=method.id
    )
    give_notice(session, gym, subscription)
    session.commit()
    end = subscription.current_period_end
    with pytest.raises(DomainError) as refused:  # withdraw the notice to move it
        charge_dates.move_charge_date(
            session,
            gym.organization.id,
            subscription.id,
            expected=subscription.next_charge_date,
            to=NOW + 5 * D,
            actor_user_id=gym.owner.id,
            now=NOW,
        )
    assert refused.value.code == "charge_date_not_movable"
    session.commit()

    summary = collector.daily_sweep(
        session_factory, card_server.provider(), now=NOW + 6 * D, cipher=TEST_CIPHER
    )
    assert (summary.selected, summary.charged) == (0, 0)
    period_end_sweep(session_factory, doors, now=end)

    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.current_period_end == end
    charges = session.scalars(
        select(PaymentTransaction).where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.type == TransactionType.recurring,
        )
    ).all()
    assert charges == []


@pytest.mark.embedded
def test_a_notice_whose_settlement_fails_holds_back_no_other(
    session, session_factory, gym, doors, monkeypatch, caplog
):
    """One notice's fault holds back no other (DESIGN: every sweep restart-safe): the matured
    notices are taken oldest first, and one whose settlement raised stopped the sweep there at
    every pass, so no member behind it was ever settled. It is logged and tried next pass."""
    first, second = (
        make_subscription(session, gym, PlanType.cash, current_period_end=NOW + 30 * D)
        for _ in range(2)
    )
    staff_notice(session, gym, first, NOW)
    staff_notice(session, gym, second, NOW + timedelta(minutes=1))
    session.commit()
    settle_one = settlement.settle_one

    def faulty(session, subscription, doors, *, now):
        if subscription.id == first.id:
            raise RuntimeError("a fault in this notice's settlement")
        return settle_one(session, subscription, doors, now=now)

    monkeypatch.setattr(settlement, "settle_one", faulty)
    at = NOW + timedelta(minutes=1)
    with caplog.at_level("ERROR", logger="gymctl.retention"):
        result = _sweep(session_factory, doors, at)

    assert (result.cancelled, result.errors) == ([str(second.id)], 1)
    assert any(str(first.id) in record.getMessage() for record in caplog.records)
    session.expire_all()
    assert (first.status, second.status) == (
        SubscriptionStatus.active,
        SubscriptionStatus.cancelled,
    )

    monkeypatch.setattr(settlement, "settle_one", settle_one)  # the fault is mended
    assert _sweep(session_factory, doors, at + D).cancelled == [str(first.id)]
