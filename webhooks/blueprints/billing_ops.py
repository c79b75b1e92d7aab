"""Billing operator routes (spec B 4.1, 4.2, 4.3): billing readiness and its two repairs for
platform admins; protected transaction resolution; desk charges, refunds, credit notes, debt
clearance and a member paying their debt. Each calls the same domain function as the CLI."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from flask import Blueprint, jsonify, request
from pydantic import BeforeValidator, Field, WithJsonSchema

from gymctl.access.memberships import resolve_membership
from gymctl.access.permissions import Action, Module
from gymctl.billing import (
    contradictions,
    credit_notes,
    debt_payments,
    desk,
    desk_resolution,
    forecast,
    forecast_runs,
    no_debit,
    opening_day,
    readiness,
    refunds,
    repair,
    resolution,
    verification,
)
from gymctl.billing.forecast_runs import ForecastRequest
from gymctl.clock import day_start
from gymctl.errors import invalid
from gymctl.providers.documents import default_document_provider
from webhooks import codes
from webhooks.access import membership, org_route, owner_route, platform_admin_route
from webhooks.context import auth, db, handover, now, services
from webhooks.validation import Body, Uuid4, explicit_utc, parse, parse_query, uuid_text

bp = Blueprint("billing_ops", __name__)
ORG = "/organizations/<uuid:org_id>"
TX = f"{ORG}/payments/billing/transactions/<uuid:transaction_id>"
ADMIN = "/admin/organizations/<uuid:org_id>/billing-readiness"
TEXT = r"^[^\x00]*$"
CURRENCY = r"^[A-Za-z]{3}$"


def _operator_user_id() -> uuid.UUID | None:
    """The operator's own user row, never created on the fly: a repair is audited under it."""
    user = auth().user
    return user.id if user is not None else None


# --- Billing readiness (platform admin) -------------------------------------------------


@bp.get(ADMIN)
@platform_admin_route
def billing_readiness(org_id: uuid.UUID):
    cursor = request.args.get("cursor")
    after = uuid_text(cursor) if cursor else None
    if cursor and after is None:
        raise invalid(codes.CURSOR_INVALID, "the cursor is a subscription id")
    report = readiness.readiness(
        db(), org_id, now=now(), cipher=services().billing_cipher, cursor=after
    )
    return jsonify(report)


class VerifyAccountBody(Body):
    low_profile_id: str | None = Field(
        None, alias="lowProfileId", min_length=1, max_length=128, pattern=TEXT
    )


@bp.post(f"{ADMIN}/subscriptions/<uuid:subscription_id>/verify-account")
@platform_admin_route
def verify_account(org_id: uuid.UUID, subscription_id: uuid.UUID):
    body = parse(VerifyAccountBody)
    answer = verification.verify_account(
        db(),
        services().card_provider,
        organization_id=org_id,
        subscription_id=subscription_id,
        low_profile_id=body.low_profile_id,
        operator_user_id=_operator_user_id(),
        now=now(),
        cipher=services().billing_cipher,
    )
    return jsonify(answer)


class RepairScheduleBody(Body):
    expected_next_charge_at: datetime | None = Field(alias="expectedNextChargeAt")


@bp.post(f"{ADMIN}/subscriptions/<uuid:subscription_id>/repair-schedule")
@platform_admin_route
def repair_schedule(org_id: uuid.UUID, subscription_id: uuid.UUID):
    body = parse(RepairScheduleBody)
    expected = body.expected_next_charge_at
    answer = repair.repair_schedule(
        db(),
        organization_id=org_id,
        subscription_id=subscription_id,
        expected_next_charge_at=explicit_utc(expected) if expected else None,
        operator_user_id=_operator_user_id(),
        now=now(),
        cipher=services().billing_cipher,
    )
    return jsonify(answer)


# --- Protected transaction resolution ---------------------------------------------------


@bp.get(TX)
@org_route(Module.finance, Action.manage)
def inspect_transaction(org_id: uuid.UUID, transaction_id: uuid.UUID):
    return jsonify(data=resolution.inspect(db(), org_id, transaction_id, now=now()))


@bp.post(f"{TX}/reconcile")
@org_route(Module.finance, Action.manage)
def reconcile_transaction(org_id: uuid.UUID, transaction_id: uuid.UUID):
    return _reconcile(resolution.reconcile, org_id, transaction_id)


def _reconcile(reconcile, org_id: uuid.UUID, transaction_id: uuid.UUID, **extra):
    """Look a stored attempt up by its ids on its original merchant account (never a debit)."""
    answer = reconcile(
        db(),
        services().card_provider,
        services().billing_cipher,
        organization_id=org_id,
        transaction_id=transaction_id,
        actor_user_id=membership().user_id,
        now=now(),
        **extra,
    )
    return jsonify(data=answer)


class ConfirmNoDebitBody(Body):
    request_id: Uuid4 = Field(alias="requestId")
    provider_case_id: str = Field(
        alias="providerCaseId", min_length=1, max_length=128, pattern=TEXT
    )
    confirmed_at: datetime = Field(alias="confirmedAt")
    external_attempt_id: str = Field(
        alias="externalAttemptId", min_length=1, max_length=128, pattern=TEXT
    )
    terminal: str = Field(min_length=1, max_length=32, pattern=TEXT)
    amount_in_cents: int = Field(alias="amountInCents", ge=0, le=100_000_000, strict=True)
    currency: str = Field(pattern=CURRENCY)
    no_debit_occurred: bool = Field(alias="noDebitOccurred")
    cannot_settle_later: bool = Field(alias="cannotSettleLater")
    authorize_retry: bool = Field(False, alias="authorizeRetry")


@bp.post(f"{TX}/confirm-no-debit")
@owner_route
def confirm_no_debit(org_id: uuid.UUID, transaction_id: uuid.UUID):
    body = parse(ConfirmNoDebitBody)
    answer = no_debit.confirm_no_debit(
        db(),
        services().card_provider,
        services().billing_cipher,
        organization_id=org_id,
        transaction_id=transaction_id,
        actor_user_id=membership().user_id,
        confirmation=no_debit.NoDebitConfirmation(
            **body.model_dump(exclude={"confirmed_at"}),
            confirmed_at=no_debit.utc_instant(body.confirmed_at),
        ),
        now=now(),
    )
    return jsonify(data=answer)


@bp.post(f"{TX}/authorize-retry")
@owner_route
def authorize_retry(org_id: uuid.UUID, transaction_id: uuid.UUID):
    answer = no_debit.authorize_retry(
        db(),
        organization_id=org_id,
        transaction_id=transaction_id,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=answer)


class SettleContradictionBody(Body):
    decision: Literal["accept", "refund"]
    amount_in_cents: int = Field(alias="amountInCents", ge=1, le=100_000_000, strict=True)
    currency: str = Field(pattern=CURRENCY)


@bp.post(f"{TX}/settle-contradiction")
@org_route(Module.finance, Action.manage)
def settle_contradiction(org_id: uuid.UUID, transaction_id: uuid.UUID):
    """A page, desk charge or collector attempt the provider approved at other terms: accept
    the provider's amount, or refund it all (stored, committed, then sent)."""
    body = parse(SettleContradictionBody)
    session, documents = db(), default_document_provider()
    answer = contradictions.settle_contradiction(
        session,
        services().card_provider,
        services().billing_cipher,
        organization_id=org_id,
        transaction_id=transaction_id,
        decision=body.decision,
        amount_in_cents=body.amount_in_cents,
        currency=body.currency,
        actor_user_id=membership().user_id,
        now=now(),
        documents=documents,
    )
    session.commit()  # the refund is stored before the provider is asked to make it
    answer = contradictions.send_stored_refund(
        session,
        services().card_provider,
        services().billing_cipher,
        answer,
        now=now(),
        documents=documents,
    )
    session.commit()
    return jsonify(data=answer)


@bp.post(f"{ORG}/payments/transactions/<uuid:transaction_id>/dismiss")
@org_route(Module.finance, Action.manage)
def dismiss_pending_payment(org_id: uuid.UUID, transaction_id: uuid.UUID):
    """The ordinary pending-payment dismiss; it refuses protected attempts (spec B 4.2)."""
    transaction = desk.dismiss_pending_payment(
        db(),
        organization_id=org_id,
        transaction_id=transaction_id,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=desk.transaction_json(transaction))


# --- Desk charges, refunds, credit notes, debts -----------------------------------------


class DeskChargeBody(Body):
    idempotency_key: Uuid4 = Field(alias="idempotencyKey")
    user_id: uuid.UUID = Field(alias="userId")
    amount_in_cents: int = Field(alias="amountInCents", ge=1, le=100_000_000, strict=True)
    currency: str = Field(pattern=CURRENCY)
    description: str = Field(min_length=1, max_length=500, pattern=TEXT)


@bp.post(f"{ORG}/payments/desk-charges")
@org_route(Module.finance, Action.manage)
def desk_charge(org_id: uuid.UUID):
    body = parse(DeskChargeBody)
    answer = desk.desk_charge(
        handover(),
        services().card_provider,
        organization_id=org_id,
        request=desk.DeskChargeRequest(**body.model_dump()),
        actor_user_id=membership().user_id,
        now=now(),
        cipher=services().billing_cipher,
        documents=default_document_provider(),
    )
    return jsonify(data=answer), 200 if answer["replayed"] else 201


@bp.get(f"{ORG}/payments/desk-charges/<uuid:transaction_id>")
@org_route(Module.finance, Action.manage)
def inspect_desk_charge(org_id: uuid.UUID, transaction_id: uuid.UUID):
    """A pending desk charge is resolved by its stored ids, not only by the client's key."""
    return jsonify(
        data=desk_resolution.inspect_desk_charge(db(), org_id, transaction_id, now=now())
    )


@bp.post(f"{ORG}/payments/desk-charges/<uuid:transaction_id>/reconcile")
@org_route(Module.finance, Action.manage)
def reconcile_desk_charge(org_id: uuid.UUID, transaction_id: uuid.UUID):
    reconcile = desk_resolution.reconcile_desk_charge
    return _reconcile(reconcile, org_id, transaction_id, documents=default_document_provider())


class RefundBody(Body):
    amount_in_cents: int = Field(alias="amountInCents", ge=1, le=100_000_000, strict=True)
    reason: str = Field(min_length=1, max_length=500, pattern=TEXT)
    idempotency_key: Uuid4 | None = Field(None, alias="idempotencyKey")


@bp.post(f"{ORG}/payments/transactions/<uuid:transaction_id>/refund")
@org_route(Module.finance, Action.manage)
def refund(org_id: uuid.UUID, transaction_id: uuid.UUID):
    """With an idempotencyKey a retried request answers the first one's refund (200, replayed
    true) instead of refunding again."""
    body = parse(RefundBody)
    session, documents = db(), default_document_provider()
    request = {
        "transaction": resolution.locked_payment(session, org_id, transaction_id),
        "amount_cents": body.amount_in_cents,
        "reason": body.reason,
        "actor_user_id": membership().user_id,
        "now": now(),
        "documents": documents,
    }
    if body.idempotency_key is None:
        refund, replayed = refunds.begin_refund(session, **request), False
    else:
        refund, replayed = refunds.begin_refund_once(
            session, idempotency_key=body.idempotency_key, **request
        )
    session.commit()  # the refund attempt is stored before the provider is asked
    refund = refunds.execute_refund(
        session,
        services().card_provider,
        services().billing_cipher,
        refund.id,
        now=now(),
        documents=documents,
    )
    session.commit()
    refunds.raise_unless_refunded(refund)
    return jsonify(data={**desk.transaction_json(refund), "replayed": replayed}), (
        200 if replayed else 201
    )


class CreditNoteBody(Body):
    idempotency_key: Uuid4 = Field(alias="idempotencyKey")
    amount_in_cents: int = Field(alias="amountInCents", ge=1, le=100_000_000, strict=True)
    cash_returned: bool = Field(alias="cashReturned")
    reason: str = Field("", max_length=500, pattern=TEXT)


@bp.post(f"{ORG}/payments/transactions/<uuid:transaction_id>/credit-notes")
@org_route(Module.finance, Action.manage)
def credit_note(org_id: uuid.UUID, transaction_id: uuid.UUID):
    body = parse(CreditNoteBody)
    answer = credit_notes.file_credit_note(
        db(),
        organization_id=org_id,
        sale_id=transaction_id,
        request=credit_notes.CreditNoteRequest(**body.model_dump()),
        actor_user_id=membership().user_id,
        now=now(),
        documents=default_document_provider(),
    )
    return jsonify(data=answer), 200 if answer["replayed"] else 201


class OpeningDayBody(Body):
    opening_day: datetime = Field(alias="openingDay")


@bp.put(f"{ORG}/subscriptions/<uuid:subscription_id>/opening-day")
@org_route(Module.finance, Action.manage)
def edit_opening_day(org_id: uuid.UUID, subscription_id: uuid.UUID):
    body = parse(OpeningDayBody)
    answer = opening_day.edit_opening_day(
        db(),
        organization_id=org_id,
        subscription_id=subscription_id,
        opening_day=explicit_utc(body.opening_day),
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=answer)


class ClearDebtBody(Body):
    method: Literal["cash", "bank_transfer", "check", "card"] = "cash"


@bp.post(f"{ORG}/subscriptions/<uuid:subscription_id>/clear-debt")
@org_route(Module.finance, Action.manage)
def clear_debt(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """Cash, a transfer or a check recorded as paid; `card`: the member's saved card charged
    for a card plan's debt now, through the member's own pay-debt path."""
    body = parse(ClearDebtBody)
    if body.method == "card":
        actor = membership().user_id
        outcome = debt_payments.pay_own_debt(
            handover(),
            services().card_provider,
            organization_id=org_id,
            subscription_id=subscription_id,
            user_id=None,
            now=now(),
            cipher=services().billing_cipher,
            actor_user_id=actor,
        )
        return jsonify(data={"outcome": outcome, "subscriptionId": str(subscription_id)})
    answer = debt_payments.clear_debt_at_desk(
        db(),
        organization_id=org_id,
        subscription_id=subscription_id,
        actor_user_id=membership().user_id,
        now=now(),
        documents=default_document_provider(),
        method=body.method,
    )
    return jsonify(data=answer)


@bp.post(f"{ORG}/subscriptions/<uuid:subscription_id>/pay-debt")
def pay_debt(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """A member pays their own card debt now with the saved card."""
    mine = resolve_membership(db(), org_id, auth().user)
    outcome = debt_payments.pay_own_debt(
        handover(),
        services().card_provider,
        organization_id=org_id,
        subscription_id=subscription_id,
        user_id=mine.user_id,
        now=now(),
        cipher=services().billing_cipher,
    )
    return jsonify(data={"outcome": outcome})


pay_debt.gymctl_access = ("own",)  # type: ignore[attr-defined]


# --- Billing forecast (platform admin; issue 24) ---------------------------------------------


def _day_or_instant(value: object) -> object:
    """`until` as the command line takes it: a day (its first instant in UTC) or an ISO 8601
    instant, read here (what strict validation then gets is a datetime, or a refusal)."""
    if not isinstance(value, str):
        return value
    try:
        return day_start(value) or datetime.fromisoformat(value)
    except ValueError:
        return value


UntilDay = Annotated[
    datetime,
    BeforeValidator(_day_or_instant),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}
    ),
]


class ForecastQuery(Body):
    until: UntilDay
    by: Literal["day", "week", "month"] = "week"
    decline_rate: float = Field(0.0, alias="declineRate", ge=0.0, le=1.0)
    seed: int = Field(0, ge=0, le=forecast.MAX_SEED)
    from_history: bool = Field(False, alias="fromHistory")
    lifecycle_only: bool = Field(False, alias="lifecycleOnly")
    explain: uuid.UUID | None = None

    def request(self) -> ForecastRequest:
        return ForecastRequest(
            until=explicit_utc(self.until),
            by=self.by,
            decline_rate=self.decline_rate,
            seed=self.seed,
            from_history=self.from_history,
            lifecycle_only=self.lifecycle_only,
            explain=self.explain,
        )


FORECASTS = "/admin/organizations/<uuid:org_id>/billing-forecasts"


@bp.get("/admin/organizations/<uuid:org_id>/billing-forecast")
@platform_admin_route
def billing_forecast(org_id: uuid.UUID):
    """The same forecast as `gymctl billing simulate`: a scratch copy, the real rows only read.
    One that would outrun the request (GYMCTL_FORECAST_REQUEST_SECONDS) is refused with a
    pointer to the queued forecast."""
    from gymctl.billing.forecast import check_explain, check_organization, simulate, within

    asked = parse_query(ForecastQuery).request()
    if asked.explain is not None:
        # As on the command line: another gym's subscription (or none) is refused, not
        # explained with an empty timeline; an unknown organization is refused as that first.
        check_organization(db(), org_id)
        check_explain(db(), org_id, asked.explain)
    # End the request's transaction first: on the embedded default it holds the one write
    # lock, which the forecast's seconds would keep from every other writer. simulate then
    # reads in a read-only transaction of its own and ends it before forecasting.
    db().commit()
    result = simulate(
        db(),
        org_id,
        now=now(),
        until=asked.until,
        cipher=services().billing_cipher,
        by=asked.by,
        decline_rate=asked.decline_rate,
        seed=asked.seed,
        from_history=asked.from_history,
        lifecycle_only=asked.lifecycle_only,
        progress=within(services().settings.forecast_request_seconds),
    )
    return jsonify(result.report(asked.explain))


@bp.post(FORECASTS)
@platform_admin_route
def queue_billing_forecast(org_id: uuid.UUID):
    """Queue a forecast for the daemons (202 and where to read it); the same request as an
    unfinished run answers that run (200)."""
    asked = parse(ForecastQuery).request()
    run, queued = forecast_runs.request_forecast(
        db(), org_id, asked, now=now(), requested_by=_operator_user_id()
    )
    response = jsonify(forecast_runs.run_view(run))
    response.status_code = 202 if queued else 200
    response.headers["Location"] = f"/admin/organizations/{org_id}/billing-forecasts/{run.id}"
    return response


@bp.get(FORECASTS)
@platform_admin_route
def list_billing_forecasts(org_id: uuid.UUID):
    """The organization's latest forecast runs, newest first, without their reports."""
    runs = forecast_runs.recent_runs(db(), org_id)
    return jsonify(data=[forecast_runs.run_view(run, with_report=False) for run in runs])


@bp.get(f"{FORECASTS}/<uuid:run_id>")
@platform_admin_route
def get_billing_forecast(org_id: uuid.UUID, run_id: uuid.UUID):
    """One run: its status and progress while queued or running, its report once succeeded."""
    return jsonify(forecast_runs.run_view(forecast_runs.find_run(db(), org_id, run_id)))


@bp.post(f"{FORECASTS}/<uuid:run_id>/cancel")
@platform_admin_route
def cancel_billing_forecast(org_id: uuid.UUID, run_id: uuid.UUID):
    """Withdraw a queued or running forecast (a running one stops within seconds)."""
    run = forecast_runs.cancel_run(db(), org_id, run_id, now=now())
    return jsonify(forecast_runs.run_view(run))
