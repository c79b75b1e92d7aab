"""The owner's issues inbox: what only a person can settle (spec B 3, 7). A parked op names
its candidates (identity_conflict: the external users its search found; class_unmatched: the
external classes of the slot); the owner sees them, with the names and emails the stored
roster holds (never a phone number: rosters keep none), and links one: the link is recorded
(origin manual) and the op is sent again."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import classes, codes, entity_map, queue
from gymctl.errors import conflict, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models.bridge import EntityType, OpStatus, Origin, RosterEntry, SyncOp

LINKABLE = {"identity_conflict", classes.UNMATCHED}


def candidates(op: SyncOp) -> list[str]:
    """The external ids the op's park named ("...; candidates: 1001, 1002")."""
    _, marker, listed = (op.last_error or "").rpartition("candidates: ")
    if not marker:
        return []
    return [part.strip() for part in listed.split(",") if part.strip() and part.strip() != "none"]


def describe(session: Session, op: SyncOp) -> dict[str, Any]:
    data = queue.describe(op)
    found = candidates(op) if op.issue_code in LINKABLE else []
    if op.issue_code == "identity_conflict" and found:
        roster = {
            entry.external_id: entry
            for entry in session.scalars(
                select(RosterEntry).where(
                    RosterEntry.organization_id == op.organization_id,
                    RosterEntry.external_id.in_(found),
                )
            )
        }
        data["candidates"] = [
            {"externalId": external, "firstName": getattr(roster.get(external), "first_name", None),
             "lastName": getattr(roster.get(external), "last_name", None),
             "email": getattr(roster.get(external), "email", None)}
            for external in found
        ]  # fmt: skip
    elif found:
        data["candidates"] = [{"externalId": external} for external in found]
    return data


def link(
    session: Session,
    organization_id: uuid.UUID,
    op_id: int,
    external_id: str,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None,
    operator: str | None = None,
) -> SyncOp:
    """Settle a parked identity_conflict or class_unmatched op with one of its candidates."""
    op = queue.get_op(session, op_id, organization_id)
    if op.status is not OpStatus.parked or op.issue_code not in LINKABLE:
        raise conflict(codes.BRIDGE_ISSUE_NOT_LINKABLE, "this op does not wait for a link")
    external_id = str(external_id).strip()
    if external_id not in candidates(op):
        raise unprocessable(
            codes.BRIDGE_CANDIDATE_INVALID, "pick one of the candidates the issue names"
        )
    if op.issue_code == classes.UNMATCHED:
        classes.link_class(session, organization_id, uuid.UUID(op.payload["sessionId"]),
                           external_id, now=now, actor_user_id=actor_user_id,
                           operator=operator)  # fmt: skip
        session.refresh(op)
        return op
    entity_map.link(session, organization_id, EntityType.member,
                    platform_id=op.payload["memberId"], external_id=external_id,
                    origin=Origin.manual, now=now, data={"via": "owner"})  # fmt: skip
    emit(session, EventKind.audit, "bridge.identity_linked", at=now,
         aggregate_type="bridge_sync_op", aggregate_id=str(op.id),
         organization_id=organization_id, actor_user_id=actor_user_id,
         payload={"opId": op.id, "externalId": external_id,
                  **({"operator": operator} if operator else {})})  # fmt: skip
    retried, _queued = queue.retry(session, op.id, now=now, organization_id=organization_id,
                                   actor_user_id=actor_user_id)  # fmt: skip
    return retried
