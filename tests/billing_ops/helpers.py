"""Rows the billing operator tests share: saved cards made on the fake provider, paid charges,
and pending protected attempts as a crashed collector leaves them."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl import ids
from gymctl.billing import attempts, desk, no_debit, refunds
from gymctl.billing.accounts import CARD_PROVIDER, save_card, saved_card
from gymctl.billing.checkout import SAVE_CARD_ONLY
from gymctl.db import get_engine
from gymctl.models import (
    AuditLog,
    Checkout,
    PaymentMethod,
    PaymentProviderConfig,
    PaymentTransaction,
    Subscription,
)
from gymctl.models.billing import CheckoutStatus, PlanType, TransactionType
from gymctl.providers.card_http import CHARGE
from tests.billing import factories as bf
from tests.billing.cards import (
    APPROVE,
    TERMINAL,
    completed_token_page,
    connect_card_provider,
    save_test_card,
)
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.conftest import NOW

DUE = NOW - timedelta(minutes=10)


def card_of(session, gym, card_server, number: str = APPROVE, **kwargs) -> PaymentMethod:
    return save_test_card(
        session, gym, card_server.provider(), card_server.simulator, number, **kwargs
    )


def card_subscription(session, gym, card_server, number: str = APPROVE, **fields) -> Subscription:
    """A card-plan member whose renewal fell due ten minutes ago."""
    method = card_of(session, gym, card_server, number)
    values: dict[str, Any] = {
        "payment_method_id": method.id,
        "next_charge_date": DUE,
        "current_period_end": DUE,
        "current_period_start": DUE - timedelta(days=30),
        **fields,
    }
    return bf.make_subscription(session, gym, PlanType.card, **values)


def paid_charge(
    session, gym, card_server, *, amount: int = 9900, subscription=None, **fields
) -> PaymentTransaction:
    """A completed card payment whose money really moved on the fake provider."""
    method = card_of(session, gym, card_server)
    card = saved_card(method, TEST_CIPHER)
    unique = str(ids.new_id())
    result = card_server.provider().charge_token(
        TERMINAL,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=amount,
        currency="ILS",
        unique_id=unique,
    )
    return bf.make_transaction(
        session,
        gym,
        subscription_id=subscription.id if subscription else None,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=amount,
        provider_transaction_id=result.transaction_id,
        **fields,
    )


def pending_attempt(
    session, subscription: Subscription, *, now: datetime = NOW, started: datetime | None = None
) -> PaymentTransaction:
    """Step 1 of the protocol only (stored, never sent): what a crash leaves behind."""
    began = attempts.begin_attempt(session, subscription.id, now=started or now, cipher=TEST_CIPHER)
    assert began.outcome == "started", began
    session.flush()
    return session.get(PaymentTransaction, began.transaction_id)


def audit_rows(session, action: str) -> list[AuditLog]:
    return list(session.scalars(select(AuditLog).where(AuditLog.action == action)))


def refund_rows(session) -> int:
    """Refund rows of any kind: provider refunds and credit notes alike."""
    return session.scalar(
        select(func.count())
        .select_from(PaymentTransaction)
        .where(PaymentTransaction.type == TransactionType.refund)
    )


def store_refund(session, sale, amount: int, documents, *, now: datetime = NOW):
    """Step 1 of a refund, committed: the refund_pending row the provider is asked about."""
    refund = refunds.begin_refund(
        session,
        transaction=sale,
        amount_cents=amount,
        reason="member moved away",
        actor_user_id=None,
        now=now,
        documents=documents,
    )
    session.commit()
    return refund


def send_refund(session, card_server, refund_id, documents, *, now: datetime = NOW):
    """Steps 2 and 3 of a stored refund on the fake provider, committed: the refund row."""
    done = refunds.execute_refund(
        session,
        card_server.provider(timeout=5.0),
        TEST_CIPHER,
        refund_id,
        now=now,
        documents=documents,
    )
    session.commit()
    return done


def committed_sale(url: str, card_server, *, amount: int = 9900):
    """A completed card payment of a gym whose terminal has been live for a month, committed
    for other connections (PostgreSQL): the session factory and the payment."""
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        sale = paid_charge(session, gym, card_server, amount=amount)
        session.commit()
    return factory, sale


def charge_at_desk(factory, gym, provider, documents, request, now: datetime = NOW):
    """The owner's desk charge of `request` (a DeskChargeRequest)."""
    return desk.desk_charge(
        factory,
        provider,
        organization_id=gym.organization.id,
        request=request,
        actor_user_id=gym.owner.id,
        now=now,
        cipher=TEST_CIPHER,
        documents=documents,
    )


def sent_attempt(
    session,
    subscription: Subscription,
    card_server,
    *,
    started: datetime = NOW - timedelta(minutes=5),
) -> PaymentTransaction:
    """An attempt the provider charged whose answer was lost: pending, uncertain."""
    began = attempts.begin_attempt(session, subscription.id, now=started, cipher=TEST_CIPHER)
    assert began.outcome == "started", began
    session.flush()
    card_server.inject(CHARGE, Fault.answer_lost)
    result = attempts.send_attempt(began, card_server.provider())
    applied = attempts.apply_outcome(session, began.transaction_id, result, now=started)
    assert applied.outcome == "pending", applied
    session.flush()
    return session.get(PaymentTransaction, began.transaction_id)


def presale_with_checkout(
    session,
    gym,
    card_server,
    *,
    opening=NOW + timedelta(days=20),
    number: str = APPROVE,
    page_fields: dict[str, Any] | None = None,
    **fields,
) -> tuple[Subscription, Checkout]:
    """A presale whose card was saved the real way: a token-only page on the fake provider,
    completed by the member, read back, and its checkout row kept (the verify-account deal)."""
    page = completed_token_page(
        card_server.provider(), card_server.simulator, number, return_value="presale"
    )
    method = save_card(
        session,
        organization_id=gym.organization.id,
        user_id=gym.member.id,
        card=page.token,
        terminal=TERMINAL.number,
        now=NOW,
        cipher=TEST_CIPHER,
    )
    subscription = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=opening, payment_method_id=method.id, **fields
    )
    checkout = bf.make_checkout(
        session,
        subscription,
        operation=SAVE_CARD_ONLY,
        terminal=TERMINAL.number,
        page_id=page.page_id,
        status=CheckoutStatus.completed,
        metadata_={"lowProfileId": page.page_id},
        expires_at=NOW + timedelta(hours=2),
        **(page_fields or {}),
    )
    return subscription, checkout


def forget_account(session, gym, terminal: str = TERMINAL.number) -> None:
    """The organization's credentials for `terminal` are gone: that merchant account can no
    longer be asked about anything."""
    for config in session.scalars(
        select(PaymentProviderConfig).where(
            PaymentProviderConfig.organization_id == gym.organization.id,
            PaymentProviderConfig.terminal == terminal,
        )
    ):
        config.credentials_ciphertext = None
        config.active = False
    session.flush()


class Crash(BaseException):
    """The process dies here: a BaseException, so no `except Exception` of the code under test
    swallows it, and the session it was in is closed without a commit."""


def dies(monkeypatch, module, name: str, *, after: bool) -> None:
    """`module.name` becomes the point where the process dies: before the call (it never
    happens) or after it (it happened, its answer dies with the process). `monkeypatch.undo()`
    is the restart."""
    real = getattr(module, name)

    def seam(*args, **kwargs):
        if after:
            real(*args, **kwargs)
        raise Crash(f"{'after' if after else 'before'} {name}")

    monkeypatch.setattr(module, name, seam)


def race(threads: int, act) -> list[str]:
    """`act()` in `threads` threads released at once; what each answered (its return value or
    the DomainError's code), in no particular order."""
    from gymctl.errors import DomainError

    start = threading.Barrier(threads)
    answers: list[str] = []

    def run() -> None:
        start.wait()
        try:
            answers.append(str(act()))
        except DomainError as error:
            answers.append(error.code)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return answers


def dismiss(session, provider, gym, transaction, *, now=NOW, retry=False):
    """The owner's confirm-no-debit of `transaction`, naming it exactly, confirmed a minute
    before `now`."""
    return no_debit.confirm_no_debit(
        session,
        provider,
        TEST_CIPHER,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=gym.owner.id,
        confirmation=confirmation_of(transaction, now=now, retry=retry),
        now=now,
    )


def confirmation_of(
    transaction, *, now=NOW, request_id=None, retry=False
) -> no_debit.NoDebitConfirmation:
    """A confirm-no-debit body naming `transaction`'s attempt exactly, confirmed a minute
    before `now`, under `request_id` (a new one by default)."""
    attempt = transaction.billing_attempt
    return no_debit.NoDebitConfirmation(
        request_id=request_id or uuid.uuid4(),
        provider_case_id="CASE-1",
        confirmed_at=now - timedelta(minutes=1),
        external_attempt_id=attempt["externalAttemptId"],
        terminal=attempt["terminal"],
        amount_in_cents=attempt["amountInCents"],
        currency=attempt["currency"],
        no_debit_occurred=True,
        cannot_settle_later=True,
        authorize_retry=retry,
    )
