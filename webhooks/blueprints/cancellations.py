"""Cancellation notices, presale withdrawal, plan change and retention cases (spec B 2.1, 2.3,
3, 4.3, 7). A member acts on their own subscriptions; staff with member-billing rights act on
anyone's (another member's subscription is 404 to everyone else)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from flask import Blueprint, jsonify
from pydantic import Field

from gymctl.access.memberships import resolve_membership
from gymctl.access.permissions import Action, Module, can
from gymctl.billing import plans
from gymctl.clock import ensure_utc
from gymctl.errors import not_found, unprocessable
from gymctl.models import Membership, RetentionCase, Subscription
from gymctl.models.retention import RetentionOutcome
from gymctl.retention import cases, notices, plan_change, presales
from webhooks import codes
from webhooks.access import membership, org_route
from webhooks.blueprints.billing import plan_json, subscription_json
from webhooks.context import auth, client_locale, db, now, services
from webhooks.validation import Body, one_of, parse

bp = Blueprint("cancellations", __name__)
ORG = "/organizations/<uuid:org_id>"
SUB = f"{ORG}/subscriptions/<uuid:subscription_id>"
CASE = f"{ORG}/retention/cases/<uuid:case_id>"
TEXT = r"^[^\x00]*$"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def aware_utc(at: datetime | None) -> datetime | None:
    """A body timestamp in UTC; one without an offset or out of range is a 422."""
    if at is None:
        return None
    if at.tzinfo is None:
        raise unprocessable(codes.TIMESTAMP_INVALID, "timestamps need a UTC offset")
    try:
        return ensure_utc(at)
    except OverflowError:
        raise unprocessable(codes.TIMESTAMP_INVALID, "timestamp out of range") from None


def _staff(mine: Membership) -> bool:
    return can(mine.role, Module.member_billing, Action.manage)


def _subscription(org_id: uuid.UUID, subscription_id: uuid.UUID) -> tuple[Membership, bool]:
    """The caller's membership, and whether they act as staff on another member's row."""
    mine = resolve_membership(db(), org_id, auth().user)
    row = db().get(Subscription, subscription_id)
    if row is None or row.organization_id != org_id or row.deleted_at is not None:
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription")
    if row.user_id == mine.user_id:
        return mine, False
    if not _staff(mine):
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription")
    return mine, True


def member_subscription_json(row: Subscription) -> dict:
    return {
        **subscription_json(row),
        "cancellationReason": row.cancellation_reason,
        "retentionOutcome": row.retention_outcome,
        "memberActions": plan_change.member_actions(db(), row),
    }


@bp.get(f"{ORG}/me/subscriptions")
def my_subscriptions(org_id: uuid.UUID):
    """The member-facing list: each subscription with what the member may do with it."""
    mine = resolve_membership(db(), org_id, auth().user)
    rows = plans.subscriptions_of(db(), org_id, mine.user_id)
    return jsonify(data=[member_subscription_json(row) for row in rows])


my_subscriptions.gymctl_access = ("own",)  # type: ignore[attr-defined]


class NoticeBody(Body):
    reason_code: Annotated[str, one_of(notices.REASON_CODES)] | None = Field(
        None, alias="reasonCode", max_length=32, pattern=TEXT
    )
    reason_text: str | None = Field(None, alias="reasonText", max_length=2000, pattern=TEXT)
    effective_at: datetime | None = Field(None, alias="effectiveAt")


def case_json(case: RetentionCase, contacts: list | None = None) -> dict:
    data = {
        "id": str(case.id),
        "subscriptionId": str(case.subscription_id),
        "userId": str(case.user_id),
        "kind": case.kind,
        "status": case.status,
        "ownerUserId": str(case.owner_user_id) if case.owner_user_id else None,
        "taskId": str(case.task_id) if case.task_id else None,
        "openedAt": case.opened_at.isoformat(),
        "slaDueAt": _iso(case.sla_due_at),
        "acknowledgedAt": _iso(case.acknowledged_at),
        "lastContactAt": _iso(case.last_contact_at),
        "escalatedUnacknowledgedAt": _iso(case.escalated_unacknowledged_at),
        "escalatedEndingSoonAt": _iso(case.escalated_ending_soon_at),
        "outcome": case.outcome,
        "closedAt": _iso(case.closed_at),
    }
    if contacts is not None:
        data["contacts"] = [
            {
                "id": str(contact.id),
                "channel": contact.channel,
                "note": contact.note,
                "contactedAt": contact.contacted_at.isoformat(),
                "staffUserId": str(contact.staff_user_id) if contact.staff_user_id else None,
            }
            for contact in contacts
        ]
    return data


@bp.post(f"{SUB}/notice")
def give_notice(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """Give notice: the member on their own plan (every field optional), or staff for a
    member (a reason code required, an effective date allowed)."""
    mine, staff_act = _subscription(org_id, subscription_id)
    body = parse(NoticeBody)
    row, case = notices.give_notice(
        db(),
        org_id,
        subscription_id,
        initiator="staff" if staff_act else "member",
        actor_user_id=mine.user_id,
        reason_code=body.reason_code,
        reason_text=body.reason_text,
        effective_at=aware_utc(body.effective_at),
        locale=client_locale(),
        now=now(),
    )
    return jsonify(data={"subscription": member_subscription_json(row), "case": case_json(case)})


give_notice.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.delete(f"{SUB}/notice")
def withdraw_notice(org_id: uuid.UUID, subscription_id: uuid.UUID):
    mine, staff_act = _subscription(org_id, subscription_id)
    row = notices.withdraw_notice(
        db(),
        org_id,
        subscription_id,
        actor_user_id=mine.user_id,
        by_member=not staff_act,
        locale=client_locale(),
        now=now(),
    )
    return jsonify(data=member_subscription_json(row))


withdraw_notice.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.post(f"{SUB}/withdraw-presale")
def withdraw_presale(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """The member or staff withdraw a presale; the case owner (else the owner) is emailed."""
    mine, staff_act = _subscription(org_id, subscription_id)
    row, case = presales.withdraw_presale(
        db(),
        org_id,
        subscription_id,
        actor_user_id=mine.user_id,
        by_member=not staff_act,
        locale=client_locale(),
        now=now(),
    )
    db().commit()  # the withdrawal stands whatever the mail server does
    presales.notify_withdrawal(db(), services().mailer, case.id, now=now())
    return jsonify(data={"subscription": member_subscription_json(row), "case": case_json(case)})


withdraw_presale.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.get(f"{SUB}/plan-change-targets")
def plan_change_targets(org_id: uuid.UUID, subscription_id: uuid.UUID):
    """Same-group plans a grouped scheduled presale may switch to (empty otherwise)."""
    _subscription(org_id, subscription_id)
    row = db().get(Subscription, subscription_id)
    targets = (
        plan_change.change_targets(db(), row)
        if "change_plan" in plan_change.member_actions(db(), row)
        else []
    )
    return jsonify(data=[plan_json(plan) for plan in targets])


plan_change_targets.gymctl_access = ("own",)  # type: ignore[attr-defined]


class PlanChangeBody(Body):
    plan_id: uuid.UUID = Field(alias="planId")


@bp.post(f"{SUB}/change-plan")
def change_plan(org_id: uuid.UUID, subscription_id: uuid.UUID):
    mine, _ = _subscription(org_id, subscription_id)
    body = parse(PlanChangeBody)
    row = plan_change.change_plan(
        db(),
        org_id,
        subscription_id,
        body.plan_id,
        actor_user_id=mine.user_id,
        locale=client_locale(),
        now=now(),
    )
    return jsonify(data=member_subscription_json(row))


change_plan.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.get(f"{ORG}/retention/cases")
@org_route(Module.member_billing, Action.view)
def list_cases(org_id: uuid.UUID):
    return jsonify(data=[case_json(case) for case in cases.open_cases(db(), org_id)])


@bp.get(CASE)
@org_route(Module.member_billing, Action.view)
def show_case(org_id: uuid.UUID, case_id: uuid.UUID):
    case = cases.case_of(db(), org_id, case_id)
    return jsonify(data=case_json(case, cases.contacts_of(db(), case.id)))


@bp.post(f"{CASE}/acknowledge")
@org_route(Module.member_billing, Action.manage)
def acknowledge(org_id: uuid.UUID, case_id: uuid.UUID):
    case = cases.acknowledge(db(), org_id, case_id, actor_user_id=membership().user_id, now=now())
    return jsonify(data=case_json(case))


class ContactBody(Body):
    channel: str = Field(pattern=r"^(phone|email|message|in_person)$")
    note: str | None = Field(None, max_length=2000, pattern=TEXT)
    contacted_at: datetime | None = Field(None, alias="contactedAt")


@bp.post(f"{CASE}/contacts")
@org_route(Module.member_billing, Action.manage)
def log_contact(org_id: uuid.UUID, case_id: uuid.UUID):
    body = parse(ContactBody)
    cases.log_contact(
        db(),
        org_id,
        case_id,
        channel=body.channel,
        note=body.note,
        contacted_at=aware_utc(body.contacted_at),
        actor_user_id=membership().user_id,
        now=now(),
    )
    case = cases.case_of(db(), org_id, case_id)
    return jsonify(data=case_json(case, cases.contacts_of(db(), case.id))), 201


class OutcomeBody(Body):
    outcome: RetentionOutcome


@bp.post(f"{CASE}/outcome")
@org_route(Module.member_billing, Action.manage)
def record_outcome(org_id: uuid.UUID, case_id: uuid.UUID):
    body = parse(OutcomeBody)
    case = cases.record_outcome(
        db(),
        org_id,
        case_id,
        outcome=body.outcome,
        actor_user_id=membership().user_id,
        locale=client_locale(),
        now=now(),
    )
    return jsonify(data=case_json(case))
