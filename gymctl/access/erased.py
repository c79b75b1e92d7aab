"""How a gym shows a member whose personal data it erased (erasure.py).

The person's users row belongs to their login and to every other gym holding them, so erasure at
one gym may keep it; that gym's views read the name and address through here and show the
member as erased instead. The marker is the gym's own erasure record about the person on a
membership still ended: a membership that comes back (join link, desk registration, accepted
invitation) shows the person again, who gave their details anew.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import AuditLog, Membership, MembershipStatus, User

ERASURE_ACTION = "personal_data.erased"
ERASED_DOMAIN = "@erased.invalid"  # of the address that stands in for an erased one
ERASED_NAME = "Erased member"
_CHUNK = 500  # ids a statement binds: far below either engine's limit


def is_erased_address(email: str) -> bool:
    """An address erasure put in place of the person's (it reaches nobody)."""
    return email.endswith(ERASED_DOMAIN)


def erased_user_ids(
    session: Session, org_id: uuid.UUID, memberships: Iterable[Membership]
) -> set[uuid.UUID]:
    """The people among `memberships` (of `org_id`) this gym shows as erased."""
    ended = [str(m.user_id) for m in memberships if m.status is MembershipStatus.cancelled]
    found: set[uuid.UUID] = set()
    for start in range(0, len(ended), _CHUNK):
        found.update(
            uuid.UUID(target)
            for target in session.scalars(
                select(AuditLog.target_id).where(  # rides ix_audit_log_target
                    AuditLog.target_type == "user",
                    AuditLog.target_id.in_(ended[start : start + _CHUNK]),
                    AuditLog.action == ERASURE_ACTION,
                    AuditLog.organization_id == org_id,
                )
            )
        )
    return found


def is_erased(session: Session, membership: Membership) -> bool:
    return bool(erased_user_ids(session, membership.organization_id, [membership]))


def shown(user: User, *, erased: bool) -> dict[str, Any]:
    """The person's name and address as the gym shows them."""
    if erased:
        return {"name": ERASED_NAME, "email": None}
    return {"name": user.name, "email": user.email}
