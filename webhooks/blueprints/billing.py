"""Billing routes: the payment providers' webhooks, plans, a member's card-plan purchase and
hosted-checkout return, desk sales, the member's subscriptions, the payment provider setting."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from flask import Blueprint, g, jsonify, request
from pydantic import Field

from gymctl.access.memberships import live_membership_of, resolve_membership
from gymctl.access.permissions import Action, Module
from gymctl.billing import accounts, checkout, plans, webhooks
from gymctl.billing import card_replacement as replacement
from gymctl.errors import invalid, not_found, unavailable, unprocessable
from gymctl.models import Subscription
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.providers.card import TERMINAL_CHARS
from gymctl.providers.documents import default_document_provider
from webhooks import codes
from webhooks.access import membership, org_route, owner_route
from webhooks.bodies import WEBHOOK_BODY_BYTES, body_limit, read_json
from webhooks.context import auth, db, now, services
from webhooks.guard import public
from webhooks.validation import Body, explicit_utc, parse

bp = Blueprint("billing", __name__)
ORG = "/organizations/<uuid:org_id>"
TEXT = r"^[^\x00]*$"


def _answer(answer: webhooks.Answer):
    if answer.commit and answer.status >= 400:
        g.commit_refusal = True  # the rejection event is kept; nothing else was written
    response = jsonify(answer.body)
    if answer.status == 429:
        response.headers["Retry-After"] = str(answer.body["retryAfter"])
    return response, answer.status


@bp.post("/webhooks/card-provider/<uuid:org_id>")
@public
@body_limit(WEBHOOK_BODY_BYTES)
def card_provider_webhook(org_id: uuid.UUID):
    """Not signed: verified by reading the page back on the organization's terminal."""
    body = read_json(code=codes.WEBHOOK_MALFORMED) if request.is_json else request.form.to_dict()
    if not isinstance(body, dict):
        body = {}
    answer = webhooks.card_provider_webhook(
        db(),
        services().card_provider,
        organization_id=org_id,
        body=body,
        now=now(),
        cipher=services().billing_cipher,
    )
    return _answer(answer)


@bp.post("/webhooks/payments/<string:provider>/<uuid:org_id>")
@public
@body_limit(WEBHOOK_BODY_BYTES)
def other_provider_webhook(provider: str, org_id: uuid.UUID):
    answer = webhooks.other_provider_webhook(
        db(),
        organization_id=org_id,
        provider_name=provider[:32],
        raw_body=request.get_data(),
        signature=request.headers.get(webhooks.SIGNATURE_HEADER),
        now=now(),
        cipher=services().billing_cipher,
    )
    return _answer(answer)


class PlanBody(Body):
    name: str = Field(min_length=1, max_length=200, pattern=TEXT)
    type: PlanType
    price_in_cents: int = Field(alias="priceInCents", ge=0, le=100_000_000, strict=True)
    currency: str = Field(min_length=3, max_length=3, pattern=r"^[A-Za-z]{3}$")
    interval_months: int | None = Field(None, alias="intervalMonths", ge=1, le=36)
    open_ended: bool = Field(True, alias="openEnded")
    # Not written as a oneOf on `type` (OpenAPI 3.0 has no if/then, and generated clients read a
    # root oneOf as several classes): described, and refused by the domain with its own 422.
    validity_days: int | None = Field(
        None,
        alias="validityDays",
        ge=1,
        le=3660,
        description="required for a pack or a drop_in (422 plan_validity_required without it)",
    )
    sessions_quota: int | None = Field(None, alias="sessionsQuota", ge=1, le=10_000)
    max_purchases: int | None = Field(None, alias="maxPurchases", ge=1, le=1_000_000)
    plan_group: str | None = Field(None, alias="planGroup", max_length=100, pattern=TEXT)


def plan_json(plan) -> dict:
    return {
        "id": str(plan.id),
        "name": plan.name,
        "type": plan.type.value,
        "priceInCents": plan.price_in_cents,
        "currency": plan.currency,
        "intervalMonths": plan.interval_months,
        "openEnded": plan.open_ended,
        "validityDays": plan.validity_days,
        "sessionsQuota": plan.sessions_quota,
        "maxPurchases": plan.max_purchases,
        "purchases": plan.purchases_count,
        "soldOut": plan.max_purchases is not None and plan.purchases_count >= plan.max_purchases,
        "planGroup": plan.plan_group,
    }


def subscription_json(subscription: Subscription) -> dict:
    def iso(at: datetime | None) -> str | None:
        return at.isoformat() if at else None

    return {
        "id": str(subscription.id),
        "planId": str(subscription.plan_id),
        "userId": str(subscription.user_id),
        "status": subscription.status.value,
        "planType": subscription.plan_type.value,
        "paymentCollectionMethod": subscription.payment_collection_method.value,
        "priceInCents": subscription.price_in_cents,
        "currency": subscription.currency,
        "openingDay": iso(subscription.opening_day),
        "currentPeriodStart": iso(subscription.current_period_start),
        "currentPeriodEnd": iso(subscription.current_period_end),
        "nextChargeDate": iso(subscription.next_charge_date),
        "paymentDueAt": iso(subscription.payment_due_at),
        "unpaidAmountInCents": subscription.unpaid_amount_in_cents,
        "debtAmountInCents": subscription.debt_amount_in_cents,
        "debtSince": iso(subscription.debt_since),
        "debtReason": subscription.debt_reason,
        "cancelAtPeriodEnd": subscription.cancel_at_period_end,
        "cancellationEffectiveAt": iso(subscription.cancellation_effective_at),
        "hasSavedCard": subscription.payment_method_id is not None,
    }


@bp.get(f"{ORG}/plans")
def list_plans(org_id: uuid.UUID):
    """Any active member sees the gym's plans (what they can buy)."""
    resolve_membership(db(), org_id, auth().user)
    return jsonify(data=[plan_json(plan) for plan in plans.plans_of(db(), org_id)])


list_plans.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.post(f"{ORG}/plans")
@org_route(Module.finance, Action.manage)
def create_plan(org_id: uuid.UUID):
    body = parse(PlanBody)
    spec = plans.PlanSpec(**body.model_dump())
    plan = plans.create_plan(db(), org_id, spec, now=now())
    return jsonify(data=plan_json(plan)), 201


class PurchaseBody(Body):
    success_url: str | None = Field(None, alias="successUrl", max_length=2000, pattern=TEXT)
    failure_url: str | None = Field(None, alias="failureUrl", max_length=2000, pattern=TEXT)


@bp.post(f"{ORG}/plans/<uuid:plan_id>/purchase")
def purchase(org_id: uuid.UUID, plan_id: uuid.UUID):
    """A member buys a card plan for themself: answers the hosted page to open."""
    mine = resolve_membership(db(), org_id, auth().user)
    body = parse(PurchaseBody)
    subscription, page = checkout.purchase_card_plan(
        db(),
        services().card_provider,
        organization_id=org_id,
        plan_id=plan_id,
        user_id=mine.user_id,
        urls=_urls(org_id, body),
        now=now(),
        cipher=services().billing_cipher,
    )
    return jsonify(
        data={
            "subscription": subscription_json(subscription),
            "checkout": {"id": str(page.id), "pageId": page.page_id, "url": page.url},
        }
    ), 201


purchase.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.post(f"{ORG}/subscriptions/<uuid:subscription_id>/card-replacement")
def card_replacement(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """A member saves a new card for their own subscription: answers the token-only page."""
    mine = resolve_membership(db(), org_id, auth().user)
    body = parse(PurchaseBody)
    page = replacement.open_card_replacement(
        db(),
        services().card_provider,
        organization_id=org_id,
        subscription_id=subscription_id,
        user_id=mine.user_id,
        urls=_urls(org_id, body),
        now=now(),
        cipher=services().billing_cipher,
    )
    return jsonify(data={"checkout": replacement.replacement_json(page)}), 201


card_replacement.gymctl_access = ("own",)  # type: ignore[attr-defined]


def _urls(org_id: uuid.UUID, body: PurchaseBody) -> checkout.Urls:
    settings = services().settings
    base = settings.public_url.rstrip("/")
    front = (settings.frontend_url or base).rstrip("/")
    return checkout.Urls(
        success=body.success_url or f"{front}/billing/return?status=success",
        failure=body.failure_url or f"{front}/billing/return?status=failure",
        webhook=f"{base}/webhooks/card-provider/{org_id}",
    )


class VerifyReturnBody(Body):
    page_id: str = Field(alias="pageId", min_length=1, max_length=128, pattern=TEXT)


@bp.post(f"{ORG}/payments/verify-return")
def verify_return(org_id: uuid.UUID):
    """Recovery of a missed hosted-checkout return (spec B 4.3): the member's own page is read
    back and applied exactly as its webhook would be."""
    mine = resolve_membership(db(), org_id, auth().user)
    body = parse(VerifyReturnBody)
    found = checkout.checkout_by_page(db(), org_id, body.page_id)
    if found is None or found.user_id != mine.user_id:
        raise not_found(codes.CHECKOUT_NOT_FOUND, "no such checkout of yours")
    outcome, _ = checkout.verify_and_apply(
        db(),
        services().card_provider,
        organization_id=org_id,
        page_id=body.page_id,
        now=now(),
        cipher=services().billing_cipher,
    )
    if outcome in (codes.DEAL_NOT_FINALIZED, codes.PROVIDER_UNREACHABLE):
        raise unavailable(outcome, "the payment is not settled yet; try again soon")
    if outcome in ("deal_not_found", "unverified"):
        raise invalid(codes.DEAL_NOT_FOUND, "the provider does not know this page")
    subscription = db().get(Subscription, found.subscription_id)
    return jsonify(data={"outcome": outcome, "subscription": subscription_json(subscription)})


verify_return.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.get(f"{ORG}/subscriptions/me")
def my_subscriptions(org_id: uuid.UUID):
    mine = resolve_membership(db(), org_id, auth().user)
    rows = plans.subscriptions_of(db(), org_id, mine.user_id)
    return jsonify(data=[subscription_json(row) for row in rows])


my_subscriptions.gymctl_access = ("own",)  # type: ignore[attr-defined]


class DeskSaleBody(Body):
    user_id: uuid.UUID = Field(alias="userId")
    plan_id: uuid.UUID = Field(alias="planId")
    method: Literal["cash", "pay_later"] = "cash"
    payment_due_at: datetime | None = Field(None, alias="paymentDueAt")


@bp.post(f"{ORG}/subscriptions")
@org_route(Module.finance, Action.manage)
def desk_sale(org_id: uuid.UUID):
    """Staff sell a plan at the desk: paid in cash, or on pay-later terms. Not to someone the
    gym no longer serves (409 member_not_active, as the desk's charge answers)."""
    body = parse(DeskSaleBody)
    plan = plans.live_plan(db(), org_id, body.plan_id)
    # The gym's day before the member's lock: a move of the day locks them in that order.
    opening = plans.presale_opening_day(db(), org_id, now(), for_share=True)
    member = live_membership_of(db(), org_id, body.user_id)
    due = explicit_utc(body.payment_due_at) if body.payment_due_at else None
    subscription = plans.grant_plan(
        db(),
        plan,
        member,
        method=CollectionMethod(body.method),
        now=now(),
        actor_user_id=membership().user_id,
        documents=default_document_provider(),
        payment_due_at=due,
        opening_day=opening,
    )
    return jsonify(data=subscription_json(subscription)), 201


class ProviderBody(Body):
    provider: str = Field(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_]*$")
    terminal: str | None = Field(None, max_length=TERMINAL_CHARS, pattern=r"^[0-9A-Za-z_-]*$")
    api_name: str | None = Field(None, alias="apiName", max_length=200, pattern=TEXT)
    webhook_secret: str | None = Field(None, alias="webhookSecret", max_length=200, pattern=TEXT)
    webhook_signature_enforcement: bool | None = Field(None, alias="webhookSignatureEnforcement")


@bp.put(f"{ORG}/payments/provider")
@owner_route
def set_provider(org_id: uuid.UUID):
    """The owner connects the payment provider; credentials are stored encrypted only."""
    body = parse(ProviderBody)
    if body.provider == accounts.CARD_PROVIDER and not (body.terminal and body.api_name):
        raise unprocessable(
            codes.PROVIDER_TERMINAL_REQUIRED,
            "the card provider needs terminal and apiName",
        )
    config = accounts.configure_provider(
        db(),
        org_id,
        provider=body.provider,
        terminal=body.terminal,
        api_name=body.api_name,
        now=now(),
        cipher=services().billing_cipher,
        webhook_signature_enforcement=body.webhook_signature_enforcement,
        webhook_secret=body.webhook_secret,
    )
    return jsonify(
        data={
            "provider": config.provider,
            "terminal": config.terminal,
            "terminalSince": config.terminal_since.isoformat() if config.terminal_since else None,
            "webhookSignatureEnforcement": config.webhook_signature_enforcement,
        }
    )
