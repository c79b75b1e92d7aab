"""Invitations, sales grants, join links, leads and staff tasks (spec A 2.4, 2.5, 2.9, 3)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Enum, ForeignKey, Index, String, Text, UniqueConstraint, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl import clock
from gymctl.models.base import Base, IdMixin, JSONType
from gymctl.models.organizations import Role


def _enum(cls: type[StrEnum], name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, create_constraint=True, length=32)


class InvitationStatus(StrEnum):
    pending = "pending"
    accepted = "accepted"
    revoked = "revoked"
    expired = "expired"


class Invitation(IdMixin, Base):
    """An invitation to join an organization with a role. organization_id None is an owner grant:
    the claimable right to create a gym (spec A 7, OWNER_INVITATION_REQUIRED)."""

    __tablename__ = "invitations"

    organization_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    email: Mapped[str] = mapped_column(String(320))
    role: Mapped[Role] = mapped_column(_enum(Role, "invitation_role"))
    status: Mapped[InvitationStatus] = mapped_column(
        _enum(InvitationStatus, "invitation_status"), default=InvitationStatus.pending
    )
    invited_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    # The invitee's account when one existed at creation (a pending_invitation membership).
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # A link request: the gym registered this address at its desk while a proven login used
    # it; the gym's own profile (this id) waits for the person's consent and is linked only by
    # accepting. Not listed with the gym's invitations (the gym may not learn the login exists).
    profile_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    provider_invitation_id: Mapped[str | None] = mapped_column(String(128))
    # Bumped on resend: a token carries its version, so an older email's link stops working.
    token_version: Mapped[int] = mapped_column(default=1)
    send_count: Mapped[int] = mapped_column(default=0)
    last_sent_at: Mapped[datetime | None]
    expires_at: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    accepted_at: Mapped[datetime | None]
    accepted_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    revoked_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_invitations_organization_id_status", "organization_id", "status"),
        Index("ix_invitations_email_lower_status", text("lower(email)"), "status"),
        Index(
            "ix_invitations_pending_expires_at",
            "expires_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
    )


class InvitationBatchStatus(StrEnum):
    queued = "queued"  # addresses wait for the daemons
    finished = "finished"  # every address has its outcome


class InvitationBatch(IdMixin, Base):
    """A bulk invite: its addresses are invited by the daemons, each in a transaction of its own
    that also records its outcome. Answered in the request, 500 addresses (a lookup, an invite
    and an email each) ran past gunicorn's 30 s, held the invitations counter's lock (on the
    embedded default, the database's write lock) for all of it, and emailed invitations that
    the killed request's rollback then discarded."""

    __tablename__ = "invitation_batches"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    # Who asked: each address is invited with this membership's rights as they stand then.
    actor_membership_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("memberships.id", ondelete="SET NULL")
    )
    role: Mapped[Role] = mapped_column(_enum(Role, "invitation_batch_role"))
    emails: Mapped[list[str]] = mapped_column(JSONType)
    # One entry per address done, in order: {"email", "outcome"[, "id"]}.
    results: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    status: Mapped[str] = mapped_column(String(16), default=InvitationBatchStatus.queued)
    # Failed tries of the next address (its identity provider or mail server failed, or its
    # transaction was lost), and when it is tried again.
    failures: Mapped[int] = mapped_column(default=0)
    retry_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_invitation_batches_organization_created", "organization_id", "created_at"),
        Index("ix_invitation_batches_status_created", "status", "created_at"),
    )


class MemberImport(IdMixin, Base):
    """A roster import (spec A 5.3) asked for over HTTP: its rows are registered by the daemons,
    a chunk per transaction. A 5 MB roster holds tens of thousands of rows, and at about 6 ms a
    row one request registered some 4,500 before gunicorn's 30 s ended it (and rolled it back).
    The cap and the rows' syntax are checked when it is asked for (refused up front)."""

    __tablename__ = "member_imports"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    # Who asked, from where (the refusal audit of an unproven address records them).
    actor_membership_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("memberships.id", ondelete="SET NULL")
    )
    ip: Mapped[str | None] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(String(300))
    total: Mapped[int]
    done: Mapped[int] = mapped_column(default=0)  # rows registered or refused, in order
    # The rows refused before queueing: {"row": CSV line, "reason"}.
    invalid: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued, finished, failed
    error_code: Mapped[str | None] = mapped_column(String(64))
    failures: Mapped[int] = mapped_column(default=0)
    retry_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_member_imports_organization_created", "organization_id", "created_at"),
        Index("ix_member_imports_status_created", "status", "created_at"),
    )


class MemberImportRow(Base):
    """One row of a queued import, in CSV order, and what became of it."""

    __tablename__ = "member_import_rows"

    import_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("member_imports.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320))
    name: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(String(32))  # created, existing, unverified


class SalesGrant(IdMixin, Base):
    """Sales capability for a staff membership (spec A 2.5): scope own or team, manager bit."""

    __tablename__ = "sales_grants"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    membership_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("memberships.id", ondelete="CASCADE")
    )
    scope: Mapped[str] = mapped_column(String(16))
    manager: Mapped[bool] = mapped_column(default=False)
    granted_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    revoked_at: Mapped[datetime | None]

    __table_args__ = (
        Index(
            "uq_sales_grants_live_membership",
            "membership_id",
            unique=True,
            postgresql_where=text("revoked_at IS NULL"),
            sqlite_where=text("revoked_at IS NULL"),
        ),
    )


class JoinLink(IdMixin, Base):
    __tablename__ = "join_links"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    token: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str | None] = mapped_column(String(200))
    active: Mapped[bool] = mapped_column(default=True)
    revoked_at: Mapped[datetime | None]
    # A stored plan pre-selects the plan (and keeps the link off the minisite's call to action).
    plan_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)


class JoinSubmission(IdMixin, Base):
    """A join-form submission or a failed join checkout, for the ownership trail."""

    __tablename__ = "join_submissions"

    join_link_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("join_links.id", ondelete="CASCADE"))
    organization_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    email: Mapped[str | None] = mapped_column(String(320))
    user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    outcome: Mapped[str] = mapped_column(String(32))
    ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_join_submissions_email_lower", text("lower(email)")),)


class Lead(IdMixin, Base):
    __tablename__ = "leads"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    email: Mapped[str] = mapped_column(String(320))
    status: Mapped[str] = mapped_column(String(16), default="open")
    converted_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)


class Task(IdMixin, Base):
    """A follow-up for the gym's staff (e.g. an urgent payment follow-up after a failed join
    checkout). Billing and retention add their own kinds."""

    __tablename__ = "tasks"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(64))
    priority: Mapped[str] = mapped_column(String(16), default="normal")
    status: Mapped[str] = mapped_column(String(16), default="open")
    title: Mapped[str] = mapped_column(String(300))
    detail: Mapped[str | None] = mapped_column(Text)
    subject_type: Mapped[str | None] = mapped_column(String(64))
    subject_id: Mapped[str | None] = mapped_column(String(128))
    due_at: Mapped[datetime | None]
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    source: Mapped[str] = mapped_column(String(16), default="auto", server_default="auto")
    assignee_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    linked_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_tasks_organization_id_status_due_at", "organization_id", "status", "due_at"),
        UniqueConstraint("organization_id", "kind", "subject_type", "subject_id"),
    )
