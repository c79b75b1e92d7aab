"""Card replacement (design: readiness's member_adds_card): a member saves a new card for one of
their card subscriptions through a token-only hosted page (CreateTokenOnly, nothing charged).

The page completes through the same verified path as every checkout (webhook or verify-return,
read back on the terminal): the new card becomes the subscription's payment method and is
audited as payment_method.replaced. A failed or abandoned replacement page changes nothing else:
the old card stays, the subscription is never cancelled over it.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing import attempts, codes
from gymctl.billing.accounts import CARD_PROVIDER, active_config, terminal_of
from gymctl.billing.checkout import (
    CARD_REPLACEMENT,
    CHECKOUT_TTL,
    SAVE_CARD_ONLY,
    Urls,
    is_replacement,
    keep_page,
    open_page,
    page_request,
)
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import conflict, not_found
from gymctl.models import Checkout, PaymentProviderConfig, Subscription
from gymctl.models.billing import CheckoutStatus, CollectionMethod, SubscriptionStatus
from gymctl.providers.card import CardProvider

REPLACEABLE = (
    SubscriptionStatus.scheduled,
    SubscriptionStatus.active,
    SubscriptionStatus.past_due,
    SubscriptionStatus.debt,
)


def open_card_replacement(
    session: Session,
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    user_id: uuid.UUID,
    urls: Urls,
    now: datetime,
    cipher: FieldCipher,
) -> Checkout:
    """Open the token-only page for the member's own subscription. Refusals change nothing:
    404 subscription_not_found (not theirs), 409 card_replacement_not_available (ended owing
    nothing, or not collected by the card provider), 409 card_provider_not_configured, 409
    card_replacement_in_progress (a page already open), 503 provider_unreachable, 409
    page_terms_changed (the gym's terminal changed while the page opened). As a purchase's
    (checkout.purchase_card_plan), the page is opened before the row is written and the
    checks are made again with it: no write lock is held for the provider's round trip."""
    checkout_id = ids.new_id()
    subscription, config = _replaceable(session, organization_id, subscription_id, user_id, now)
    terminal = config.terminal
    request = page_request(checkout_id, SAVE_CARD_ONLY, 0, subscription.currency, urls)
    on_terminal = terminal_of(config, cipher)
    release_for_outside_call(session)  # only read so far (its rows expire): written after
    page = open_page(provider, on_terminal, request)
    session.expire_all()  # read again, as they are now (PostgreSQL kept the first reads)
    subscription, config = _replaceable(session, organization_id, subscription_id, user_id, now)
    if (config.terminal, subscription.currency) != (terminal, request.currency):
        raise conflict(
            codes.PAGE_TERMS_CHANGED,
            "the gym's card terminal changed while the page opened; try again",
        )
    checkout = Checkout(
        id=checkout_id,
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=user_id,
        operation=SAVE_CARD_ONLY,
        terminal=config.terminal,
        amount_in_cents=0,
        currency=subscription.currency,
        status=CheckoutStatus.open,
        metadata_={"purpose": CARD_REPLACEMENT},
        expires_at=now + CHECKOUT_TTL,
        created_at=now,
    )
    keep_page(checkout, page)
    session.add(checkout)
    session.flush()
    return checkout


def _replaceable(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    user_id: uuid.UUID,
    now: datetime,
) -> tuple[Subscription, PaymentProviderConfig]:
    """The refusals, in their order; they write nothing."""
    subscription = attempts.lock_subscription(session, subscription_id)
    if (
        subscription is None
        or subscription.organization_id != organization_id
        or subscription.user_id != user_id
        or subscription.deleted_at is not None
    ):
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription of yours")
    # A plan cancelled for non-payment still owes (spec B 3): its member must be able to save
    # a card that pays it, or the debt could never be paid by card.
    owes = bool(subscription.debt_amount_in_cents)
    if (
        subscription.status not in REPLACEABLE and not owes
    ) or subscription.payment_collection_method != CollectionMethod.card_provider:
        raise conflict(
            codes.CARD_REPLACEMENT_NOT_AVAILABLE,
            "this subscription is not paid by a saved card",
        )
    if subscription.status == SubscriptionStatus.scheduled and subscription.opening_day is None:
        # A purchase whose page is not paid yet: that page charges it and saves its card. A
        # card saved beside it made the unpaid plan look like a presale with a card, so neither
        # its page failing nor its abandonment ended it, and it kept its place.
        raise conflict(
            codes.CARD_REPLACEMENT_NOT_AVAILABLE,
            "this plan is not paid yet: its payment page saves the card",
        )
    config = active_config(session, organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise conflict(codes.CARD_PROVIDER_NOT_CONFIGURED, "this gym does not take card payments")
    open_pages = session.scalars(
        select(Checkout).where(
            Checkout.subscription_id == subscription.id,
            Checkout.status == CheckoutStatus.open,
            Checkout.expires_at > now,
        )
    ).all()
    if any(is_replacement(page) for page in open_pages):
        raise conflict(
            codes.CARD_REPLACEMENT_IN_PROGRESS,
            "a card replacement page is already open for this subscription",
        )
    return subscription, config


def replacement_json(checkout: Checkout) -> dict[str, str | None]:
    return {"id": str(checkout.id), "pageId": checkout.page_id, "url": checkout.url}
