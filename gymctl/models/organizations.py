"""Organizations (gyms) and memberships (spec A 1, 2.3)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Enum, ForeignKey, String, UniqueConstraint, true
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gymctl import clock
from gymctl.models.base import Base, IdMixin
from gymctl.models.identity import User


class Role(StrEnum):
    owner = "owner"
    admin = "admin"
    coach = "coach"
    member = "member"

    @property
    def rank(self) -> int:
        """How much the role may do, for choosing between two of one person's (member 0,
        owner 3): an invitation accepted or a link never lowers a role."""
        return ("member", "coach", "admin", "owner").index(self.value)


class MembershipStatus(StrEnum):
    active = "active"
    invited = "invited"
    pending_invitation = "pending_invitation"
    suspended = "suspended"
    cancelled = "cancelled"


class Tier(StrEnum):
    """Plan tiers of the platform; each caps the gym's active members (None: no cap)."""

    starter = "starter"
    growth = "growth"
    elite = "elite"


ACTIVE_MEMBER_CAP: dict[Tier, int | None] = {Tier.starter: 150, Tier.growth: 600, Tier.elite: None}


class OrganizationStatus(StrEnum):
    active = "active"
    inactive = "inactive"


def _enum(cls: type[StrEnum], name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, create_constraint=True, length=32)


class Organization(IdMixin, Base):
    __tablename__ = "organizations"

    name: Mapped[str] = mapped_column(String(200))
    slug: Mapped[str] = mapped_column(String(100), unique=True)
    status: Mapped[OrganizationStatus] = mapped_column(
        _enum(OrganizationStatus, "organization_status"), default=OrganizationStatus.active
    )
    tier: Mapped[Tier] = mapped_column(
        _enum(Tier, "organization_tier"), default=Tier.starter, server_default="starter"
    )
    # Spec A 2.9: off makes every join link answer 404.
    join_enabled: Mapped[bool] = mapped_column(default=True, server_default=true())
    onboarding_completed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    deleted_at: Mapped[datetime | None]


class Membership(IdMixin, Base):
    """Links one user to one organization with a role and a status."""

    __tablename__ = "memberships"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[Role] = mapped_column(_enum(Role, "membership_role"))
    status: Mapped[MembershipStatus] = mapped_column(
        _enum(MembershipStatus, "membership_status"), default=MembershipStatus.active
    )
    # Spec A 5.3: a staff invitation to a login whose email is unproven is held.
    invitation_held: Mapped[bool] = mapped_column(default=False)
    # Personal data one organization collects lives on its membership, never on the shared user
    # row, so no gym can read or overwrite what another holds. AES-256-GCM (gymctl.crypto), bound
    # to this row; never logged, never in ordinary responses.
    national_id_ciphertext: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)

    organization: Mapped[Organization] = relationship(lazy="joined")
    user: Mapped[User] = relationship()

    __table_args__ = (UniqueConstraint("organization_id", "user_id"),)
