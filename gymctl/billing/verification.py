"""verify-account (spec B 4.1): prove a presale's saved card lives on the organization's current
terminal by reading its token-only deal back there and comparing the token (and the expiry when
the deal has one). A match writes terminalNumber (and when) into the card's encrypted payload.
Moves no money; a transport failure changes nothing.

The deal reference comes from the subscription's token-only checkout whose card is the one in
use (`readiness.card_evidence`: completed, not superseded, the newest by created_at then id;
never an open, abandoned or failed page, which saved no card, nor one a newer replacement page
superseded): its page id (billingCheckout.pageId), else metadata.lowProfileId, else its provider
transaction id; older checkouts kept none, and then the operator supplies the page id. None
such: 409 billing_account_evidence_missing, nothing read or written. A page id given for a
checkout that kept another is refused (billing_evidence_mismatch), never silently set aside.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import codes
from gymctl.billing.accounts import (
    CARD_PROVIDER,
    active_config,
    saved_card,
    terminal_of,
    verify_card_terminal,
)
from gymctl.billing.attempts import PRESALE_CARD_AGE
from gymctl.billing.operator_actions import audit_twice, require_operator
from gymctl.billing.readiness import card_evidence, readiness
from gymctl.billing.resolution import locked_subscription
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import conflict
from gymctl.models import Checkout, PaymentMethod
from gymctl.providers.card import CardProvider, PageState, ProviderUnavailable, same_terminal

DEAL_NOT_FOUND = "deal_not_found_on_current_terminal"
NO_TOKEN = "deal_has_no_token"  # noqa: S105 (a reason code, not a secret)
OTHER_ACCOUNT = "token_belongs_to_another_account"
EXPIRY_DIFFERS = "expiry_differs"


def verify_account(
    session: Session,
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    low_profile_id: str | None,
    operator_user_id: uuid.UUID | None,
    now: datetime,
    cipher: FieldCipher,
) -> dict[str, Any]:
    """Answers {data: {item}, outcome, reason?}: verified, already_verified, not_verified."""
    operator = require_operator(session, operator_user_id)
    subscription = locked_subscription(session, organization_id, subscription_id)
    checkout = session.scalar(
        select(Checkout)
        .where(Checkout.subscription_id == subscription.id, *card_evidence())
        .order_by(Checkout.created_at.desc(), Checkout.id.desc())
        .limit(1)
    )
    if checkout is None:
        raise conflict(
            codes.BILLING_ACCOUNT_EVIDENCE_MISSING,
            "the subscription has no completed token-only checkout of its card in use to "
            "verify the card against",
        )
    kept = (
        checkout.page_id
        or (checkout.metadata_ or {}).get("lowProfileId")
        or checkout.provider_transaction_id
    )
    # Page ids compared as the provider does (card_http.page_result: letter case aside).
    if kept and low_profile_id and low_profile_id.lower() != kept.lower():
        raise conflict(
            codes.BILLING_EVIDENCE_MISMATCH,
            f"lowProfileId {low_profile_id!r} is not the deal the checkout kept ({kept!r}); "
            "give it only for a checkout that kept none. Nothing changed",
            field="lowProfileId",
            given=low_profile_id,
            kept=kept,
        )
    deal = kept or low_profile_id
    method = (
        session.get(PaymentMethod, subscription.payment_method_id)
        if subscription.payment_method_id
        else None
    )
    if not deal or method is None or method.deleted_at is not None:
        raise conflict(
            codes.BILLING_ACCOUNT_EVIDENCE_MISSING,
            "no deal reference (give lowProfileId for an older checkout) or no saved card",
        )
    config = active_config(session, organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise conflict(codes.CARD_PROVIDER_NOT_CONFIGURED, "the organization has no card terminal")
    on_terminal = terminal_of(config, cipher)
    release_for_outside_call(session)  # only read so far
    try:
        page = provider.get_page(on_terminal, deal)
    except ProviderUnavailable:
        raise conflict(
            codes.BILLING_PROVIDER_UNAVAILABLE,
            "the card provider could not be reached; nothing changed",
        ) from None
    card = saved_card(method, cipher)
    outcome, reason = "verified", None
    if page.state == PageState.unknown_page:
        outcome, reason = "not_verified", DEAL_NOT_FOUND
    elif page.token is None:
        outcome, reason = "not_verified", NO_TOKEN
    elif page.token.token != card.token:
        outcome, reason = "not_verified", OTHER_ACCOUNT
    elif page.token.expiry and card.expiry and page.token.expiry != card.expiry:
        outcome, reason = "not_verified", EXPIRY_DIFFERS
    elif same_terminal(card.terminal, config.terminal) and (
        card.verified_on(config.terminal)
        or (
            config.terminal_since is not None
            and method.saved_at >= config.terminal_since + PRESALE_CARD_AGE
        )
    ):
        outcome = "already_verified"
    else:
        verify_card_terminal(method, config.terminal, now=now, cipher=cipher)
    result = {
        "outcome": outcome,
        "reason": reason,
        "deal": deal,
        "terminal": config.terminal,
        "subscriptionId": str(subscription.id),
        "paymentMethodId": str(method.id),
    }
    audit_twice(
        session,
        action="billing.account_verification",
        subscription=subscription,
        operator=operator,
        body={"lowProfileId": low_profile_id},
        result=result,
        now=now,
    )
    session.flush()
    item = readiness(session, organization_id, now=now, cipher=cipher, only=subscription.id)
    answer: dict[str, Any] = {"data": {"item": item["items"][0]}, "outcome": outcome}
    if reason:
        answer["reason"] = reason
    return answer
