"""The owner's confirm-no-debit and authorize-retry (spec B 3, 4.2, 5).

confirm-no-debit records the provider's confirmation that a protected attempt charged nothing.
The provider is asked first (spec B 4.2: "The route checks the provider first"): a verified
approval vetoes the request and settles normally, a confirmed decline is applied likewise,
whatever the request says; then the owner and every local veto are checked under the billing
lock, and only this hold closes: cancelled with decision not_charged, subscription dates
unchanged, and either one retry authorized or the obligation left paused for authorize-retry.
A request id names one confirmation: replayed with the same evidence it answers replayed, with
any other evidence (or for another attempt) it is a conflict.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes
from gymctl.billing.alerts import raise_alert
from gymctl.billing.idempotency import require_uuid4
from gymctl.billing.resolution import (
    NOT_CHARGED,
    SETTLED,
    audit,
    describe,
    is_dismissed,
    is_technical_non_charge,
    lock_transaction,
    lookup,
    original_account_available,
    protected_transaction,
    refuse_if_executing,
)
from gymctl.crypto import FieldCipher
from gymctl.errors import conflict, forbidden, unprocessable
from gymctl.models import Membership, PaymentTransaction, Subscription
from gymctl.models.billing import TransactionStatus
from gymctl.models.organizations import MembershipStatus, Role
from gymctl.providers.card import CardProvider, Outcome, same_terminal


@dataclass(frozen=True)
class NoDebitConfirmation:
    """The owner's confirm-no-debit request (spec B 4.2): every field must match the stored
    attempt exactly (the terminal leading zeros aside); both attestations must be given."""

    request_id: uuid.UUID
    provider_case_id: str
    confirmed_at: datetime
    external_attempt_id: str
    terminal: str
    amount_in_cents: int
    currency: str
    no_debit_occurred: bool
    cannot_settle_later: bool
    authorize_retry: bool = False


def confirm_no_debit(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    confirmation: NoDebitConfirmation,
    now: datetime,
) -> dict[str, Any]:
    """The owner's confirm-no-debit. A replay of the same request id answers replayed."""
    require_uuid4(confirmation.request_id, code=codes.REQUEST_ID_INVALID, field="requestId")
    transaction = protected_transaction(session, organization_id, transaction_id)
    _require_owner(session, organization_id, actor_user_id)
    if _replay_of(session, transaction, confirmation):
        return _replayed(session, transaction, now=now)
    # The provider first: only an attempt that is no longer pending needs no asking (its own
    # veto answers), and an attempt whose merchant account is gone cannot be asked.
    result = (
        lookup(session, provider, cipher, transaction)
        if transaction.status == TransactionStatus.pending
        else None
    )
    transaction = lock_transaction(session, transaction)
    _require_owner(session, organization_id, actor_user_id)  # rechecked under the lock
    # And the request id: a request carrying it may have committed while this one asked the
    # provider (the organization's lock orders them; both had found it unused).
    if _replay_of(session, transaction, confirmation):
        return _replayed(session, transaction, now=now)
    if (
        result is not None
        and transaction.status == TransactionStatus.pending
        and result.outcome in (Outcome.approved, Outcome.declined)
    ):
        # The provider's verified answer wins over the request: applied as the collector would.
        applied = attempts.apply_outcome(session, transaction.id, result, now=now)
        if applied.alert:
            raise_alert(applied.alert, transactionId=transaction.id)
        code = (
            codes.BILLING_KNOWN_SUCCESS
            if applied.outcome == "charged"
            else (
                codes.BILLING_CONFIRMED_DECLINE
                if applied.outcome == "declined"
                else codes.BILLING_EVIDENCE_MISMATCH
            )
        )
        audit(
            session,
            "billing.no_debit_vetoed",
            transaction,
            actor_user_id,
            now,
            requestId=str(confirmation.request_id),
            providerAnswer=result.outcome.value,
            applied=applied.outcome,
        )
        session.flush()
        raise conflict(
            code,
            "the provider verified this attempt's outcome; it was applied and cannot be dismissed",
            audited=True,
            providerAnswer=result.outcome.value,
        )
    _check_dismissable(session, transaction, confirmation, now=now)
    subscription = session.get(Subscription, transaction.subscription_id)
    transaction.status = TransactionStatus.cancelled
    transaction.billing_resolution = {
        "decision": NOT_CHARGED,
        "at": now.isoformat(),
        "requestId": str(confirmation.request_id),
        "decidedByUserId": str(actor_user_id),
        "retryAuthorized": confirmation.authorize_retry,
        "retryRequested": confirmation.authorize_retry,
        "retryAuthorizedAt": now.isoformat() if confirmation.authorize_retry else None,
        # Whether collection was already paused by the owner before this hold.
        "ownerPaused": _owner_paused(subscription),
        "evidence": {
            **_confirmed(confirmation),  # both attestations true: checked above
            "providerLookup": {"answer": result.outcome.value, "at": now.isoformat()},
        },
    }
    transaction.updated_at = now
    _hold_or_release(
        subscription,
        retry=confirmation.authorize_retry,
        owner_paused=_owner_paused(subscription),
        now=now,
    )
    audit(
        session,
        "billing.no_debit_confirmed",
        transaction,
        actor_user_id,
        now,
        requestId=str(confirmation.request_id),
        providerCaseId=confirmation.provider_case_id,
        retryAuthorized=confirmation.authorize_retry,
    )
    session.flush()
    return {"outcome": "not_charged", "replayed": False, **describe(session, transaction, now=now)}


def authorize_retry(
    session: Session,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    """Resume a confirmed non-debit obligation left paused: one retry, due now."""
    transaction = protected_transaction(session, organization_id, transaction_id)
    _require_owner(session, organization_id, actor_user_id)
    transaction = lock_transaction(session, transaction)
    _require_owner(session, organization_id, actor_user_id)
    resolution = dict(transaction.billing_resolution or {})
    if not (is_dismissed(transaction) or is_technical_non_charge(transaction)):
        raise conflict(
            codes.BILLING_RETRY_NOT_AVAILABLE,
            "only a confirmed non-debit attempt can have its retry authorized",
        )
    if resolution.get("retryAuthorized"):
        return {"outcome": "already_authorized", **describe(session, transaction, now=now)}
    if is_technical_non_charge(transaction) and not attempts.decides_retry(session, transaction):
        # The collector reads the last non-charge of the charge owed now: authorized here, the
        # answer said retry_authorized and nothing was ever collected.
        raise conflict(
            codes.BILLING_RETRY_NOT_AVAILABLE,
            "this attempt no longer decides a retry: a later attempt of the same charge does "
            "(authorize that one), or the charge was since paid or moved",
        )
    resolution.update(
        retryAuthorized=True,
        retryAuthorizedAt=now.isoformat(),
        retryAuthorizedByUserId=str(actor_user_id),
    )
    transaction.billing_resolution = resolution
    transaction.updated_at = now
    subscription = session.get(Subscription, transaction.subscription_id)
    # A dismissed attempt's hold is ours (ownerPaused says what the owner had set before it);
    # a technical non-charge holds nothing, so the current pause is the owner's.
    owner_paused = (
        bool(resolution.get("ownerPaused"))
        if is_dismissed(transaction)
        else _owner_paused(subscription)
    )
    _hold_or_release(subscription, retry=True, owner_paused=owner_paused, now=now)
    audit(session, "billing.retry_authorized", transaction, actor_user_id, now)
    session.flush()
    return {"outcome": "retry_authorized", **describe(session, transaction, now=now)}


def _check_dismissable(
    session: Session,
    transaction: PaymentTransaction,
    confirmation: NoDebitConfirmation,
    *,
    now: datetime,
) -> None:
    """Every veto of spec B 4.2 except the provider's own answer, in a fixed order."""
    if transaction.status in SETTLED:
        raise conflict(codes.BILLING_KNOWN_SUCCESS, "this attempt is known to have charged")
    if transaction.status == TransactionStatus.failed and not (
        (transaction.billing_resolution or {}).get("decision") == NOT_CHARGED
    ):
        raise conflict(codes.BILLING_CONFIRMED_DECLINE, "this attempt was confirmed declined")
    if transaction.status != TransactionStatus.pending:
        raise conflict(codes.BILLING_ATTEMPT_NOT_PENDING, "this attempt is already resolved")
    if attempts.approved_late(transaction):
        raise conflict(
            codes.BILLING_KNOWN_SUCCESS,
            "the provider answered this attempt approved (it was reopened on that answer)",
        )
    refuse_if_executing(transaction, now)
    attempt = transaction.billing_attempt
    if attempt.get("contradiction"):
        raise conflict(
            codes.BILLING_EVIDENCE_MISMATCH,
            "the provider reported a different charge for this attempt",
            field=attempt["contradiction"].get("field"),
        )
    for field, named in (
        ("externalAttemptId", attempt.get("externalAttemptId") == confirmation.external_attempt_id),
        ("terminal", same_terminal(attempt.get("terminal"), confirmation.terminal)),
        ("amountInCents", attempt.get("amountInCents") == confirmation.amount_in_cents),
        ("currency", attempt.get("currency") == confirmation.currency),
    ):
        if not named:
            raise conflict(
                codes.BILLING_EVIDENCE_MISMATCH,
                "the confirmation does not name this attempt exactly",
                field=field,
            )
    if not (confirmation.no_debit_occurred and confirmation.cannot_settle_later):
        raise unprocessable(
            codes.BILLING_ATTESTATION_REQUIRED,
            "both attestations are required: no debit occurred, and it cannot settle later",
        )
    confirmed = confirmation.confirmed_at
    started = datetime.fromisoformat(attempt["startedAt"])
    if confirmed.utcoffset() != timedelta(0) or confirmed > now or confirmed < started:
        raise unprocessable(
            codes.BILLING_CONFIRMATION_TIME_INVALID,
            "the confirmation time must be explicit UTC, after the attempt and not in the future",
        )
    if not original_account_available(session, transaction):
        raise conflict(
            codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the merchant account that sent this attempt is no longer connected",
        )


def _replayed(
    session: Session, transaction: PaymentTransaction, *, now: datetime
) -> dict[str, Any]:
    return {"outcome": "not_charged", "replayed": True, **describe(session, transaction, now=now)}


def _replay_of(
    session: Session, transaction: PaymentTransaction, confirmation: NoDebitConfirmation
) -> bool:
    """True for a replay of the confirmation that closed this attempt; 409
    billing_request_id_reused for the same request id with any other evidence or attempt.
    Read fresh: under the billing lock it must see what a concurrent request committed."""
    request_id = str(confirmation.request_id)
    used_on = session.scalar(
        select(PaymentTransaction)
        .where(
            PaymentTransaction.organization_id == transaction.organization_id,
            PaymentTransaction.billing_resolution["requestId"].as_string() == request_id,
        )
        .execution_options(populate_existing=True)
    )
    if used_on is None:
        return False
    resolution = used_on.billing_resolution or {}
    if used_on.id != transaction.id or _evidence(confirmation) != _evidence_of(resolution):
        raise conflict(
            codes.BILLING_REQUEST_ID_REUSED,
            "this request id was used for a different confirmation",
        )
    return is_dismissed(transaction)


def _evidence(confirmation: NoDebitConfirmation) -> dict[str, Any]:
    """What a replay must repeat: the confirmation as stored, and its retry choice."""
    return {**_confirmed(confirmation), "retryAuthorized": confirmation.authorize_retry}


def _confirmed(confirmation: NoDebitConfirmation) -> dict[str, Any]:
    """The owner's confirmation as the resolution's evidence records it."""
    return {
        "providerCaseId": confirmation.provider_case_id,
        "confirmedAt": confirmation.confirmed_at.isoformat(),
        "externalAttemptId": confirmation.external_attempt_id,
        "terminal": confirmation.terminal,
        "amountInCents": confirmation.amount_in_cents,
        "currency": confirmation.currency,
        "attestations": {
            "noDebitOccurred": confirmation.no_debit_occurred,
            "cannotSettleLater": confirmation.cannot_settle_later,
        },
    }


def _evidence_of(resolution: dict[str, Any]) -> dict[str, Any]:
    stored = dict(resolution.get("evidence") or {})
    stored.pop("providerLookup", None)
    # The retry choice of the request, not a later authorize-retry.
    return {**stored, "retryAuthorized": bool(resolution.get("retryRequested"))}


def _owner_paused(subscription: Subscription) -> bool:
    """The owner's own pause: a system hold (collection_hold: late positive evidence on another
    attempt) pauses too, but is not the owner's and lifts by itself."""
    return subscription.collection_paused and not subscription.collection_hold


def _hold_or_release(
    subscription: Subscription, *, retry: bool, owner_paused: bool, now: datetime
) -> None:
    """Without an authorized retry the obligation stays held; with one the collector may try
    once more now, unless the owner had paused collection before this hold: releasing our
    hold never lifts the owner's own pause, nor a system hold (`collection_hold`), which its
    own resolution lifts."""
    held = bool(subscription.collection_hold)
    subscription.collection_paused = owner_paused or not retry or held
    subscription.billing_alert = None  # a new state: its block, if any, alerts anew
    if retry:
        subscription.retry_at = now
    subscription.updated_at = now


def _require_owner(
    session: Session, organization_id: uuid.UUID, actor_user_id: uuid.UUID | None
) -> None:
    role = (
        session.scalar(
            select(Membership.role).where(
                Membership.organization_id == organization_id,
                Membership.user_id == actor_user_id,
                Membership.status == MembershipStatus.active,
            )
        )
        if actor_user_id
        else None
    )
    if role != Role.owner:
        raise forbidden(codes.OWNER_REQUIRED, "only the organization's owner can do this")


def utc_instant(value: datetime) -> datetime:
    """An explicit UTC instant (offset zero) or refused: a confirmation time is evidence."""
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise unprocessable(
            codes.BILLING_CONFIRMATION_TIME_INVALID,
            "the confirmation time must be explicit UTC",
        )
    return value.astimezone(UTC)
