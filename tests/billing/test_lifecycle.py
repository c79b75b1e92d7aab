"""The hourly lifecycle pass (spec B 3): every lifecycle row of the table, its boundaries (a
condition reached exactly at `now` counts; one second later it does not), idempotence, the
bound, and the events and notices it writes. Every test runs on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from daemons.jobs import select_jobs
from gymctl.billing.debt import NOTICE_CANCELLED, NOTICE_OPENED, open_debt, restore_from_debt
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.config import get_settings
from gymctl.db import get_engine
from gymctl.models import OutboxEvent, PaymentTransaction, Subscription
from gymctl.models.billing import (
    AttemptKind,
    CheckoutStatus,
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import matured
from tests.billing.factories import (
    make_billing_settings,
    make_card,
    make_checkout,
    make_gym,
    make_plan,
    make_subscription,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

SECOND = timedelta(seconds=1)
DAY = timedelta(days=1)
MOVES = (
    "opened",
    "cash_lapsed",
    "payment_due",
    "cancelled",
    "expired",
    "gift_ended",
    "term_ended",
    "rolled",
)


def events(session: Session, subscription: Subscription, name: str | None = None) -> list:
    query = select(OutboxEvent).where(OutboxEvent.aggregate_id == str(subscription.id))
    if name is not None:
        query = query.where(OutboxEvent.name == name)
    return session.scalars(query.order_by(OutboxEvent.id)).all()


def outbox_size(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(OutboxEvent))


def nothing_moved(summary: dict) -> bool:
    return all(summary[name] == 0 for name in MOVES) and summary["events"] == 0


# --- packs, drop-ins, gifts ---------------------------------------------------------------


@pytest.mark.parametrize("plan_type", [PlanType.pack, PlanType.drop_in])
def test_pack_or_drop_in_past_validity_expires_at_the_instant(session, gym, plan_type):
    due = make_subscription(session, gym, plan_type, current_period_end=NOW)
    not_yet = make_subscription(session, gym, plan_type, current_period_end=NOW + SECOND)

    summary = run_lifecycle(session, now=NOW)

    assert summary["expired"] == 1
    assert (due.status, due.ended_at, due.updated_at) == (SubscriptionStatus.expired, NOW, NOW)
    assert (not_yet.status, not_yet.ended_at) == (SubscriptionStatus.active, None)
    [event] = events(session, due)
    assert event.name == "subscription.expired"
    assert event.kind == "domain"
    assert event.organization_id == gym.organization.id
    assert event.occurred_at == NOW
    assert event.payload == {
        "planType": plan_type.value,
        "periodEnd": NOW.isoformat(),
        "userId": str(gym.member.id),
    }
    assert events(session, not_yet) == []


def test_pack_paid_in_cash_expires_and_never_lapses_into_debt(session, gym):
    """A desk sale records cash_prepaid_through on packs too; only cash plans lapse."""
    pack = make_subscription(
        session, gym, PlanType.pack, current_period_end=NOW - DAY, cash_prepaid_through=NOW - DAY
    )
    assert pack.payment_collection_method == CollectionMethod.cash

    run_lifecycle(session, now=NOW)

    assert pack.status == SubscriptionStatus.expired
    assert pack.debt_amount_in_cents == 0


def test_set_period_gift_past_coverage_end_becomes_gift_ended(session, gym):
    ended = make_subscription(session, gym, PlanType.gift, current_period_end=NOW)
    covered = make_subscription(session, gym, PlanType.gift, current_period_end=NOW + SECOND)
    open_gift = make_subscription(session, gym, PlanType.gift, current_period_end=None)

    summary = run_lifecycle(session, now=NOW)

    assert summary["gift_ended"] == 1
    assert (ended.status, ended.ended_at) == (SubscriptionStatus.gift_ended, NOW)
    assert covered.status == SubscriptionStatus.active
    assert open_gift.status == SubscriptionStatus.active
    assert [e.name for e in events(session, ended)] == ["subscription.gift_ended"]


# --- card plans ---------------------------------------------------------------------------


def test_paid_card_plan_with_no_card_and_no_renewal_end_ends_its_term(session, gym):
    ended = make_subscription(session, gym, current_period_end=NOW)
    renewal_over = make_subscription(session, gym, current_period_end=NOW, renewal_end=NOW - DAY)
    not_yet = make_subscription(session, gym, current_period_end=NOW + SECOND)

    summary = run_lifecycle(session, now=NOW)

    assert summary["term_ended"] == 2
    for subscription in (ended, renewal_over):
        assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, NOW)
        assert [e.name for e in events(session, subscription)] == ["subscription.term_ended"]
    assert not_yet.status == SubscriptionStatus.active


def test_card_plan_with_a_saved_card_a_renewal_ahead_or_another_biller_is_not_ended(session, gym):
    """Only the protected collector's rows show their card; a renewal still ahead keeps it."""
    with_card = make_subscription(
        session, gym, current_period_end=NOW - DAY, payment_method_id=make_card(session, gym).id
    )
    renewal_ahead = make_subscription(
        session, gym, current_period_end=NOW - DAY, renewal_end=NOW + DAY
    )
    other_provider = make_subscription(
        session,
        gym,
        current_period_end=NOW - DAY,
        payment_collection_method=CollectionMethod.provider_direct,
    )

    summary = run_lifecycle(session, now=NOW)

    assert nothing_moved(summary)
    for subscription in (with_card, renewal_ahead, other_provider):
        assert subscription.status == SubscriptionStatus.active


def test_zero_price_open_ended_card_plan_rolls_instead_of_ending(session, gym):
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    rolled = make_subscription(session, gym, plan=free, current_period_end=NOW)
    late = make_subscription(
        session,
        gym,
        plan=make_plan(
            session, gym.organization, PlanType.card, price_in_cents=0, interval_months=3
        ),
        current_period_end=datetime(2026, 1, 31, 9, tzinfo=UTC),
        next_charge_date=None,
    )
    also_free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    not_yet = make_subscription(session, gym, plan=also_free, current_period_end=NOW + SECOND)

    summary = run_lifecycle(session, now=NOW)

    assert summary["rolled"] == 2
    assert summary["term_ended"] == 0
    assert rolled.status == SubscriptionStatus.active
    assert rolled.current_period_start == NOW
    assert rolled.current_period_end == datetime(2026, 12, 21, 9, tzinfo=UTC)
    assert rolled.next_charge_date == rolled.current_period_end
    # As many whole 3-month periods as needed to pass now, counted from the old end.
    assert late.current_period_start == datetime(2026, 10, 31, 9, tzinfo=UTC)
    assert late.current_period_end == datetime(2027, 1, 31, 9, tzinfo=UTC)
    assert late.next_charge_date is None
    assert not_yet.current_period_end == NOW + SECOND
    [event] = events(session, rolled)
    assert event.name == "subscription.renewed"
    assert event.payload == {
        "periodStart": NOW.isoformat(),
        "periodEnd": "2026-12-21T09:00:00+00:00",
        "amountInCents": 0,
        "userId": str(gym.member.id),
    }


def test_a_free_card_plan_with_a_saved_card_rolls_on_uncharged(session, gym):
    """A free plan bought online saved a card through its page; the collector never charges
    a zero price, so without the roll its period would stop at its first end (it neither
    renewed nor ended: active on a period long over)."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    card = make_card(session, gym)
    bought_online = make_subscription(
        session, gym, plan=free, current_period_end=NOW, payment_method_id=card.id
    )

    summary = run_lifecycle(session, now=NOW)

    assert (summary["rolled"], summary["term_ended"]) == (1, 0)
    assert bought_online.status == SubscriptionStatus.active
    assert bought_online.payment_method_id == card.id
    assert bought_online.current_period_start == NOW
    assert bought_online.current_period_end == datetime(2026, 12, 21, 9, tzinfo=UTC)
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == 0


def test_roll_from_a_month_end_lands_after_now(session, gym):
    """Oct 31 + 1 month clamps to Nov 30: at Nov 30 that period is already over, so the roll
    goes on to Dec 31 (whole months from the old end, never a period ending at or before now)."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    subscription = make_subscription(
        session, gym, plan=free, current_period_end=datetime(2026, 10, 31, 9, tzinfo=UTC)
    )
    now = datetime(2026, 11, 30, 9, tzinfo=UTC)

    run_lifecycle(session, now=now)

    assert subscription.current_period_start == now
    assert subscription.current_period_end == datetime(2026, 12, 31, 9, tzinfo=UTC)
    assert nothing_moved(run_lifecycle(session, now=now))


def test_zero_price_card_plan_with_a_fixed_term_ends(session, gym):
    fixed = make_plan(session, gym.organization, PlanType.card, price_in_cents=0, open_ended=False)
    subscription = make_subscription(session, gym, plan=fixed, current_period_end=NOW)

    run_lifecycle(session, now=NOW)

    assert subscription.status == SubscriptionStatus.term_ended


def _free_fixed_term_bought_online(session, gym, ends, **fields):
    """A free card plan of a fixed term with the saved card and the next charge (at its period
    end) that buying it through its page left it."""
    fixed = make_plan(session, gym.organization, PlanType.card, price_in_cents=0, open_ended=False)
    return make_subscription(
        session,
        gym,
        plan=fixed,
        current_period_end=ends,
        next_charge_date=ends,
        payment_method_id=make_card(session, gym).id,
        **fields,
    )


def test_a_free_card_plan_of_a_fixed_term_ends_with_a_saved_card_and_a_next_charge(session, gym):
    """Bought online, a free plan saved a card and its grant set a next charge at its period
    end; the collector never charges a zero price, so nothing would ever move it: with a fixed
    term it ends at its period end (term_ended), as without a card, its renewal end (which
    only a charge would reach) or not."""
    bought_online = _free_fixed_term_bought_online(session, gym, NOW, renewal_end=NOW + 30 * DAY)
    not_yet = _free_fixed_term_bought_online(session, gym, NOW + SECOND)

    summary = run_lifecycle(session, now=NOW)

    assert (summary["term_ended"], summary["rolled"]) == (1, 0)
    assert bought_online.status == SubscriptionStatus.term_ended
    assert bought_online.ended_at == NOW
    assert not_yet.status == SubscriptionStatus.active


def test_a_notice_after_a_free_fixed_terms_period_end_is_overtaken_not_matured(session, gym):
    """Its term ends at its period end, not at a renewal end only a charge would reach: a
    notice effective between the two comes after the plan's own end, so the pass ends the plan
    then, and the period-end sweep never matures the notice (with the renewal end as the own
    end the pass left the plan active for the notice, a period it never paid for)."""
    subscription = _free_fixed_term_bought_online(
        session,
        gym,
        NOW,
        renewal_end=NOW + 30 * DAY,
        cancel_at_period_end=True,
        cancellation_effective_at=NOW + 10 * DAY,
    )

    assert run_lifecycle(session, now=NOW)["term_ended"] == 1

    assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, NOW)
    assert matured(session, now=NOW + 10 * DAY) == []


# --- debt: cash lapse and pay-later ----------------------------------------------------------


def test_cash_plan_lapses_into_debt_with_day_zero_the_prepaid_through_date(session, gym):
    prepaid = NOW - 3 * DAY
    lapsed = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=prepaid)
    at_instant = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    not_yet = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW + SECOND)

    summary = run_lifecycle(session, now=NOW)

    assert summary["cash_lapsed"] == 2
    assert lapsed.status == SubscriptionStatus.debt
    assert lapsed.debt_reason == "cash_lapsed"
    assert lapsed.debt_since == prepaid
    assert lapsed.debt_amount_in_cents == lapsed.price_in_cents == 8000
    assert lapsed.debt_notice_stage == NOTICE_OPENED
    assert at_instant.status == SubscriptionStatus.debt
    assert at_instant.debt_since == NOW
    assert not_yet.status == SubscriptionStatus.active
    [event] = events(session, lapsed)
    assert event.name == "subscription.debt_opened"
    assert event.payload == {
        "reason": "cash_lapsed",
        "amountInCents": 8000,
        "currency": "ILS",
        "since": prepaid.isoformat(),
        "userId": str(gym.member.id),
        "notice": NOTICE_OPENED,
    }


def test_debt_opened_event_matches_the_one_open_debt_writes(session, gym):
    """The set-based notice and the collector's open_debt write the same payload shape."""
    by_pass = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    by_collector = make_subscription(session, gym, PlanType.cash)
    open_debt(session, by_collector, amount_in_cents=8000, reason="cash_lapsed", since=NOW, now=NOW)
    session.flush()

    run_lifecycle(session, now=NOW)

    [passed] = events(session, by_pass)
    [collected] = events(session, by_collector)
    assert passed.payload == collected.payload


def test_pay_later_past_due_enters_debt_for_the_unpaid_amount(session, gym):
    due = make_subscription(session, gym, PlanType.pack, pay_later_due=NOW, payment_last_day=None)
    kept_last_day = make_subscription(
        session, gym, PlanType.pack, pay_later_due=NOW - DAY, payment_last_day=NOW + DAY
    )
    not_yet = make_subscription(session, gym, PlanType.pack, pay_later_due=NOW + SECOND)
    paid = make_subscription(
        session, gym, PlanType.pack, pay_later_due=NOW - DAY, unpaid_amount_in_cents=0
    )

    summary = run_lifecycle(session, now=NOW)

    assert summary["payment_due"] == 2
    assert due.status == SubscriptionStatus.debt
    assert (due.debt_reason, due.debt_since) == ("payment_due", NOW)
    assert due.debt_amount_in_cents == due.unpaid_amount_in_cents == 12000
    assert due.payment_last_day == NOW  # backfilled from payment_due_at
    assert kept_last_day.payment_last_day == NOW + DAY
    assert not_yet.status == SubscriptionStatus.active
    assert paid.status == SubscriptionStatus.active
    assert [e.payload["reason"] for e in events(session, due)] == ["payment_due"]


def test_unpaid_pay_later_pack_past_due_and_validity_owes_its_debt(session, gym):
    """Debt is entered before anything ends: the unpaid pack is not quietly expired."""
    pack = make_subscription(
        session, gym, PlanType.pack, pay_later_due=NOW - DAY, current_period_end=NOW - DAY
    )

    run_lifecycle(session, now=NOW)

    assert pack.status == SubscriptionStatus.debt
    assert pack.debt_amount_in_cents == 12000


def test_a_pay_later_balance_due_after_the_pack_ended_is_owed_then_on_the_ended_plan(session, gym):
    """A drop-in sold "pay by the end of the week" expires first: the balance was never owed,
    no debt, no block, nothing on anyone's list. From its due day it is a debt of the ended
    plan (the status stays), as a notice matured before the due day leaves one too."""
    pack = make_subscription(
        session, gym, PlanType.pack, pay_later_due=NOW + 3 * DAY, current_period_end=NOW - DAY
    )
    noticed = make_subscription(session, gym, PlanType.pack, pay_later_due=NOW + 3 * DAY)
    noticed.status = SubscriptionStatus.cancelled
    noticed.cancellation_reason = "notice"

    assert run_lifecycle(session, now=NOW)["expired"] == 1
    assert (pack.status, pack.debt_since) == (SubscriptionStatus.expired, None)

    summary = run_lifecycle(session, now=NOW + 3 * DAY)

    assert (summary["payment_due"], summary["payment_due_ended"]) == (0, 2)
    for ended, status in (
        (pack, SubscriptionStatus.expired),
        (noticed, SubscriptionStatus.cancelled),
    ):
        assert (ended.status, ended.debt_reason, ended.debt_amount_in_cents) == (
            status,
            "payment_due",
            12000,
        )
        assert ended.debt_since == NOW + 3 * DAY
        assert [
            e.payload["reason"] for e in events(session, ended, "subscription.debt_opened")
        ] == ["payment_due"]
    assert run_lifecycle(session, now=NOW + 30 * DAY)["payment_due_ended"] == 0  # once
    clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=pack.id,
        actor_user_id=None,
        now=NOW + 31 * DAY,
        documents=LocalDocumentProvider(),
    )
    assert (pack.status, pack.unpaid_amount_in_cents, pack.debt_amount_in_cents) == (
        SubscriptionStatus.expired,
        0,
        0,
    )
    assert run_lifecycle(session, now=NOW + 32 * DAY)["payment_due_ended"] == 0  # paid: once


# --- cancellation for non-payment --------------------------------------------------------------


def test_debt_past_grace_is_cancelled_for_non_payment_keeping_the_debt(session, gym):
    """Day N = billing_grace_days (default 7) counted from debt_since; it ends at the
    organization's midnight (UTC unless its settings say otherwise)."""
    since = datetime(2026, 11, 13, 23, 59, 59, tzinfo=UTC)  # day 7 = Nov 20, over at NOW
    cancelled = make_subscription(session, gym, in_debt_since=since)
    in_grace = make_subscription(session, gym, in_debt_since=since + SECOND)  # day 0 = Nov 14

    summary = run_lifecycle(session, now=NOW)

    assert summary["cancelled"] == 1
    assert cancelled.status == SubscriptionStatus.cancelled
    assert cancelled.cancellation_reason == "non_payment"
    assert cancelled.retention_outcome == "lost_payment"
    assert (cancelled.cancelled_at, cancelled.ended_at) == (NOW, NOW)
    assert cancelled.debt_amount_in_cents == 9900  # open debt stays: it blocks booking later
    assert cancelled.debt_since == since
    assert cancelled.debt_notice_stage == NOTICE_CANCELLED
    assert in_grace.status == SubscriptionStatus.debt
    [event] = events(session, cancelled)
    assert event.name == "subscription.cancelled"
    assert event.payload == {
        "reason": "non_payment",
        "debtReason": "charge_failed",
        "debtAmountInCents": 9900,
        "currency": "ILS",
        "debtSince": since.isoformat(),
        "userId": str(gym.member.id),
        "notice": NOTICE_CANCELLED,
    }


def test_grace_days_come_from_the_organizations_billing_settings(session, gym):
    make_billing_settings(session, gym.organization, billing_grace_days=3)
    other = make_gym(session)
    short_grace = make_subscription(session, gym, in_debt_since=NOW - 4 * DAY)
    default_grace = make_subscription(session, other, in_debt_since=NOW - 4 * DAY)

    run_lifecycle(session, now=NOW)

    assert short_grace.status == SubscriptionStatus.cancelled
    assert default_grace.status == SubscriptionStatus.debt


def test_null_debt_reason_reads_as_charge_failed_in_the_notice(session, gym):
    subscription = make_subscription(session, gym, in_debt_since=NOW - 30 * DAY, debt_reason=None)

    run_lifecycle(session, now=NOW)

    [event] = events(session, subscription)
    assert event.payload["debtReason"] == "charge_failed"


def test_lapse_far_past_grace_enters_debt_and_is_cancelled_in_one_pass(session, gym):
    subscription = make_subscription(
        session, gym, PlanType.cash, cash_prepaid_through=NOW - 10 * DAY
    )

    summary = run_lifecycle(session, now=NOW)

    assert (summary["cash_lapsed"], summary["cancelled"]) == (1, 1)
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.debt_since == NOW - 10 * DAY
    assert [e.name for e in events(session, subscription)] == [
        "subscription.debt_opened",
        "subscription.cancelled",
    ]
    assert nothing_moved(run_lifecycle(session, now=NOW))


def test_unresolved_billing_attempt_holds_the_row(session, gym):
    """A pending attempt means unresolved, not uncharged (spec B 2.2): no cancellation while
    the collector may still settle the debt."""
    subscription = make_subscription(session, gym, in_debt_since=NOW - 30 * DAY)
    session.add(
        PaymentTransaction(
            organization_id=gym.organization.id,
            subscription_id=subscription.id,
            type=TransactionType.recurring,
            status=TransactionStatus.pending,
            provider="card_provider",
            amount_in_cents=9900,
            currency="ILS",
            attempt_kind=AttemptKind.debt,
            created_at=NOW,
            updated_at=NOW,
        )
    )
    session.flush()

    assert nothing_moved(run_lifecycle(session, now=NOW))
    assert subscription.status == SubscriptionStatus.debt


# --- rows the lifecycle leaves alone -----------------------------------------------------------


def test_legacy_past_due_rows_are_left_to_the_renewal_sweep(session, gym):
    past_due = make_subscription(
        session,
        gym,
        status=SubscriptionStatus.past_due,
        current_period_end=NOW - 30 * DAY,
        debt_since=NOW - 30 * DAY,
        debt_amount_in_cents=9900,
    )

    assert nothing_moved(run_lifecycle(session, now=NOW))
    assert past_due.status == SubscriptionStatus.past_due
    assert events(session, past_due) == []


def test_presales_deleted_rows_and_notice_given_rows_are_not_touched(session, gym):
    presale = make_subscription(session, gym, presale_opening=NOW - DAY)
    deleted_pack = make_subscription(
        session, gym, PlanType.pack, current_period_end=NOW - DAY, deleted_at=NOW - DAY
    )
    deleted_debt = make_subscription(
        session, gym, in_debt_since=NOW - 30 * DAY, deleted_at=NOW - DAY
    )
    noticed_pack = make_subscription(
        session,
        gym,
        PlanType.pack,
        current_period_end=NOW - DAY,
        cancel_at_period_end=True,
        cancellation_effective_at=NOW - DAY,
    )

    assert nothing_moved(run_lifecycle(session, now=NOW))
    assert presale.status == SubscriptionStatus.scheduled
    assert deleted_pack.status == SubscriptionStatus.active
    assert deleted_debt.status == SubscriptionStatus.debt
    assert noticed_pack.status == SubscriptionStatus.active


def free_presale(session, gym, *, opening, page: CheckoutStatus = CheckoutStatus.completed):
    """A zero-price presale bought online: scheduled, its token-only page in state `page`."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0, sessions_quota=8)
    presale = make_subscription(session, gym, plan=free, presale_opening=opening)
    make_checkout(session, presale, status=page, now=NOW - 10 * DAY, expires_at=NOW - 10 * DAY)
    return presale


def test_a_free_presale_opens_on_its_opening_day_with_the_period_a_paid_one_is_granted(
    session, gym
):
    """A presale opens with its opening day's charge; a free one has nothing to charge, so the
    pass opens it: active from the opening day, its quota, membership.activated. One whose
    page never completed (nothing bought) and a paid one (its charge opens it) stay."""
    opening = NOW - timedelta(hours=2)
    free = free_presale(session, gym, opening=opening)
    unbought = free_presale(session, gym, opening=opening, page=CheckoutStatus.open)
    paid = make_subscription(session, gym, presale_opening=opening)

    assert run_lifecycle(session, now=opening - SECOND)["opened"] == 0
    assert free.status == SubscriptionStatus.scheduled
    summary = run_lifecycle(session, now=NOW)

    assert (summary["opened"], summary["more"]) == (1, [])
    assert free.status == SubscriptionStatus.active
    assert (free.current_period_start, free.current_period_end) == (
        opening,
        datetime(2026, 12, 21, 7, tzinfo=UTC),
    )
    assert (free.started_at, free.sessions_remaining) == (opening, 8)
    assert free.next_charge_date == free.current_period_end  # never charged: it rolls on
    assert [(e.name, e.payload["periodStart"]) for e in events(session, free)] == [
        ("membership.activated", opening.isoformat())
    ]
    assert (unbought.status, paid.status) == (SubscriptionStatus.scheduled,) * 2
    assert run_lifecycle(session, now=NOW)["opened"] == 0
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == 0


# --- idempotence, bound, notices ----------------------------------------------------------------


def every_lifecycle_row(session, gym) -> list[Subscription]:
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    return [
        make_subscription(session, gym, PlanType.pack, current_period_end=NOW - DAY),
        make_subscription(session, gym, PlanType.gift, current_period_end=NOW - DAY),
        make_subscription(session, gym, current_period_end=NOW - DAY),
        make_subscription(session, gym, plan=free, current_period_end=NOW - DAY),
        make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW - DAY),
        make_subscription(session, gym, PlanType.drop_in, pay_later_due=NOW - DAY),
        make_subscription(session, gym, in_debt_since=NOW - 8 * DAY),
        free_presale(session, gym, opening=NOW - DAY),
    ]


def snapshot(session: Session, rows: list[Subscription]) -> list[tuple]:
    columns = Subscription.__table__.columns
    found = session.execute(
        select(*columns).where(Subscription.id.in_([row.id for row in rows]))
    ).all()
    return sorted(tuple(row) for row in found)


def test_every_row_moves_once_and_a_second_run_changes_and_emits_nothing(session, gym):
    rows = every_lifecycle_row(session, gym)

    first = run_lifecycle(session, now=NOW)
    assert {name: first[name] for name in MOVES} == dict.fromkeys(MOVES, 1)
    assert first["events"] == 8
    assert first["more"] == []
    before, written = snapshot(session, rows), outbox_size(session)

    second = run_lifecycle(session, now=NOW)

    assert nothing_moved(second)
    assert second["more"] == []
    assert snapshot(session, rows) == before
    assert outbox_size(session) == written


# every_lifecycle_row's rows, by the step that moves each.
STEP_OF_ROW = (
    "expired",
    "gift_ended",
    "term_ended",
    "rolled",
    "cash_lapsed",
    "payment_due",
    "cancelled",
    "opened",
)


@pytest.mark.parametrize("step", STEP_OF_ROW)
def test_the_passs_first_look_sees_each_step_alone(session, gym, step):
    """The pass looks once whether any step has a row to move before running its steps: a
    row only one step would move is moved by that step (the look is the steps' own
    conditions)."""
    rows = every_lifecycle_row(session, gym)
    for row, moved_by in zip(rows, STEP_OF_ROW, strict=True):
        if moved_by != step:
            row.deleted_at = NOW - DAY  # every step leaves deleted rows alone
    session.flush()

    summary = run_lifecycle(session, now=NOW)

    assert {name: summary[name] for name in MOVES} == {name: int(name == step) for name in MOVES}


def test_an_hour_with_nothing_to_move_is_one_look(session, gym, statements):
    every_lifecycle_row(session, gym)
    run_lifecycle(session, now=NOW)
    session.flush()
    statements.clear()

    summary = run_lifecycle(session, now=NOW + SECOND)

    assert nothing_moved(summary)
    assert summary["more"] == []
    assert statements.seen == ["SELECT"]


def test_each_transition_is_bounded_oldest_first_and_reports_more(session, gym):
    packs = [
        make_subscription(session, gym, PlanType.pack, current_period_end=NOW - n * DAY)
        for n in (1, 2, 3)
    ]

    first = run_lifecycle(session, now=NOW, limit=2)

    assert first["expired"] == 2
    assert first["more"] == ["expired"]
    assert [p.status for p in packs] == [
        SubscriptionStatus.active,
        SubscriptionStatus.expired,
        SubscriptionStatus.expired,
    ]
    second = run_lifecycle(session, now=NOW, limit=2)
    assert (second["expired"], second["more"]) == (1, [])
    assert packs[0].status == SubscriptionStatus.expired


def test_a_bound_reached_exactly_reports_no_more(session, gym):
    for n in (1, 2):
        make_subscription(session, gym, PlanType.pack, current_period_end=NOW - n * DAY)

    summary = run_lifecycle(session, now=NOW, limit=2)

    assert (summary["expired"], summary["more"]) == (2, [])


def test_debt_notices_are_sent_at_most_once_per_stage(session, gym):
    """The debt-opened notice when the cash plan lapses, the cancellation notice after the
    grace: one each over many hourly runs; a row already notified of its cancellation (stage
    cancelled) is cancelled without a second notice."""
    lapsing = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW - DAY)
    notified = make_subscription(
        session, gym, in_debt_since=NOW - 30 * DAY, debt_notice_stage=NOTICE_CANCELLED
    )

    for hour in range(0, 24 * 8, 6):
        run_lifecycle(session, now=NOW + timedelta(hours=hour))

    assert lapsing.status == SubscriptionStatus.cancelled
    assert [(e.name, e.payload["notice"]) for e in events(session, lapsing)] == [
        ("subscription.debt_opened", NOTICE_OPENED),
        ("subscription.cancelled", NOTICE_CANCELLED),
    ]
    assert notified.status == SubscriptionStatus.cancelled
    assert events(session, notified) == []


def test_any_payment_restores_debt_and_a_later_lapse_notifies_again(session, gym):
    """restore_from_debt clears the stage: a new debt episode is a new opened notice."""
    subscription = make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW - DAY)
    run_lifecycle(session, now=NOW)
    restore_from_debt(subscription, now=NOW)
    subscription.cash_prepaid_through = NOW + DAY
    session.flush()

    run_lifecycle(session, now=NOW + 2 * DAY)

    assert subscription.status == SubscriptionStatus.debt
    assert [e.name for e in events(session, subscription)] == ["subscription.debt_opened"] * 2


def test_daemon_job_runs_the_pass_hourly(session, gym):
    [job] = select_jobs(["billing_lifecycle"])
    make_subscription(session, gym, PlanType.pack, current_period_end=NOW - DAY)

    result = job.run(session, NOW, get_settings())

    assert job.interval_seconds == 3600
    assert result["expired"] == 1


def test_rows_another_worker_holds_are_skipped_not_waited_for(committed_pg):
    """PostgreSQL, FOR UPDATE SKIP LOCKED: a subscription the collector holds is left for the
    next hour; the pass neither waits for it nor moves it."""
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as setup:
        gym = make_gym(setup)
        held = make_subscription(setup, gym, PlanType.pack, current_period_end=NOW - DAY)
        free = make_subscription(setup, gym, PlanType.pack, current_period_end=NOW - DAY)
        held_presale = free_presale(setup, gym, opening=NOW - DAY)
        free_to_open = free_presale(setup, gym, opening=NOW - DAY)
        setup.commit()
    with factory() as collector, factory() as lifecycle:
        collector.execute(
            select(Subscription.id)
            .where(Subscription.id.in_([held.id, held_presale.id]))
            .with_for_update()
        )
        lifecycle.execute(text("SET LOCAL lock_timeout = '5s'"))
        summary = run_lifecycle(lifecycle, now=NOW)
        lifecycle.commit()
        collector.rollback()
        assert (summary["expired"], summary["opened"]) == (1, 1)
        assert lifecycle.get(Subscription, free.id).status == SubscriptionStatus.expired
        assert lifecycle.get(Subscription, held.id).status == SubscriptionStatus.active
        assert lifecycle.get(Subscription, free_to_open.id).status == SubscriptionStatus.active
        assert lifecycle.get(Subscription, held_presale.id).status == SubscriptionStatus.scheduled
