"""Hosted checkout pages (spec B 3, 4.3, 5, 6): a member's card-plan purchase, the page's
verified completion (webhook or the member's return), and the abandoned-page sweep.

A page's outcome is only ever taken from the provider's read-back on the organization's
terminal, never from what a webhook claims; completing a page is idempotent on the checkout
row (locked), so a redelivered or out-of-order webhook never settles twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access.memberships import membership_of
from gymctl.billing import attempts, codes, plans
from gymctl.billing.accounts import CARD_PROVIDER, active_config, save_card, terminal_of
from gymctl.billing.alerts import raise_alert
from gymctl.billing.resolution import original_account
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import DomainError, conflict, forbidden, unavailable
from gymctl.events import EventKind, emit
from gymctl.models import (
    Checkout,
    Membership,
    Organization,
    PaymentProviderConfig,
    PaymentTransaction,
    Plan,
    Subscription,
)
from gymctl.models.billing import (
    CheckoutStatus,
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.organizations import MembershipStatus
from gymctl.providers.card import (
    CURRENCIES,
    CardProvider,
    HostedPage,
    PageRequest,
    PageResult,
    PageState,
    ProviderUnavailable,
)

CHECKOUT_TTL = timedelta(hours=2)  # ours: after this an open page counts as abandoned
# Ours: an open page past its time whose read-back still fails this long after (a terminal
# that refuses every call, a merchant account closed) is abandoned unread, rather than holding
# its plan scheduled (and its max_purchases place taken) for ever; the abandoned pages'
# read-backs still read it on their schedule, and a payment found then revives the plan.
UNANSWERED_FOR = timedelta(days=8)
SAVE_CARD_ONLY = "CreateTokenOnly"  # the provider's operation names
CHARGE_AND_SAVE_CARD = "ChargeAndCreateToken"
ABANDONED = "checkout_abandoned"
FAILED = "checkout_failed"
CARD_REPLACEMENT = "card_replacement"


@dataclass(frozen=True)
class Urls:
    """Where the provider sends the member back, and where it posts its webhook."""

    success: str
    failure: str
    webhook: str


def purchase_card_plan(
    session: Session,
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    plan_id: uuid.UUID,
    user_id: uuid.UUID,
    urls: Urls,
    now: datetime,
    cipher: FieldCipher,
) -> tuple[Subscription, Checkout]:
    """A member buys a card plan: a scheduled subscription and its hosted page. Before the
    opening day this is a presale: the page only saves the card (no period, quota or credits
    until the opening day's charge).

    The page is opened first and the rows are written after, each check made again with them:
    the provider's round trip is made with no write (on the embedded default, no transaction
    holding the database's one write lock: a slow provider held every writer). A page is only
    a form until our rows name it: one whose rows are then refused (the last slot sold
    meanwhile, a second tap, terms changed) or never written (a crash) is a page no one is
    sent to, and a payment made on it anyway is verified against no checkout (unverified)."""
    checkout_id = ids.new_id()
    terms = _purchase_terms(session, organization_id, plan_id, user_id, now)
    opened_on, request = terms.page_terms, terms.page_request(checkout_id, urls)
    on_terminal = terminal_of(terms.config, cipher)
    release_for_outside_call(session)  # only read so far (its rows expire): written after
    page = open_page(provider, on_terminal, request)
    session.expire_all()  # read again, as they are now (PostgreSQL kept the first reads)
    again = _purchase_terms(session, organization_id, plan_id, user_id, now, writing=True)
    if again.page_terms != opened_on:
        raise conflict(
            codes.PAGE_TERMS_CHANGED,
            "the plan's price or the gym's card terminal changed while the page opened; try again",
        )
    plan, opening = again.plan, again.opening
    subscription = plans.new_subscription(
        session,
        plan,
        again.membership,
        status=SubscriptionStatus.scheduled,
        method=CollectionMethod.card_provider,
        now=now,
        opening_day=opening,
    )
    checkout = Checkout(
        id=checkout_id,
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=user_id,
        operation=again.operation,
        terminal=again.config.terminal,
        amount_in_cents=plan.price_in_cents,
        currency=plan.currency,
        status=CheckoutStatus.open,
        metadata_={},
        expires_at=now + CHECKOUT_TTL,
        created_at=now,
    )
    keep_page(checkout, page)
    session.add(checkout)
    session.flush()
    # The guarded UPDATE locks the plan's row until the commit: taken last, it queues the
    # plan's other buyers (a presale's launch) behind no provider call.
    plans.take_purchase_slot(session, plan)
    emit(
        session,
        EventKind.analytics,
        "payment.form_created",
        at=now,
        aggregate_type="checkout",
        aggregate_id=checkout.id,
        organization_id=organization_id,
        actor_user_id=user_id,
        payload={
            "subscriptionId": str(subscription.id),
            "operation": checkout.operation,
            "presale": opening is not None,
        },
    )
    session.flush()
    return subscription, checkout


@dataclass(frozen=True)
class _PurchaseTerms:
    """What a purchase's checks found, and the terms its page is opened on."""

    membership: Membership
    plan: Plan
    config: PaymentProviderConfig
    opening: datetime | None

    @property
    def operation(self) -> str:
        free = self.plan.price_in_cents == 0  # nothing to charge: the page only saves the card
        return SAVE_CARD_ONLY if self.opening or free else CHARGE_AND_SAVE_CARD

    @property
    def page_terms(self) -> tuple[Any, ...]:
        return (self.operation, self.plan.price_in_cents, self.plan.currency, self.config.terminal)

    def page_request(self, checkout_id: uuid.UUID, urls: Urls) -> PageRequest:
        return page_request(
            checkout_id, self.operation, self.plan.price_in_cents, self.plan.currency, urls
        )


def sold_online(plan: Plan) -> bool:
    """A card plan in a currency the card provider takes: what a member buys online, and what
    a presale may switch to (its opening day's charge is the card provider's)."""
    return plan.type == PlanType.card and plan.currency in CURRENCIES


def refuse_unless_sold_online(plan: Plan) -> None:
    """409 plan_sold_at_desk (not a card plan), 409 currency_not_supported."""
    if plan.type != PlanType.card:
        raise conflict(codes.PLAN_SOLD_AT_DESK, "this plan is sold at the front desk")
    if plan.currency not in CURRENCIES:
        raise conflict(
            codes.CURRENCY_NOT_SUPPORTED,
            f"the card provider does not take {plan.currency}",
        )


def _purchase_terms(
    session: Session,
    organization_id: uuid.UUID,
    plan_id: uuid.UUID,
    user_id: uuid.UUID,
    now: datetime,
    *,
    writing: bool = False,
) -> _PurchaseTerms:
    """The purchase's refusals, in their order; they write nothing. `writing`: the terms the
    rows are written on, the opening day read under the settings row's share lock."""
    membership = membership_of(session, organization_id, user_id)
    if membership.status != MembershipStatus.active:
        raise forbidden(codes.MEMBERSHIP_INACTIVE, "your membership is not active")
    plan = plans.live_plan(session, organization_id, plan_id)
    refuse_unless_sold_online(plan)
    config = active_config(session, organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise conflict(
            codes.CARD_PROVIDER_NOT_CONFIGURED,
            "this gym does not take card payments online",
        )
    plans.refuse_if_held(session, plan, user_id)
    plans.refuse_if_sold_out(plan)  # read, unlocked: a sold-out plan opens no page
    opening = plans.presale_opening_day(session, organization_id, now, for_share=writing)
    return _PurchaseTerms(membership, plan, config, opening)


def page_request(
    checkout_id: uuid.UUID, operation: str, amount_in_cents: int, currency: str, urls: Urls
) -> PageRequest:
    """A hosted page for the checkout `checkout_id` (its return value: how a read-back names
    the checkout it belongs to)."""
    return PageRequest(
        operation=operation,
        amount_in_cents=amount_in_cents,
        currency=currency,
        return_value=str(checkout_id),
        success_url=urls.success,
        failure_url=urls.failure,
        webhook_url=urls.webhook,
    )


def open_page(provider: CardProvider, terminal, request: PageRequest) -> HostedPage:
    """Open a hosted page; 503 provider_unreachable (the caller has written nothing)."""
    try:
        return provider.create_page(terminal, request)
    except ProviderUnavailable:
        raise unavailable(
            codes.PROVIDER_UNREACHABLE, "the card provider is unreachable; try again"
        ) from None


def keep_page(checkout: Checkout, page: HostedPage) -> None:
    """The opened page on its checkout row (its id also as lowProfileId, which verify-account
    reads on older rows)."""
    checkout.page_id = page.page_id
    checkout.url = page.url
    checkout.metadata_ = {**(checkout.metadata_ or {}), "lowProfileId": page.page_id}


def checkout_by_page(session: Session, organization_id: uuid.UUID, page_id: str) -> Checkout | None:
    return session.scalar(
        select(Checkout).where(
            Checkout.organization_id == organization_id, Checkout.page_id == page_id
        )
    )


def apply_page(
    session: Session,
    checkout_id: uuid.UUID,
    page: PageResult,
    *,
    now: datetime,
    cipher: FieldCipher,
) -> str:
    """Apply a verified read-back to its checkout, once. Returns completed, failed,
    already_completed or already_failed. The caller has checked the page is ours."""
    checkout = session.scalar(
        select(Checkout)
        .where(Checkout.id == checkout_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if checkout.status == CheckoutStatus.completed:
        return "already_completed"
    subscription = attempts.lock_subscription(session, checkout.subscription_id)
    if page.state == PageState.failed:
        if checkout.status == CheckoutStatus.failed:
            return "already_failed"
        checkout.status = CheckoutStatus.failed
        checkout.completed_at = now
        if is_replacement(checkout):  # the old card stays; nothing else changes
            return "failed"
        if checkout.operation == SAVE_CARD_ONLY:
            raise_alert(
                "presale_checkout_transaction_failed",
                checkoutId=checkout.id,
                subscriptionId=subscription.id,
            )
        _cancel_unpaid(session, subscription, reason=FAILED, now=now)
        emit(
            session,
            EventKind.domain,
            "payment.failed",
            at=now,
            aggregate_type="checkout",
            aggregate_id=checkout.id,
            organization_id=checkout.organization_id,
            payload={"subscriptionId": str(subscription.id), "responseCode": page.response_code},
        )
        return "failed"
    checkout.status = CheckoutStatus.completed
    checkout.completed_at = now
    checkout.provider_transaction_id = page.transaction_id
    newer = _newer_replacement(session, checkout) if page.token is not None else None
    if newer is not None:
        # The card the member chose last stays in use: a replacement page opened after this one
        # completed first. A purchase completed late still pays (or revives) its plan below.
        checkout.metadata_ = {**(checkout.metadata_ or {}), "supersededBy": str(newer)}
        if is_replacement(checkout):
            session.flush()
            return "completed"
    elif page.token is not None:
        method = save_card(
            session,
            organization_id=checkout.organization_id,
            user_id=checkout.user_id,
            card=page.token,
            terminal=checkout.terminal,
            now=now,
            cipher=cipher,
        )
        subscription.payment_method_id = method.id
        if is_replacement(checkout):
            emit(
                session,
                EventKind.audit,
                "payment_method.replaced",
                at=now,
                aggregate_type="subscription",
                aggregate_id=subscription.id,
                organization_id=checkout.organization_id,
                actor_user_id=checkout.user_id,
                payload={"paymentMethodId": str(method.id), "checkoutId": str(checkout.id)},
            )
            subscription.updated_at = now
            session.flush()
            return "completed"
    revived, refusal = True, None
    cancelled = subscription.status == SubscriptionStatus.cancelled
    if cancelled and subscription.cancellation_reason not in (ABANDONED, FAILED):
        # Cancelled otherwise (withdrawn by the member or staff after our page's time, before
        # the abandoned sweep): only an abandoned or failed page is revived (spec B 3). The
        # money taken is recorded on it and staff alerted, as for a plan sold out since.
        revived, refusal = False, "late_completion_of_a_cancelled_plan"
        if checkout.operation == CHARGE_AND_SAVE_CARD:
            raise_alert(
                "billing_contradiction",
                detail=refusal,
                checkoutId=checkout.id,
                subscriptionId=subscription.id,
            )
    elif cancelled:
        # spec B 3: a late verified completion revives an abandoned checkout to scheduled,
        # unless the member holds the plan again since (plan_already_held holds on revival).
        # The slot its cancellation gave back is taken again; a plan sold out since, held
        # again by the member, or of a membership ended since, is not sold: the money is
        # recorded and staff alerted.
        plan = session.get(Plan, subscription.plan_id)
        if _membership_not_live(session, subscription):
            refusal = "late_completion_of_an_ended_membership"
        elif plans.live_holder(session, plan, subscription.user_id, other_than=subscription.id):
            refusal = "late_completion_of_a_plan_already_held"
        if refusal is None:
            try:
                plans.take_purchase_slot(session, plan)
            except DomainError:
                refusal = "late_completion_of_a_sold_out_plan"
        revived = refusal is None
        if revived:
            subscription.status = SubscriptionStatus.scheduled
            subscription.cancellation_reason = None
            subscription.cancelled_at = None
            subscription.ended_at = None
        else:
            raise_alert(
                "billing_contradiction",
                detail=refusal,
                checkoutId=checkout.id,
                subscriptionId=subscription.id,
            )
    subscription.updated_at = now
    if checkout.operation == CHARGE_AND_SAVE_CARD:
        transaction = PaymentTransaction(
            id=ids.new_id(),
            organization_id=checkout.organization_id,
            subscription_id=subscription.id,
            user_id=checkout.user_id,
            type=TransactionType.charge,
            status=TransactionStatus.completed,
            provider=CARD_PROVIDER,
            method="card",
            amount_in_cents=checkout.amount_in_cents,
            currency=checkout.currency,
            provider_transaction_id=page.transaction_id,
            metadata_={"checkoutId": str(checkout.id), "pageId": checkout.page_id},
            effects={"done": ["ledger", "subscription", "membership"], "at": now.isoformat()},
            created_at=now,
            updated_at=now,
        )
        session.add(transaction)
        if revived:
            attempts.grant_period(session, subscription, now=now)
        else:  # the money is recorded on the page's own (cancelled) subscription: staff refund it
            transaction.metadata_ = {**transaction.metadata_, "notRevived": refusal}
            # A task on the staff's list, not only a log line: the member paid for no plan.
            attempts.follow_up(
                session,
                transaction,
                subscription,
                reason=refusal,
                title="A page was paid for a plan that was not revived: refund the member",
                now=now,
            )
        attempts.document_sale(session, transaction, now=now)  # the document counter last
    elif revived and checkout.amount_in_cents == 0 and subscription.opening_day is None:
        attempts.grant_period(session, subscription, now=now)  # a free plan: the card is enough
    session.flush()
    return "completed"


def verify_and_apply(
    session: Session,
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    page_id: str,
    now: datetime,
    cipher: FieldCipher,
) -> tuple[str, Checkout | None]:
    """Read the page back on the organization's terminal that opened it (`_reading_account`)
    and apply it if it is ours.

    Outcomes: completed / failed / already_* (applied), unverified (not our page),
    deal_not_found (5096), deal_not_finalized (still settling), provider_unreachable,
    billing_contradiction (money taken at another amount)."""
    checkout = checkout_by_page(session, organization_id, page_id)
    config = _reading_account(session, organization_id, checkout)
    if config is None:
        return "unverified", None
    terminal = terminal_of(config, cipher)
    release_for_outside_call(session)  # only read so far: applied under the lock after
    try:
        page = provider.get_page(terminal, page_id)
    except ProviderUnavailable:
        return "provider_unreachable", checkout
    if page.state == PageState.unknown_page:
        return "deal_not_found", checkout
    if checkout is None or page.return_value != str(checkout.id):
        return "unverified", checkout
    if page.token_missing and (
        checkout.status != CheckoutStatus.open or checkout.expires_at <= now
    ):
        # The deal settled and the page is no longer open (its time over, or closed): the card
        # token it promised is waited on no longer. The member paid: the plan is paid (or
        # revived, or the money recorded for staff) as any late completion, without a card.
        page = replace(page, state=PageState.succeeded)
    if _charged_otherwise(checkout, page):
        return record_contradiction(session, checkout.id, page, now=now), checkout
    if page.state == PageState.pending or (
        page.state == PageState.succeeded and not _confirmed(checkout, page)
    ):
        return "deal_not_finalized", checkout
    return apply_page(session, checkout.id, page, now=now, cipher=cipher), checkout


def _reading_account(
    session: Session, organization_id: uuid.UUID, checkout: Checkout | None
) -> PaymentProviderConfig | None:
    """The merchant account a page is read back on: the terminal that opened it (a page is
    only known there), by its kept credentials when the gym has moved terminal since, as a
    refund or a reconcile asks the account that took the money; else the organization's
    active card terminal (a page none of our checkouts names is then unverified)."""
    if checkout is not None:
        config = original_account(session, organization_id, checkout.terminal)
        if config is not None:
            return config
    config = active_config(session, organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        return None
    return config


def abandoned_due(session: Session, *, after: datetime | None = None) -> datetime | None:
    """The first instant (after `after`, if given) at which `abandoned_sweep` finds a page
    past its time."""
    if after is None:
        return session.scalar(_FIRST_EXPIRY)
    return session.scalar(_FIRST_EXPIRY_AFTER, {"after": after})


_FIRST_EXPIRY = select(func.min(Checkout.expires_at)).where(Checkout.status == CheckoutStatus.open)
_FIRST_EXPIRY_AFTER = _FIRST_EXPIRY.where(Checkout.expires_at > bindparam("after"))


def abandoned_sweep(
    factory: sessionmaker[Session], provider: CardProvider, *, now: datetime, cipher: FieldCipher
) -> dict[str, object]:
    """Open pages past their time: read back first (a lost webhook may hide a success), then
    cancel the unpaid subscription. A later verified completion revives it: the webhook's, or
    `abandoned_pages.read_back_abandoned`'s, which reads the page back again on its schedule."""
    with factory() as session:
        expired = session.scalars(
            select(Checkout.id).where(
                Checkout.status == CheckoutStatus.open, Checkout.expires_at <= now
            )
        ).all()
    result: dict[str, Any] = {
        "checked": len(expired),
        "completed": 0,
        "abandoned": [],
        "alerts": [],
    }
    for checkout_id in expired:
        with factory() as session:
            checkout = session.get(Checkout, checkout_id)
            if (checkout.metadata_ or {}).get("contradiction"):
                continue  # money was taken: staff resolve it, the sweep never cancels it
            outcome = "deal_not_found"
            if checkout.page_id:
                outcome, _ = verify_and_apply(
                    session,
                    provider,
                    organization_id=checkout.organization_id,
                    page_id=checkout.page_id,
                    now=now,
                    cipher=cipher,
                )
            if outcome == "provider_unreachable" and now - checkout.expires_at >= UNANSWERED_FOR:
                outcome = "abandoned unread"  # abandoned below; the read-backs still read it
            if outcome in ("completed", "failed", "provider_unreachable", "billing_contradiction"):
                result["completed"] += outcome == "completed"
                if outcome == "billing_contradiction":
                    result["alerts"].append({"reason": outcome, "checkoutId": str(checkout_id)})
                session.commit()
                continue
            # Read again under the lock: the read-back above released the transaction (no lock
            # across the provider's call), and a webhook may have completed the page since; the
            # row held from before it still said open, and the paid page was abandoned.
            checkout = session.scalar(
                select(Checkout)
                .where(Checkout.id == checkout_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
            if checkout.status != CheckoutStatus.open:
                session.rollback()
                continue
            checkout.status = CheckoutStatus.abandoned
            checkout.metadata_ = {**checkout.metadata_, "checkoutPageExpiredAt": now.isoformat()}
            # Read back just now; the page can still be paid, so abandoned_pages reads it again
            # on its schedule (a webhook lost for good would otherwise leave no ledger row).
            checkout.read_back_at = now
            if is_replacement(checkout):  # the old card stays; the subscription is untouched
                session.commit()
                continue
            subscription = attempts.lock_subscription(session, checkout.subscription_id)
            _cancel_unpaid(session, subscription, reason=ABANDONED, now=now)
            if checkout.operation == SAVE_CARD_ONLY:
                result["alerts"].append(
                    raise_alert(
                        "presale_checkout_attempt_cancelled",
                        checkoutId=checkout_id,
                        subscriptionId=subscription.id,
                    )
                )
            result["abandoned"].append(str(subscription.id))
            session.commit()
    return result


def _charged_otherwise(checkout: Checkout, page: PageResult) -> bool:
    """A charging page whose deal took another amount or currency than the checkout's: money
    was taken, so it is neither waited on nor abandoned."""
    return (
        checkout.operation == CHARGE_AND_SAVE_CARD
        and page.state == PageState.succeeded
        and page.transaction_id is not None
        and page.amount_in_cents is not None
        and not _confirmed(checkout, page)
    )


def record_contradiction(
    session: Session, checkout_id: uuid.UUID, page: PageResult, *, now: datetime
) -> str:
    """Put money a page took for another amount on the ledger, once: a pending card charge
    (protected: it cannot be dismissed) on the checkout's subscription, the checkout marked,
    and the billing contradiction alert. The subscription is left as it is: it is never
    cancelled over taken money, nor granted a period it was not paid for. Answers
    billing_contradiction."""
    checkout = session.scalar(
        select(Checkout)
        .where(Checkout.id == checkout_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if (checkout.metadata_ or {}).get("contradiction"):
        return "billing_contradiction"
    taken = {
        "expectedAmountInCents": checkout.amount_in_cents,
        "expectedCurrency": checkout.currency,
        "amountInCents": page.amount_in_cents,
        "currency": page.currency or checkout.currency,
        "at": now.isoformat(),
    }
    transaction = PaymentTransaction(
        id=ids.new_id(),
        organization_id=checkout.organization_id,
        subscription_id=checkout.subscription_id,
        user_id=checkout.user_id,
        type=TransactionType.charge,
        status=TransactionStatus.pending,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=page.amount_in_cents,
        currency=taken["currency"],
        provider_transaction_id=page.transaction_id,
        metadata_={"checkoutId": str(checkout.id), "pageId": checkout.page_id},
        billing_attempt={
            "protocol": attempts.PROTOCOL,
            "terminal": checkout.terminal,
            "amountInCents": checkout.amount_in_cents,
            "currency": checkout.currency,
            "contradiction": {"field": "amount", **taken},
        },
        created_at=now,
        updated_at=now,
    )
    session.add(transaction)
    checkout.metadata_ = {**checkout.metadata_, "contradiction": taken}
    raise_alert(
        "billing_contradiction",
        detail="checkout_page_charged_another_amount",
        checkoutId=checkout.id,
        subscriptionId=checkout.subscription_id,
        transactionId=transaction.id,
    )
    session.flush()
    return "billing_contradiction"


def is_replacement(checkout: Checkout) -> bool:
    return (checkout.metadata_ or {}).get("purpose") == CARD_REPLACEMENT


def _newer_replacement(session: Session, checkout: Checkout) -> uuid.UUID | None:
    """A replacement page of the same subscription opened after this page (itself a
    replacement, or the plan's own purchase page) and completed first. An older page (left open
    past its time, or abandoned) completed late put its card in use over the newer page's,
    silently replacing the card the member saved last."""
    return session.scalar(
        select(Checkout.id)
        .where(
            Checkout.subscription_id == checkout.subscription_id,
            Checkout.status == CheckoutStatus.completed,
            Checkout.created_at > checkout.created_at,
            Checkout.metadata_["purpose"].as_string() == CARD_REPLACEMENT,
        )
        .limit(1)
    )


def _confirmed(checkout: Checkout, page: PageResult) -> bool:
    """A charging page counts only with its deal and the exact amount and currency."""
    if checkout.operation != CHARGE_AND_SAVE_CARD:
        return page.token is not None
    return (
        page.transaction_id is not None
        and page.amount_in_cents == checkout.amount_in_cents
        and (page.currency is None or page.currency == checkout.currency)
    )


def _membership_not_live(session: Session, subscription: Subscription) -> bool:
    """The member was removed or erased, or the gym deleted, since the page was abandoned
    (access.leaving.end_holdings ends only live plans), or is invited back and has not
    accepted: revived, the plan made the membership active (past the invitation, too) and was
    charged for someone the gym does not serve now."""
    live = Membership.status.in_((MembershipStatus.active, MembershipStatus.suspended))
    gone = ~live | Organization.deleted_at.is_not(None)
    return bool(
        session.scalar(
            select(gone)
            .select_from(Membership)
            .join(Organization, Organization.id == Membership.organization_id)
            .where(Membership.id == subscription.membership_id)
        )
    )


def _cancel_unpaid(
    session: Session, subscription: Subscription, *, reason: str, now: datetime
) -> None:
    """A purchase whose page failed or was abandoned holds nothing: cancelled, its place given
    back. A presale with a saved card stays (its opening day charges that card); a purchase is
    paid only by its page, whatever card a replacement page saved beside it (refused since s54,
    `card_replacement`, but older rows may hold one)."""
    if subscription.status != SubscriptionStatus.scheduled:
        return
    if subscription.opening_day is not None and subscription.payment_method_id:
        return
    plans.release_purchase_slot(session, subscription.plan_id)
    subscription.status = SubscriptionStatus.cancelled
    subscription.cancellation_reason = reason
    subscription.cancelled_at = now
    subscription.ended_at = now
    subscription.updated_at = now
