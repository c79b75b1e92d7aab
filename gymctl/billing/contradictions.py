"""The operator's door for a billing contradiction (spec B 6: "billing contradictions"; 2.2: "A
pending billing attempt means the local outcome is unresolved"): a hosted checkout page or a
desk charge the provider approved at another amount, currency or (a desk charge, as a collector
attempt) terminal than the one stored. The money is held by the gym, so the row stays pending,
and reconcile, refund and the ordinary dismiss all refuse it. An operator settles it with one of
two decisions:

- accept: the gym takes what the provider took as the payment: the charge is recorded completed
  at the provider's amount (the stored amount kept in billingResolution); a checkout's page
  completes as a verified completion would (card saved, the plan's period granted). An
  overcharge is then given back with the ordinary refund.
- refund: the gym gives all of it back: recorded completed at the provider's amount (the ledger
  holds what was taken), then a full refund stored in the same transaction and sent by the door
  after the commit (the refund protocol: stored before the provider is called, resent under
  its own id by recovery); a checkout's page fails and its unpaid plan is cancelled.

A protected collector attempt (recurring, manual or debt) the provider approved at another
amount, currency or terminal than the attempt stored, or reopened on a late approval and then
contradicted, is settled by the same door (reconcile waits for the provider to agree with the
stored terms, which it never will):

- accept: the obligation is settled at the provider's amount as the charge would have settled
  it (`attempts.settle`: the period granted or the debt cleared, once; drift reviewed as ever).
- refund: recorded completed at the provider's amount, a full refund stored and sent as above,
  and the obligation left unpaid as a decline leaves it (`attempts.leave_unpaid`: debt opened
  with day 0 at the decision, a debt keeping its own, retried daily), unless another payment
  settled it since (paid twice: nothing is owed) or it drifted (reviewed, with a follow-up).
  The card declined nothing: no decline is counted, no charge_failed event.

Either way the payment gets its TaxInvoiceAndReceipt at the provider's amount
(`attempts.document_sale`; money was taken, and a refund's document then reverses it), and a
late-evidence hold the attempt put is lifted and its "reconcile it" follow-up
task done (its outcome is known).

The operator states the amount and currency the provider took; the provider is asked again by
the stored ids (the desk charge's or the attempt's external attempt id, the page's id, on the
terminal that took it; a read, never a charge) and the decision applies only if it still says
so. Money the provider reports on another terminal is settled (and refunded) on that terminal,
when the organization has an account there. Refusals change nothing. Settling twice with the
same decision answers already_settled (replayed), with the other one 409
billing_contradiction_settled.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes, refunds
from gymctl.billing.accounts import save_card, terminal_of
from gymctl.billing.checkout import FAILED, _cancel_unpaid
from gymctl.billing.desk import transaction_json
from gymctl.billing.resolution import (
    holds_contradiction,
    lock_organization,
    organization_transaction,
    original_account,
)
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import conflict, unprocessable
from gymctl.models import Checkout, PaymentTransaction
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import (
    CardProvider,
    Outcome,
    PageState,
    ProviderUnavailable,
    same_terminal,
)
from gymctl.providers.documents import DocumentProvider

ACCEPT = "accept"
REFUND = "refund"
DECISIONS = (ACCEPT, REFUND)
SETTLED = "contradiction_settled"  # billingResolution.decision


def settle_contradiction(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    decision: str,
    amount_in_cents: int,
    currency: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """Settle a contradicted charge by `decision`. Answers {outcome: accepted | refund_stored |
    already_settled, replayed, transaction, resolution, refundTransactionId}. A stored refund is
    the caller's to send after its commit (`refunds.execute_refund`). Refusals: 404
    transaction_not_found; 409 billing_no_contradiction, billing_contradiction_settled,
    billing_attempt_not_pending, billing_evidence_mismatch (the provider says otherwise now),
    billing_contradiction_not_acceptable (the page's plan is no longer waiting for its payment:
    refund it), billing_original_account_unavailable, billing_provider_unavailable; 422
    contradiction_decision_invalid, amount_invalid."""
    if decision not in DECISIONS:
        raise unprocessable(
            codes.CONTRADICTION_DECISION_INVALID,
            "decision is accept or refund",
            decisions=list(DECISIONS),
        )
    if isinstance(amount_in_cents, bool) or amount_in_cents <= 0:
        raise unprocessable(codes.AMOUNT_INVALID, "the amount must be a positive whole of cents")
    currency = currency.upper()
    transaction = _contradicted(session, organization_id, transaction_id)
    answered = _already(session, transaction, decision)
    if answered is not None:
        return answered
    taken = _ask_provider(session, provider, cipher, transaction)
    if (taken["amountInCents"], taken["currency"]) != (amount_in_cents, currency):
        raise conflict(
            codes.BILLING_EVIDENCE_MISMATCH,
            "the provider reports another amount or currency than the one stated; nothing changed",
            providerAmountInCents=taken["amountInCents"],
            providerCurrency=taken["currency"],
        )
    if original_account(session, organization_id, taken["terminal"]) is None:
        raise conflict(
            codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the provider reports this charge on a terminal the organization has no account on",
            providerTerminal=taken["terminal"],
        )
    # Locks in a fixed order: organization, the page's checkout (as a page's completion takes
    # it before the plan), membership and subscription, the charge.
    lock_organization(session, organization_id)
    checkout = _checkout_of(session, transaction, lock=True)
    subscription = (
        attempts.lock_subscription(session, transaction.subscription_id, may_end_at=now)
        if transaction.subscription_id
        else None
    )
    transaction = organization_transaction(session, organization_id, transaction_id, lock=True)
    answered = _already(session, transaction, decision)  # settled meanwhile
    if answered is not None:
        return answered
    waiting = subscription is not None and subscription.status == SubscriptionStatus.scheduled
    if checkout is not None and decision == ACCEPT and not waiting:
        raise conflict(
            codes.BILLING_CONTRADICTION_NOT_ACCEPTABLE,
            "the plan this page paid for is no longer waiting for its payment: refund it",
        )
    attempt = transaction.billing_attempt or {}
    expected = {"amountInCents": attempt.get("amountInCents"), "currency": attempt.get("currency")}
    transaction.amount_in_cents = taken["amountInCents"]
    transaction.currency = taken["currency"]
    deal = taken["transactionId"] or transaction.provider_transaction_id
    if transaction.attempt_kind is not None:  # a collector attempt: its obligation
        _settle_obligation(session, transaction, subscription, deal, decision, expected, now)
    transaction.status = TransactionStatus.completed
    transaction.provider_transaction_id = deal
    if transaction.attempt_kind is not None:
        attempts.release_hold(session, transaction, subscription, now=now)
    transaction.billing_resolution = {
        # A reopened attempt's evidence and hold are kept (release_hold recorded its release).
        **(transaction.billing_resolution or {}),
        "decision": SETTLED,
        "settlement": decision,
        "at": now.isoformat(),
        "decidedByUserId": str(actor_user_id) if actor_user_id else None,
        "expected": expected,
        "taken": {"amountInCents": taken["amountInCents"], "currency": taken["currency"]},
        **(
            {"takenOnTerminal": taken["terminal"]}
            if not same_terminal(taken["terminal"], attempt.get("terminal"))
            else {}
        ),
    }
    transaction.updated_at = now
    if checkout is not None:
        _settle_page(session, checkout, subscription, transaction, taken, decision, now, cipher)
    # The money taken gets its document whatever the decision (a refund's then reverses it), as
    # every card payment the provider took (an attempt accepted numbered it in settle).
    attempts.document_sale(session, transaction, now=now, documents=documents)
    refund = None
    if decision == REFUND:
        refund = refunds.begin_refund(
            session,
            transaction=transaction,
            amount_cents=transaction.amount_in_cents,
            reason="billing contradiction: the provider took another amount; given back",
            actor_user_id=actor_user_id,
            now=now,
            documents=documents,
            source="contradiction_refund",
        )  # on the terminal that took it: takenOnTerminal, above (refunds reads it)
        transaction.billing_resolution = {
            **transaction.billing_resolution,
            "refundTransactionId": str(refund.id),
        }
    attempts.audit(
        session,
        "billing.contradiction_settled",
        transaction,
        actor_user_id,
        now,
        settlement=decision,
        expected=expected,
        taken=transaction.billing_resolution["taken"],
        refundTransactionId=str(refund.id) if refund else None,
    )
    session.flush()
    return _answer(
        session, transaction, "accepted" if decision == ACCEPT else "refund_stored", replayed=False
    )


def _contradicted(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID
) -> PaymentTransaction:
    """A collector attempt, a desk charge or a page's charge that holds (or held, settled here)
    a contradiction."""
    transaction = organization_transaction(session, organization_id, transaction_id)
    if not holds_contradiction(transaction):
        raise conflict(
            codes.BILLING_NO_CONTRADICTION,
            "this payment holds no contradiction to settle",
        )
    return transaction


def _settle_obligation(session, transaction, subscription, deal, decision, expected, now):
    """A collector attempt's obligation. Accepted, it is settled as the charge would have
    settled it. Refunded, it is left unpaid as a decline leaves it (at the stored amount, what
    the obligation is), unless another payment settled it since (nothing is owed) or it
    drifted since the attempt began (a review and an urgent follow-up, as a settlement's)."""
    if decision == ACCEPT:
        attempts.settle(session, transaction, subscription, deal, now=now)
    else:
        review = attempts.settlement_review(session, transaction, subscription)
        if review and review != attempts.PAID_TWICE:
            transaction.billing_attempt = {
                **transaction.billing_attempt,
                "settlementReview": {"reason": review, "at": now.isoformat()},
            }
            attempts.follow_up(
                session,
                transaction,
                subscription,
                reason=review,
                title=f"Payment refunded but not reopened as owed ({review}): review the "
                "subscription",
                now=now,
            )
        elif not review:
            attempts.leave_unpaid(
                session, subscription, amount_in_cents=expected["amountInCents"], now=now
            )
        transaction.effects = {"done": ["ledger"], "at": now.isoformat()}
    if subscription.billing_alert == "billing_contradiction":
        subscription.billing_alert = None  # a new state: its block, if any, alerts anew
    subscription.updated_at = now


def _already(
    session: Session, transaction: PaymentTransaction, decision: str
) -> dict[str, Any] | None:
    """The answer for a charge no longer pending: a replay, or a refusal."""
    if transaction.status == TransactionStatus.pending:
        return None
    resolution = transaction.billing_resolution or {}
    if resolution.get("decision") != SETTLED:
        raise conflict(
            codes.BILLING_ATTEMPT_NOT_PENDING,
            "this charge is resolved already",
            transactionStatus=transaction.status.value,
        )
    if resolution.get("settlement") != decision:
        raise conflict(
            codes.BILLING_CONTRADICTION_SETTLED,
            "this contradiction was settled with another decision",
            settlement=resolution.get("settlement"),
        )
    return _answer(session, transaction, "already_settled", replayed=True)


def _ask_provider(
    session: Session, provider: CardProvider, cipher: FieldCipher, transaction: PaymentTransaction
) -> dict[str, Any]:
    """What the provider took, asked again by the stored ids on the terminal that took it."""
    attempt = transaction.billing_attempt or {}
    config = original_account(session, transaction.organization_id, attempt.get("terminal"))
    if config is None:
        raise conflict(
            codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the merchant account that took this charge is no longer connected",
        )
    on_terminal = terminal_of(config, cipher)
    page_id = (transaction.metadata_ or {}).get("pageId")
    release_for_outside_call(session)  # a read: applied under the locks after
    try:
        if attempt.get("externalAttemptId"):  # a desk charge or an attempt, by its stored id
            result = provider.lookup_charge(on_terminal, attempt["externalAttemptId"])
            approved = result.outcome == Outcome.approved
            amount, currency, deal = result.amount_in_cents, result.currency, result.transaction_id
            token, terminal = None, result.terminal
        else:  # a page's charge, by its page
            page = provider.get_page(on_terminal, page_id)
            # A deal that settled without the token it promised (recorded at its last
            # read-back) is approved money all the same.
            settled = page.state == PageState.succeeded or page.token_missing
            approved = settled and page.transaction_id is not None
            amount, currency, deal = page.amount_in_cents, page.currency, page.transaction_id
            token, terminal = page.token, None
    except ProviderUnavailable:
        raise conflict(
            codes.BILLING_PROVIDER_UNAVAILABLE,
            "the card provider could not be asked; nothing changed",
        ) from None
    if not approved:
        raise conflict(
            codes.BILLING_EVIDENCE_MISMATCH,
            "the provider no longer reports this charge approved: reconcile it; nothing changed",
        )
    return {
        "amountInCents": amount if amount is not None else transaction.amount_in_cents,
        "currency": (currency or transaction.currency).upper(),
        "transactionId": deal,
        "token": token,
        "terminal": terminal or attempt.get("terminal"),
    }


def _checkout_of(
    session: Session, transaction: PaymentTransaction, *, lock: bool
) -> Checkout | None:
    checkout_id = (transaction.metadata_ or {}).get("checkoutId")
    if not checkout_id:
        return None
    query = select(Checkout).where(
        Checkout.id == uuid.UUID(checkout_id),
        Checkout.organization_id == transaction.organization_id,
    )
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    return session.scalar(query)


def _settle_page(session, checkout, subscription, transaction, taken, decision, now, cipher):
    """The page's own outcome: accepted, it completes as a verified completion would (card
    saved, period granted, effects done); refunded, it fails and its unpaid plan is cancelled."""
    checkout.completed_at = now
    checkout.metadata_ = {**(checkout.metadata_ or {}), "contradictionSettled": decision}
    if decision == REFUND:
        checkout.status = CheckoutStatus.failed
        if subscription is not None:
            _cancel_unpaid(session, subscription, reason=FAILED, now=now)
        return
    checkout.status = CheckoutStatus.completed
    checkout.provider_transaction_id = transaction.provider_transaction_id
    if taken["token"] is not None:
        method = save_card(
            session,
            organization_id=checkout.organization_id,
            user_id=checkout.user_id,
            card=taken["token"],
            terminal=checkout.terminal,
            now=now,
            cipher=cipher,
        )
        subscription.payment_method_id = method.id
    attempts.grant_period(session, subscription, now=now)
    subscription.updated_at = now
    transaction.effects = {"done": ["ledger", "subscription", "membership"], "at": now.isoformat()}


def _answer(
    session: Session, transaction: PaymentTransaction, outcome: str, *, replayed: bool
) -> dict[str, Any]:
    resolution = transaction.billing_resolution or {}
    keys = ("decision", "settlement", "at", "expected", "taken", "refundTransactionId")
    return {
        "outcome": outcome,
        "replayed": replayed,
        "transaction": transaction_json(transaction),
        "resolution": {key: resolution.get(key) for key in keys} if resolution else None,
        "refundTransactionId": resolution.get("refundTransactionId"),
    }


def send_stored_refund(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    answer: dict[str, Any],
    *,
    now: datetime,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """After the caller committed a refund decision: send the stored refund once (steps 2 and
    3 of the refund protocol) and add its row to the answer. Not refunded yet (the provider
    unreachable, or it refused) is no refusal of the settlement: the answer shows the refund's
    status; recovery resends a pending one under its own id, a refused one is refunded again
    with the ordinary refund."""
    refund_id = answer.get("refundTransactionId")
    if not refund_id:
        return answer
    refund = refunds.execute_refund(
        session, provider, cipher, uuid.UUID(refund_id), now=now, documents=documents
    )
    return {**answer, "refund": transaction_json(refund)}
