"""Billing readiness (spec B 4.1): what would stop an organization's card collection, one page of
subscriptions at a time, for a platform operator. Read-only and offline: no provider call, no
write, and never a card token, ciphertext, credential or email in the report.

A page costs a fixed number of statements whatever its size or the organization's: the page of
subscriptions (with member, plan and card in one join), then one grouped statement each for the
attempt history, the token-only checkouts and the latest declined attempts of the page, and two
capped organization lists (unresolved and legacy pending transactions). Nothing is queried per
row.

checkState is the page's (plus the organization-wide issues): blocked when any blocker shows,
review when only review items do, no_known_blockers otherwise. `--all` in the CLI walks every
page and reports the worst.

A presale is scheduled with an opening day (spec B 2.1, `plans.is_presale`); a scheduled
subscription without one is a purchase whose hosted page is still open (see `readiness`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes, plans
from gymctl.billing.accounts import (
    CARD_PROVIDER,
    active_config,
    billing_settings,
    card_payload,
)
from gymctl.billing.checkout import SAVE_CARD_ONLY
from gymctl.crypto import FieldCipher
from gymctl.errors import not_found
from gymctl.models import (
    Checkout,
    Organization,
    PaymentMethod,
    PaymentTransaction,
    Subscription,
    User,
)
from gymctl.models.billing import (
    LIVE_STATUSES,
    CheckoutStatus,
    CollectionMethod,
    SubscriptionStatus,
    TransactionStatus,
)
from gymctl.providers.card import same_terminal

PAGE_SIZE = 100
LIST_CAP = 100  # spec B 8: unresolved and legacy lists
BLOCKER, REVIEW, INFO = "blocker", "review", "info"


# code -> (severity, next-action category)
ISSUES: dict[str, tuple[str, str]] = {
    "no_card_provider_terminal": (BLOCKER, "configure_provider"),
    "no_saved_card": (BLOCKER, "member_adds_card"),
    "card_expired": (BLOCKER, "member_adds_card"),
    "card_expires_before_charge": (REVIEW, "member_adds_card"),
    "account_unverified": (BLOCKER, "verify_account"),
    "account_evidence_missing": (REVIEW, "member_adds_card"),
    "first_charge_missing": (BLOCKER, "repair_schedule"),
    "first_charge_too_early": (BLOCKER, "repair_schedule"),
    "presale_holds_period": (REVIEW, "repair_schedule"),
    "unresolved_attempt": (BLOCKER, "resolve_transaction"),
    "technical_retries_exhausted": (BLOCKER, "resolve_transaction"),
    "collection_paused_by_owner": (REVIEW, "owner_decision"),
    "collection_held": (BLOCKER, "resolve_transaction"),
    "retry_terms_changed": (REVIEW, "owner_decision"),
    "debt_open": (INFO, "collect_debt"),
    "checkout_in_progress": (INFO, "member_completes_checkout"),
}


def readiness(
    session: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    cipher: FieldCipher,
    cursor: uuid.UUID | None = None,
    page_size: int = PAGE_SIZE,
    only: uuid.UUID | None = None,
) -> dict[str, Any]:
    """One page of the report, subscriptions after `cursor` in id order. `only` restricts the
    page to one subscription (the item the repair actions answer with).

    A purchase whose hosted page is still open (scheduled, no opening day: not a presale) is
    listed, as every live subscription is, and counted in pageTotals, with one info issue,
    checkout_in_progress (next action member_completes_checkout), and nothing that blocks: its
    first charge is the page the member is on (paid, the plan starts; never paid, the abandoned
    sweep cancels it), so the collector has nothing to charge and no card to need yet. No
    presale issue (first charge, account evidence, held period), no card issue, no
    expectedFirstCharge; its card fields show what is saved, if anything. An operator who
    repaired its schedule would give the member a second first charge (repair-schedule refuses
    it: billing_first_charge_unresolved)."""
    organization = session.get(Organization, organization_id)
    if organization is None or organization.deleted_at is not None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no such organization")
    config = active_config(session, organization_id)
    settings = billing_settings(session, organization_id)
    terminal = (
        config.terminal if config and config.provider == CARD_PROVIDER and config.terminal else None
    )
    conditions = _page_filter(organization_id, cursor, only)
    rows = _page(session, conditions, page_size)
    ids = _page_ids(conditions, page_size) if rows else None
    obligations = {row.Subscription.id: _obligation(row.Subscription) for row in rows}
    history = _attempt_history(session, ids, obligations)
    evidence = _token_only_checkouts(session, ids)
    declined = _latest_declines(session, ids)
    items = [
        _item(
            row,
            now=now,
            cipher=cipher,
            terminal=terminal,
            terminal_since=config.terminal_since if terminal else None,
            gym_opening=settings.opening_day,
            history=history.get(row.Subscription.id, {}),
            has_evidence=row.Subscription.id in evidence,
            declined=declined.get(row.Subscription.id),
        )
        for row in rows
    ]
    org_issues = [] if terminal else [_issue("no_card_provider_terminal")]
    unresolved, unresolved_truncated = _org_list(session, organization_id, protected=True, now=now)
    legacy, legacy_truncated = _org_list(session, organization_id, protected=False, now=now)
    severities = {issue["severity"] for item in items for issue in item["issues"]} | {
        issue["severity"] for issue in org_issues
    }
    return {
        "organizationId": str(organization_id),
        "generatedAt": now.isoformat(),
        "checkState": (
            "blocked"
            if BLOCKER in severities
            else "review"
            if REVIEW in severities
            else "no_known_blockers"
        ),
        "provider": {
            "provider": config.provider if config else None,
            "terminal": terminal,
            "terminalSince": _iso(config.terminal_since) if config else None,
            "openingDay": _iso(settings.opening_day),
        },
        "organizationIssues": org_issues,
        "items": items,
        "pendingRenewals": [
            {"subscriptionId": item["subscriptionId"], "reason": reason}
            for item in items
            for reason in item["pendingRenewal"]
        ],
        "unresolvedProviderTransactions": {"items": unresolved, "truncated": unresolved_truncated},
        "legacyPendingTransactions": {"items": legacy, "truncated": legacy_truncated},
        "pageTotals": _totals(items),
        "nextCursor": items[-1]["subscriptionId"] if len(items) == page_size else None,
    }


def _page_filter(organization_id, cursor, only) -> list[Any]:
    """The page's subscriptions: the live ones; `only` names one whatever its status (the
    answer of an action on it: verify-account takes a paused or ended plan's card too, and its
    answer read an empty page, a 500)."""
    conditions = [
        Subscription.organization_id == organization_id,
        Subscription.deleted_at.is_(None),
    ]
    if only is not None:
        return [*conditions, Subscription.id == only]
    conditions.append(Subscription.status.in_(LIVE_STATUSES))
    if cursor is not None:
        conditions.append(Subscription.id > cursor)
    return conditions


def _page(session, conditions, page_size):
    query = (
        select(
            Subscription,
            User.name.label("member_name"),
            PaymentMethod.id.label("method_id"),
            PaymentMethod.payload_ciphertext.label("method_payload"),
            PaymentMethod.last4.label("last4"),
            PaymentMethod.expires_month.label("expires_month"),
            PaymentMethod.saved_at.label("saved_at"),
        )
        .join(User, User.id == Subscription.user_id)
        .outerjoin(
            PaymentMethod,
            and_(
                PaymentMethod.id == Subscription.payment_method_id,
                PaymentMethod.deleted_at.is_(None),
            ),
        )
        .where(*conditions)
        .order_by(Subscription.id)
        .limit(page_size)
    )
    return session.execute(query).all()


def _page_ids(conditions, page_size):
    """The page's subscription ids as a subquery: the grouped statements repeat the cheap
    primary-key walk instead of binding a hundred ids each."""
    return select(Subscription.id).where(*conditions).order_by(Subscription.id).limit(page_size)


def _obligation(subscription: Subscription) -> str:
    """The obligation the collector would attempt next (its technical ladder is per
    obligation, spec B 8)."""
    return attempts.obligation_of(subscription, attempts.kind_of(subscription))


def _attempt_history(
    session: Session, ids: Any, obligations: dict[uuid.UUID, str]
) -> dict[uuid.UUID, dict[str, Any]]:
    """Per subscription: protected attempts pending and declined; and, of the obligation the
    collector attempts next, its technical non-charges and the terms (amount, currency,
    terminal) and retry authorization of the last one, as the collector weighs them."""
    if ids is None:
        return {}
    T = PaymentTransaction
    decision = func.coalesce(T.billing_resolution["decision"].as_string(), "")
    not_charged = and_(T.status == TransactionStatus.failed, decision == attempts.NOT_CHARGED)
    counts = (
        select(
            T.subscription_id,
            func.count().filter(T.status == TransactionStatus.pending).label("pending"),
            func.count()
            .filter(
                and_(T.status == TransactionStatus.failed, decision.not_in(attempts.NOT_DECLINES))
            )
            .label("declined"),
        )
        .where(T.subscription_id.in_(ids), T.attempt_kind.is_not(None))
        .group_by(T.subscription_id)
    )
    found: dict[uuid.UUID, dict[str, Any]] = {}
    for row in session.execute(counts):
        found[row.subscription_id] = {"pending": row.pending, "declined": row.declined}
    # An obligation key names its subscription: at most one current key per subscription.
    current = T.obligation_key.in_(set(obligations.values()))
    for row in session.execute(_latest(ids, not_charged, current)):
        attempt = row.billing_attempt or {}
        entry = found.setdefault(row.subscription_id, {})
        entry["technical"] = row.count
        entry["lastNonCharge"] = (
            attempt.get("amountInCents"),
            attempt.get("currency"),
            attempt.get("terminal"),
        )
        entry["retryAuthorized"] = bool((row.billing_resolution or {}).get("retryAuthorized"))
    return found


def card_evidence() -> tuple[Any, ...]:
    """The token-only checkouts that are evidence of the card in use, the deal verify-account
    reads back: completed (the page saved its card as the subscription's payment method), and
    not superseded (`checkout.apply_page` marks supersededBy a page completed after a newer
    replacement page: its card was never put in use). Open, abandoned and failed pages saved no
    card. The newest (created_at, then id) is the card in use: a page completed after a newer
    one was created is superseded, so among these, creation order is completion order."""
    return (
        Checkout.operation == SAVE_CARD_ONLY,
        Checkout.status == CheckoutStatus.completed,
        Checkout.metadata_["supersededBy"].as_string().is_(None),
    )


def _token_only_checkouts(session: Session, ids: Any) -> set[uuid.UUID]:
    """The page's subscriptions whose card in use has its token-only checkout (the evidence
    verify-account needs)."""
    if ids is None:
        return set()
    return set(
        session.scalars(
            select(Checkout.subscription_id)
            .where(Checkout.subscription_id.in_(ids), *card_evidence())
            .distinct()
        )
    )


def _latest_declines(session: Session, ids: Any) -> dict[uuid.UUID, dict[str, Any]]:
    """The latest attempt of each subscription when it was a decline: the snapshot the expected
    first charge is then reported from."""
    if ids is None:
        return {}
    latest = session.execute(_latest(ids))
    return {
        row.subscription_id: row.billing_attempt or {}
        for row in latest
        if row.status == TransactionStatus.failed
        and (row.billing_resolution or {}).get("decision") not in attempts.NOT_DECLINES
    }


def _latest(ids: Any, *conditions: Any):
    """The newest protected attempt per subscription and how many match (windows, so SQLite
    answers it too)."""
    T = PaymentTransaction
    rank = (
        func.row_number()
        .over(partition_by=T.subscription_id, order_by=(T.created_at.desc(), T.id.desc()))
        .label("rank")
    )
    count = func.count().over(partition_by=T.subscription_id).label("count")
    ranked = (
        select(
            T.subscription_id,
            T.status,
            T.billing_resolution,
            T.billing_attempt,
            rank,
            count,
        )
        .where(T.subscription_id.in_(ids), T.attempt_kind.is_not(None), *conditions)
        .subquery()
    )
    return select(ranked).where(ranked.c.rank == 1)


def _org_list(
    session: Session, organization_id: uuid.UUID, *, protected: bool, now: datetime
) -> tuple[list[dict[str, Any]], bool]:
    """Pending transactions of the organization, oldest first, capped (truncation marked).
    Protected: stored v1 attempts whose outcome is unresolved, and those closed as not charged
    that the provider charged after all while a newer attempt was pending (state
    charged_after_closing: the gym holds the money, the ledger says failed, until a
    reconcile); legacy: pending rows without a protected attempt (older paths, desk
    requests)."""
    T = PaymentTransaction
    unresolved = T.status == TransactionStatus.pending
    if protected:
        kind = T.attempt_kind.is_not(None)
        unresolved = or_(
            unresolved,
            and_(
                T.status.in_((TransactionStatus.failed, TransactionStatus.cancelled)),
                T.billing_resolution["decision"].as_string() == attempts.CHARGED_AFTER_CLOSING,
            ),
        )
    else:
        kind = T.attempt_kind.is_(None)
    rows = session.execute(
        select(
            T.id,
            T.subscription_id,
            T.attempt_kind,
            T.status,
            T.amount_in_cents,
            T.currency,
            T.provider,
            T.created_at,
            T.billing_attempt,
        )
        .where(T.organization_id == organization_id, unresolved, kind)
        .order_by(T.created_at, T.id)
        .limit(LIST_CAP + 1)
    ).all()
    items = []
    for row in rows[:LIST_CAP]:
        attempt = row.billing_attempt or {}
        started = attempt.get("startedAt")
        pending = row.status == TransactionStatus.pending
        executing = (
            pending
            and started is not None
            and now - datetime.fromisoformat(started) < attempts.EXECUTING_GRACE
        )
        items.append(
            {
                "transactionId": str(row.id),
                "subscriptionId": _str(row.subscription_id),
                "kind": row.attempt_kind.value if row.attempt_kind else None,
                "provider": row.provider,
                "amountInCents": row.amount_in_cents,
                "currency": row.currency,
                "createdAt": row.created_at.isoformat(),
                "externalAttemptId": attempt.get("externalAttemptId"),
                "executing": executing,
                "state": "pending" if pending else attempts.CHARGED_AFTER_CLOSING,
            }
        )
    return items, len(rows) > LIST_CAP


def _item(
    row,
    *,
    now: datetime,
    cipher: FieldCipher,
    terminal: str | None,
    terminal_since: datetime | None,
    gym_opening: datetime | None,
    history: dict[str, Any],
    has_evidence: bool,
    declined: dict[str, Any] | None,
) -> dict[str, Any]:
    subscription: Subscription = row.Subscription
    card_collected = subscription.payment_collection_method == CollectionMethod.card_provider
    presale = plans.is_presale(subscription)
    # Scheduled without an opening day: its hosted page is still open (see `readiness`).
    in_checkout = subscription.status == SubscriptionStatus.scheduled and not presale
    opening = subscription.opening_day or gym_opening
    start = subscription.started_at or subscription.created_at
    floor = max(d for d in (opening, start) if d is not None)
    issues: list[dict[str, str]] = []
    pending_renewal: list[str] = []
    charge_at = subscription.next_charge_date
    expiry_check, account_check = "not_card_collected", "not_card_collected"
    if card_collected:
        expiry_check = _expiry_check(row.expires_month, charge_at or floor, row.method_id, now)
        account_check = _account_check(row, cipher, terminal, terminal_since)
        if in_checkout:
            issues.append(_issue("checkout_in_progress"))  # the page saves its card
        elif row.method_id is None:
            issues.append(_issue("no_saved_card"))
        elif expiry_check == "expired":
            issues.append(_issue("card_expired"))
        elif expiry_check == "expires_before_charge":
            issues.append(_issue("card_expires_before_charge"))
        if not in_checkout and (
            account_check == "other_terminal" or (presale and account_check == "unverified")
        ):
            issues.append(_issue("account_unverified"))
        if presale and not has_evidence:
            issues.append(_issue("account_evidence_missing"))
        if history.get("pending"):
            issues.append(_issue("unresolved_attempt"))
        # An owner's authorize-retry lets the next attempt through either block (collector).
        authorized = history.get("retryAuthorized", False)
        exhausted = history.get("technical", 0) > len(attempts.TECHNICAL_RETRY_DELAYS)
        if exhausted and not authorized:
            issues.append(_issue("technical_retries_exhausted"))
        due = charge_at is not None and charge_at <= now
        if subscription.collection_paused:
            # A system hold (late positive evidence) is no owner's decision: a payment to resolve.
            held = (
                "collection_held" if subscription.collection_hold else "collection_paused_by_owner"
            )
            issues.append(_issue(held))
            if due:
                pending_renewal.append(held)
        last = history.get("lastNonCharge")
        amount = attempts.amount_of(subscription, attempts.kind_of(subscription))
        if (
            last
            and not authorized
            and not attempts.same_terms(last, amount, subscription.currency, terminal)
        ):
            issues.append(_issue("retry_terms_changed"))
            if due:
                pending_renewal.append("retry_terms_changed")
    if presale:
        if charge_at is None:
            issues.append(_issue("first_charge_missing"))
        elif charge_at < floor:
            issues.append(_issue("first_charge_too_early"))
        if (
            subscription.current_period_start is not None
            or subscription.current_period_end is not None
            or subscription.sessions_remaining is not None
            or subscription.credits is not None
        ):
            issues.append(_issue("presale_holds_period"))
    if subscription.status == SubscriptionStatus.debt:
        issues.append(_issue("debt_open"))
    return {
        "subscriptionId": str(subscription.id),
        "userId": str(subscription.user_id),
        "memberName": row.member_name,
        "paymentMethodId": _str(row.method_id),
        "status": subscription.status.value,
        "planType": subscription.plan_type.value,
        "paymentCollectionMethod": subscription.payment_collection_method.value,
        "priceInCents": subscription.price_in_cents,
        "currency": subscription.currency,
        "nextChargeAt": _iso(charge_at),
        "floors": {"charge": _iso(floor), "opening": _iso(opening)},
        "expectedFirstCharge": _expected_first_charge(subscription, floor, declined)
        if presale
        else None,
        "card": {
            "last4": row.last4,
            "expiresMonth": row.expires_month,
            "savedAt": _iso(row.saved_at),
            "expiryCheck": expiry_check,
            "accountCheck": account_check,
            "tokenOnlyCheckout": has_evidence,
        },
        "retries": {
            "technical": history.get("technical", 0),
            "technicalLimit": len(attempts.TECHNICAL_RETRY_DELAYS),
            "declines": subscription.decline_count,
            "declinedAttempts": history.get("declined", 0),
            "pendingAttempts": history.get("pending", 0),
        },
        "collectionPaused": subscription.collection_paused,
        "debtAmountInCents": subscription.debt_amount_in_cents,
        "issues": issues,
        "pendingRenewal": pending_renewal,
    }


def _expected_first_charge(
    subscription: Subscription, floor: datetime, declined: dict[str, Any] | None
) -> dict[str, Any]:
    if declined:
        return {
            "source": "declined_attempt_snapshot",
            "at": declined.get("startedAt"),
            "amountInCents": declined.get("amountInCents"),
            "currency": declined.get("currency"),
        }
    at = subscription.next_charge_date
    return {
        "source": "live_estimate",
        "at": _iso(max(at, floor) if at else floor),
        "amountInCents": subscription.price_in_cents,
        "currency": subscription.currency,
    }


def _expiry_check(
    expires_month: str | None, charge_at: datetime, method_id: Any, now: datetime
) -> str:
    if method_id is None:
        return "missing"
    if not expires_month:
        return "unknown"
    if expires_month < now.strftime("%Y-%m"):
        return "expired"
    if expires_month < charge_at.strftime("%Y-%m"):
        return "expires_before_charge"
    return "ok"


def _account_check(row, cipher: FieldCipher, terminal: str | None, since: datetime | None) -> str:
    """Is the card on the current terminal? Proven when verify-account wrote it (verifiedAt);
    saved there 45 minutes after the terminal went live counts too (spec B 8). Inside those
    45 minutes only a presale's first charge is held back (the collector's rule)."""
    if row.method_id is None:
        return "missing"
    if terminal is None:
        return "no_terminal"
    payload = card_payload(row.method_id, row.method_payload, cipher)
    if not same_terminal(payload.get("terminalNumber"), terminal):
        return "other_terminal"  # a token lives on the terminal that made it
    if payload.get("verifiedAt"):
        return "verified_on_current_terminal"
    if since is None or row.saved_at >= since + attempts.PRESALE_CARD_AGE:
        return "saved_on_current_terminal"
    return "unverified"  # saved inside the 45 minutes after the terminal went live


def _totals(items: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = defaultdict(
        lambda: {"subscriptions": 0, "priceInCents": 0, "debtInCents": 0}
    )
    for item in items:
        total = totals[item["currency"]]
        total["subscriptions"] += 1
        total["priceInCents"] += item["priceInCents"]
        total["debtInCents"] += item["debtAmountInCents"]
    return dict(totals)


def _issue(code: str) -> dict[str, str]:
    severity, action = ISSUES[code]
    return {"code": code, "severity": severity, "nextAction": action}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def merge_pages(pages: list[dict[str, Any]]) -> dict[str, Any]:
    """Every page of an organization as one report (`--all`): the worst checkState, the items
    and pending renewals of all pages, totals summed; the organization lists are the same on
    every page."""
    worst = ("no_known_blockers", "review", "blocked")
    totals: dict[str, dict[str, int]] = {}
    for page in pages:
        for currency, total in page["pageTotals"].items():
            into = totals.setdefault(currency, dict.fromkeys(total, 0))
            for key, value in total.items():
                into[key] += value
    return {
        **pages[0],
        "checkState": max((page["checkState"] for page in pages), key=worst.index),
        "items": [item for page in pages for item in page["items"]],
        "pendingRenewals": [entry for page in pages for entry in page["pendingRenewals"]],
        "pageTotals": totals,
        "pages": len(pages),
        "nextCursor": None,
    }
