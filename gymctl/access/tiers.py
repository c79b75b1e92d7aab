"""A gym's platform tier, set by a platform admin (spec A 1, 8; a hunter's test of s55).

The tier caps the gym's active members for imports (starter 150, growth 600, elite none:
`registrations.check_cap`), but nothing wrote it: every gym stayed on starter and one that paid
for more could never import past 150. Both doors (`PUT /admin/organizations/:orgId/tier`,
`gymctl members tier`) call `set_tier`. A lower tier than the gym's active members is allowed
(the cap refuses imports only, never ends a membership); the answer says how many there are."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.access.memberships import active_member_count
from gymctl.access.owner_appointment import locked_organization
from gymctl.events import EventKind, emit
from gymctl.models.organizations import ACTIVE_MEMBER_CAP, Tier


@dataclass(frozen=True)
class TierChange:
    tier: Tier
    changed: bool  # False: the gym was on that tier already, nothing was written
    cap: int | None
    active_members: int

    def as_dict(self) -> dict:
        return {
            "tier": self.tier.value,
            "changed": self.changed,
            "activeMemberCap": self.cap,
            "activeMembers": self.active_members,
        }


def set_tier(
    session: Session,
    organization_id: uuid.UUID,
    tier: Tier,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> TierChange:
    """Put the gym on `tier` (audited organization.tier_changed, from and to). Refusal: 404
    organization_not_found (none, or deleted)."""
    organization = locked_organization(session, organization_id)
    before = organization.tier
    if before != tier:
        organization.tier = tier
        emit(
            session,
            EventKind.audit,
            "organization.tier_changed",
            at=now,
            aggregate_type="organization",
            aggregate_id=organization.id,
            organization_id=organization.id,
            actor_user_id=actor_user_id,
            payload={"from": before.value, "to": tier.value},
        )
        session.flush()
    return TierChange(
        tier, before != tier, ACTIVE_MEMBER_CAP[tier], active_member_count(session, organization.id)
    )
