"""A crash and a concurrent duplicate at every money step of a member's life (issue 19; the life
itself: test_member_life.py). A crash is the process dying (`helpers.dies`: a BaseException at a
seam, its session closed without a commit) between storing the attempt and the provider call, or
between the provider's answer and recording it; a restart then recovers or reconciles by the
stored ids, and exactly one charge (or refund, or credit note) is left. A concurrent duplicate is
two identical requests at once (`helpers.race`: threads on real connections, PostgreSQL); on the
embedded default the serialized equivalent is the same request twice in a row.

| step | dies before the provider call | dies after its answer, unrecorded | duplicate at once (PostgreSQL) | duplicate in a row (both engines) |
|---|---|---|---|---|
| purchase | test_a_purchase_that_dies_around_opening_its_page_keeps_nothing[before] | [after] (the page opened, nothing stored); test_a_webhook_that_dies_after_the_read_back_settles_once_on_redelivery | test_two_deliveries_of_one_completed_page_at_once_record_one_charge; test_plan_held::test_six_concurrent_purchases_of_one_recurring_plan_leave_one_live_subscription | test_checkout_webhooks::test_card_plan_purchase_completes_once_through_a_verified_webhook (redeliveries) |
| renewal charge | test_collector::test_crash_after_the_attempt_is_stored_and_before_the_call | test_collector::test_crash_after_the_provider_answered_and_before_the_local_commit | test_collector_processes::test_two_collector_processes_charge_each_due_subscription_once (two processes) | test_member_life (a second sweep charges nothing) |
| pay-debt | test_pay_debt_that_dies_is_recovered_by_its_stored_id_and_charges_once[before] | [after] | test_two_pay_debt_requests_at_once_charge_once | test_debt_after_cancellation::test_member_pays_the_card_debt_of_a_plan_cancelled_for_non_payment_and_books_again |
| desk charge | test_a_desk_charge_that_dies_is_reconciled_by_its_stored_id_and_charges_once[before] | [after]; test_desk::test_a_lost_answer_is_reconciliation_required_then_resolved_by_replay_without_a_debit | test_desk_concurrency::test_concurrent_identical_desk_charges_charge_once | test_desk::test_the_same_key_and_request_replay_the_same_charge |
| refund | test_refund_crashes::test_a_crash_between_any_two_steps_then_a_retry_with_another_amount_refunds_once; ::test_a_refunding_process_killed_between_steps_never_refunds_twice | the same two (answer lost; applied, not committed; killed while refunding) | test_two_identical_refunds_at_once_refund_once | test_the_same_full_refund_twice_refunds_once |
| credit note | no provider call: test_a_credit_note_that_dies_before_its_commit_is_filed_once_by_its_key | (none: nothing is asked) | test_two_identical_credit_notes_at_once_file_one | test_credit_notes::test_a_credit_note_files_a_refund_document_and_a_replay_files_nothing |
| presale charge | test_a_presale_charge_that_dies_is_recovered_and_opens_once[before] | [after] | test_two_catch_up_passes_at_once_charge_a_presale_once | test_member_life (a second sweep on the opening day charges nothing) |
"""  # noqa: E501 (a table)

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import attempts, checkout, collector, credit_notes, desk
from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.billing.debt_payments import pay_own_debt
from gymctl.billing.desk_resolution import recover_desk_charges
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import Checkout, PaymentTransaction, Plan, Subscription
from gymctl.models.billing import SubscriptionStatus, TransactionStatus, TransactionType
from gymctl.providers.card_http import CHARGE, CREATE_PAGE, REFUND
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, buy_card_plan, connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import (
    Crash,
    card_of,
    card_subscription,
    charge_at_desk,
    dies,
    paid_charge,
    race,
    refund_rows,
    send_refund,
    store_refund,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the PostgreSQL-only races take committed_pg

RESTART = NOW + attempts.EXECUTING_GRACE + timedelta(minutes=1)  # past the 90 s grace
CRASHES = pytest.mark.parametrize("after", [False, True], ids=["before", "after"])


def _completed(session, **where) -> int:
    """Completed payment rows (the ledger's money in) matching `where`."""
    session.expire_all()
    query = select(func.count()).select_from(PaymentTransaction)
    query = query.where(PaymentTransaction.status == TransactionStatus.completed)
    for column, value in where.items():
        query = query.where(getattr(PaymentTransaction, column) == value)
    return session.scalar(query)


def _gym_on_the_provider(session):
    """A gym whose card-provider terminal has been live for a month, committed."""
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=30))
    session.commit()
    return gym


@pytest.fixture
def club(session):
    return _gym_on_the_provider(session)


def _committed_gym(url: str):
    """The same in the session database, committed for other connections (PostgreSQL)."""
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    with factory() as session:
        return factory, _gym_on_the_provider(session)


# --- purchase -------------------------------------------------------------------------------


def _buy(session, card_server, gym, plan):
    return buy_card_plan(session, card_server.provider(), gym, plan)


def _deliver(factory, card_server, gym, page_id) -> str:
    """The provider's webhook for `page_id`: read back, applied, committed."""
    with factory() as session:
        outcome, _ = checkout.verify_and_apply(
            session,
            card_server.provider(timeout=5.0),
            organization_id=gym.organization.id,
            page_id=page_id,
            now=NOW,
            cipher=TEST_CIPHER,
        )
        session.commit()
    return outcome


@CRASHES
def test_a_purchase_that_dies_around_opening_its_page_keeps_nothing(
    session, session_factory, club, card_server, monkeypatch, after
):
    """The checkout is stored in the purchase's own transaction: dying before the page is
    opened, or after it opened and before the commit, keeps no subscription and no place on
    the plan; the member's retry is charged once (an orphaned page is never shown to anyone)."""
    plan = bf.make_plan(session, club.organization, interval_months=1, max_purchases=1)
    session.commit()
    dies(monkeypatch, checkout, "open_page", after=after)
    with pytest.raises(Crash), session_factory() as doomed:
        _buy(doomed, card_server, club, plan)
    monkeypatch.undo()
    session.expire_all()
    assert session.scalar(select(func.count()).select_from(Subscription)) == 0
    assert session.get(Plan, plan.id).purchases_count == 0
    assert card_server.requests(CREATE_PAGE) == int(after)

    with session_factory() as door:
        subscription, page = _buy(door, card_server, club, plan)
        door.commit()
    card_server.complete_page(page.page_id, APPROVE)
    assert _deliver(session_factory, card_server, club, page.page_id) == "completed"

    assert _completed(session, subscription_id=subscription.id) == 1  # the one page paid
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.active


def test_a_webhook_that_dies_after_the_read_back_settles_once_on_redelivery(
    session, session_factory, club, card_server, monkeypatch
):
    """The provider's answer (the page read back) was applied and the process died before the
    commit: the webhook was never answered 200, the provider redelivers, it settles once."""
    plan = bf.make_plan(session, club.organization, interval_months=1)
    with session_factory() as door:
        subscription, page = _buy(door, card_server, club, plan)
        door.commit()
    card_server.complete_page(page.page_id, APPROVE)
    dies(monkeypatch, checkout, "apply_page", after=True)
    with pytest.raises(Crash):
        _deliver(session_factory, card_server, club, page.page_id)
    monkeypatch.undo()
    assert _completed(session, subscription_id=subscription.id) == 0

    assert _deliver(session_factory, card_server, club, page.page_id) == "completed"
    assert _deliver(session_factory, card_server, club, page.page_id) == "already_completed"
    assert _completed(session, subscription_id=subscription.id) == 1


def test_two_deliveries_of_one_completed_page_at_once_record_one_charge(committed_pg, card_server):
    factory, gym = _committed_gym(committed_pg)
    with factory() as session:
        plan = bf.make_plan(session, gym.organization, interval_months=1)
        subscription, page = _buy(session, card_server, gym, plan)
        session.commit()
    card_server.complete_page(page.page_id, APPROVE)
    card_server.inject("LowProfile/GetLpResult", Fault.delay, seconds=0.2)  # both read back

    answers = race(2, lambda: _deliver(factory, card_server, gym, page.page_id))

    assert sorted(answers) == ["already_completed", "completed"]
    with factory() as session:
        assert _completed(session, subscription_id=subscription.id) == 1
        stored = session.scalar(select(Checkout).where(Checkout.id == page.id))
        assert stored.provider_transaction_id is not None


# --- pay-debt ----------------------------------------------------------------------------------


def _pay(factory, card_server, gym, subscription, now=NOW) -> str:
    return pay_own_debt(
        factory,
        card_server.provider(timeout=5.0),
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        user_id=gym.member.id,
        now=now,
        cipher=TEST_CIPHER,
    )


@CRASHES
def test_pay_debt_that_dies_is_recovered_by_its_stored_id_and_charges_once(
    session, session_factory, club, card_server, monkeypatch, after
):
    owing = card_subscription(session, club, card_server, in_debt_since=NOW - timedelta(days=1))
    session.commit()
    dies(monkeypatch, attempts, "send_attempt", after=after)
    with pytest.raises(Crash):
        _pay(session_factory, card_server, club, owing)
    monkeypatch.undo()
    assert len(card_server.charges()) == int(after)

    # The member asks again at once: the stored attempt is unresolved, nothing is sent.
    with pytest.raises(DomainError) as refused:
        _pay(session_factory, card_server, club, owing)
    assert (refused.value.code, refused.value.status) == ("pay_debt_not_available", 409)
    assert card_server.requests(CHARGE) == int(after)

    # Recovery asks the provider about the stored id: charged (after) or never seen (before).
    recovered = collector.recover(
        session_factory, card_server.provider(), now=RESTART, cipher=TEST_CIPHER
    )
    assert recovered.resolved == 1
    if not after:
        assert _pay(session_factory, card_server, club, owing, now=RESTART) == "charged"

    assert len(card_server.charges()) == 1
    assert _completed(session, subscription_id=owing.id) == 1
    paid = session.get(Subscription, owing.id)
    assert (paid.debt_amount_in_cents, paid.debt_since) == (0, None)


def test_two_pay_debt_requests_at_once_charge_once(committed_pg, card_server):
    factory, gym = _committed_gym(committed_pg)
    with factory() as session:
        owing = card_subscription(session, gym, card_server, in_debt_since=NOW - timedelta(days=1))
        session.commit()
    card_server.inject(CHARGE, Fault.delay, seconds=0.3)  # the first is still charging

    answers = race(2, lambda: _pay(factory, card_server, gym, owing))

    assert sorted(answers) == ["charged", "pay_debt_not_available"]
    assert len(card_server.charges()) == 1
    with factory() as session:
        assert _completed(session, subscription_id=owing.id) == 1
        assert session.get(Subscription, owing.id).debt_amount_in_cents == 0


# --- desk charge ---------------------------------------------------------------------------


@CRASHES
def test_a_desk_charge_that_dies_is_reconciled_by_its_stored_id_and_charges_once(
    session, session_factory, club, card_server, monkeypatch, after
):
    card_of(session, club, card_server)
    session.commit()
    provider, documents = card_server.provider(), LocalDocumentProvider()
    request = desk.DeskChargeRequest(uuid.uuid4(), club.member.id, 4500, "ILS", "day pass")
    dies(monkeypatch, desk, "_send", after=after)
    with pytest.raises(Crash):
        charge_at_desk(session_factory, club, provider, documents, request)
    monkeypatch.undo()
    assert len(card_server.charges()) == int(after)

    # Recovery past the grace looks the stored id up; it never charges.
    counts = recover_desk_charges(
        session_factory, provider, TEST_CIPHER, now=RESTART, documents=documents
    )
    assert counts == {"selected": 1, "resolved": 1, "pending": 0, "errors": 0, "alerts": []}
    replay = charge_at_desk(session_factory, club, provider, documents, request, now=RESTART)
    assert (replay["outcome"], replay["replayed"]) == ("charged" if after else "not_charged", True)
    if not after:  # never charged: a deliberate new charge needs a new key (spec B 4.3)
        retry = desk.DeskChargeRequest(uuid.uuid4(), club.member.id, 4500, "ILS", "day pass")
        fresh = charge_at_desk(session_factory, club, provider, documents, retry, now=RESTART)
        assert fresh["outcome"] == "charged"

    assert len(card_server.charges()) == 1
    assert card_server.requests(CHARGE) == 1
    assert _completed(session, user_id=club.member.id, type=TransactionType.charge) == 1


# --- refund --------------------------------------------------------------------------------


def _refund(factory, card_server, sale_id, amount: int) -> str:
    documents = LocalDocumentProvider()
    with factory() as session:
        sale = session.get(PaymentTransaction, sale_id)
        refund = store_refund(session, sale, amount, documents)
        return send_refund(session, card_server, refund.id, documents).status.value


def test_two_identical_refunds_at_once_refund_once(committed_pg, card_server):
    factory, gym = _committed_gym(committed_pg)
    with factory() as session:
        sale = paid_charge(session, gym, card_server, amount=9900)
        session.commit()
    card_server.inject(REFUND, Fault.delay, seconds=0.3)  # the first is still refunding

    answers = race(2, lambda: _refund(factory, card_server, sale.id, 9900))

    assert answers.count("refunded") == 1
    [loser] = [answer for answer in answers if answer != "refunded"]
    assert loser in {"refund_in_progress", "refund_not_refundable", "refund_exceeds_remaining"}
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [9900]
    with factory() as session:
        assert refund_rows(session) == 1


def test_the_same_full_refund_twice_refunds_once(session_factory, session, club, card_server):
    sale = paid_charge(session, club, card_server, amount=9900)
    session.commit()

    assert _refund(session_factory, card_server, sale.id, 9900) == "refunded"
    with pytest.raises(DomainError) as again:
        _refund(session_factory, card_server, sale.id, 9900)

    assert again.value.code in {"refund_not_refundable", "refund_exceeds_remaining"}
    assert again.value.status == 409
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [9900]
    assert refund_rows(session) == 1


# --- credit note ---------------------------------------------------------------------------


def _credit(factory, gym, sale_id, key) -> str:
    with factory() as session:
        answer = file_credit_note(
            session,
            organization_id=gym.organization.id,
            sale_id=sale_id,
            request=CreditNoteRequest(key, 1500, True, "gym closed a week"),
            actor_user_id=gym.owner.id,
            now=NOW,
            documents=LocalDocumentProvider(),
        )
        session.commit()
    return f"replayed={answer['replayed']}"


def test_a_credit_note_that_dies_before_its_commit_is_filed_once_by_its_key(
    session, session_factory, club, card_server, monkeypatch
):
    """No provider is asked: the only crash is before the commit, which keeps nothing; the
    owner's retry under the same key files it, a replay files nothing more."""
    sale = paid_charge(session, club, card_server, amount=9900, type=TransactionType.recurring)
    session.commit()
    key = uuid.uuid4()
    dies(monkeypatch, credit_notes, "issue_document", after=True)
    with pytest.raises(Crash):
        _credit(session_factory, club, sale.id, key)
    monkeypatch.undo()
    assert refund_rows(session) == 0

    assert _credit(session_factory, club, sale.id, key) == "replayed=False"
    assert _credit(session_factory, club, sale.id, key) == "replayed=True"
    assert refund_rows(session) == 1
    assert card_server.requests(REFUND) == 0


def test_two_identical_credit_notes_at_once_file_one(committed_pg, card_server):
    factory, gym = _committed_gym(committed_pg)
    with factory() as session:
        sale = paid_charge(session, gym, card_server, amount=9900)
        session.commit()
    key = uuid.uuid4()

    answers = race(2, lambda: _credit(factory, gym, sale.id, key))

    assert sorted(answers) == ["replayed=False", "replayed=True"]
    with factory() as session:
        assert refund_rows(session) == 1
        credited = session.get(PaymentTransaction, sale.id).metadata_["creditedInCents"]
        assert credited == 1500


# --- presale charge ------------------------------------------------------------------------


def _due_presale(session, gym, card_server) -> Subscription:
    method = card_of(session, gym, card_server)
    presale = bf.make_subscription(
        session, gym, presale_opening=NOW - timedelta(minutes=1), payment_method_id=method.id
    )
    session.commit()
    return presale


def _catch_up(factory, card_server, now=NOW) -> collector.Summary:
    return collector.catch_up(
        factory, card_server.provider(timeout=5.0), now=now, cipher=TEST_CIPHER
    )


@CRASHES
def test_a_presale_charge_that_dies_is_recovered_and_opens_once(
    session, session_factory, club, card_server, monkeypatch, after
):
    presale = _due_presale(session, club, card_server)
    dies(monkeypatch, attempts, "send_attempt", after=after)
    with pytest.raises(Crash):
        _catch_up(session_factory, card_server)
    monkeypatch.undo()
    assert len(card_server.charges()) == int(after)
    busy = _catch_up(session_factory, card_server)  # the next minute: unresolved, not resent
    assert (busy.busy, busy.charged) == (1, 0)

    recovered = collector.recover(
        session_factory, card_server.provider(), now=RESTART, cipher=TEST_CIPHER
    )
    assert recovered.resolved == 1
    if not after:  # never charged: the technical retry, 5 minutes on, charges it
        retry = _catch_up(session_factory, card_server, now=RESTART + timedelta(minutes=5))
        assert retry.charged == 1

    assert len(card_server.charges()) == 1
    assert _completed(session, subscription_id=presale.id) == 1
    assert session.get(Subscription, presale.id).status == SubscriptionStatus.active


def test_two_catch_up_passes_at_once_charge_a_presale_once(committed_pg, card_server):
    factory, gym = _committed_gym(committed_pg)
    with factory() as session:
        presale = _due_presale(session, gym, card_server)
    card_server.inject(CHARGE, Fault.delay, seconds=0.3)  # the first is still charging

    answers = race(2, lambda: _catch_up(factory, card_server).charged)

    assert sorted(answers) == ["0", "1"]
    assert len(card_server.charges()) == 1
    with factory() as session:
        assert _completed(session, subscription_id=presale.id) == 1
        assert session.get(Subscription, presale.id).status == SubscriptionStatus.active
