"""What both readiness repairs share (spec B 4.1): the operator must have a user row (403
otherwise), the locks in the order organization, membership, subscription, and the two audit
records: the admin audit log with the request body, and the organization's audit event actored
by the operator's user."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.billing import codes
from gymctl.errors import forbidden
from gymctl.events import EventKind, emit
from gymctl.models import AuditLog, Subscription, User


def require_operator(session: Session, operator_user_id: uuid.UUID | None) -> User:
    operator = session.get(User, operator_user_id) if operator_user_id else None
    if operator is None or operator.deleted_at is not None:
        raise forbidden(
            codes.OPERATOR_USER_REQUIRED,
            "a repair is audited under the operator's user: this operator has no user row",
        )
    return operator


def audit_twice(
    session: Session,
    *,
    action: str,
    subscription: Subscription,
    operator: User,
    body: dict[str, Any],
    result: dict[str, Any],
    now: datetime,
) -> None:
    session.add(
        AuditLog(
            at=now,
            action=f"admin.{action}",
            organization_id=subscription.organization_id,
            actor_user_id=operator.id,
            target_type="subscription",
            target_id=str(subscription.id),
            data={"platformAdmin": True, "body": body, **result},
        )
    )
    emit(
        session,
        EventKind.audit,
        action,
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        actor_user_id=operator.id,
        payload=result,
    )
