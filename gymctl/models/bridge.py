"""The bridge to the external gym system (spec B 2.6): the connection, the entity map, the
ordered sync queue and the stored external roster.

Neutral names: the design's arbox_entity_map and arbox_sync_ops are bridge_entity_map and
bridge_sync_ops here; taikan_id / arbox_id are platform_id / external_id.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gymctl import clock
from gymctl.models.base import Base, IdMixin


def _enum(cls: type[StrEnum], name: str) -> Enum:
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=32,
        values_callable=lambda members: [member.value for member in members],
    )


EXTERNAL_ID_LENGTH = 128  # the longest id of the external system a link or roster row keeps


class ConnectionStatus(StrEnum):
    pending = "pending"
    active = "active"
    revoked = "revoked"
    error = "error"


class EntityType(StrEnum):
    member = "member"
    membership_type = "membership_type"
    membership = "membership"
    schedule = "schedule"
    booking = "booking"
    lead = "lead"
    location = "location"
    staff = "staff"


class Origin(StrEnum):
    """How a link was made: the roster import, the mirror (our writes and identity search),
    the schedule poll and booking reconcile, or an operator."""

    import_ = "import"
    mirror = "mirror"
    poll = "poll"
    manual = "manual"


class OpType(StrEnum):
    user_create = "user.create"
    user_update = "user.update"
    membership_assign = "membership.assign"
    membership_update = "membership.update"
    membership_cancel = "membership.cancel"
    membership_hold = "membership.hold"
    booking_create = "booking.create"
    booking_cancel = "booking.cancel"
    lead_create = "lead.create"
    schedule_coach = "schedule.coach"


class OpStatus(StrEnum):
    pending = "pending"
    in_flight = "in_flight"
    succeeded = "succeeded"
    # The last attempt failed; the op waits for run_after (the backoff ladder) and is claimed
    # again like a pending one. The ladder exhausted, it parks.
    failed = "failed"
    parked = "parked"
    superseded = "superseded"
    # An operator gave a parked op up: it stops blocking its aggregate.
    dismissed = "dismissed"


WAITING = (OpStatus.pending, OpStatus.failed)
UNFINISHED = (OpStatus.pending, OpStatus.in_flight, OpStatus.failed, OpStatus.parked)
_WAITING_SQL = "status IN ('pending', 'failed')"
_UNFINISHED_SQL = "status IN ('pending', 'in_flight', 'failed', 'parked')"
_UNFINISHED_CLASS_SQL = f"class_key IS NOT NULL AND {_UNFINISHED_SQL}"


ACCOUNT_IN_USE_WHERE = "status = 'active' AND external_account_id IS NOT NULL"
EXTERNAL_GYM = "external_gym"  # the one provider a bridge connects to


class IntegrationConnection(IdMixin, Base):
    """One per organization. The api-key is stored only as AES-256-GCM ciphertext and purged on
    disconnect. The *_due_at columns ask the organization's dispatcher for a schedule poll or a
    booking reconcile (the daemon table sets them on schedule; a booking change nudges)."""

    __tablename__ = "integration_connections"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), unique=True
    )
    provider: Mapped[str] = mapped_column(String(32), default=EXTERNAL_GYM)
    status: Mapped[ConnectionStatus] = mapped_column(
        _enum(ConnectionStatus, "integration_connection_status"), default=ConnectionStatus.pending
    )
    credentials_ciphertext: Mapped[str | None] = mapped_column(String(1024))
    external_account_id: Mapped[str | None] = mapped_column(String(64))
    bridge_membership_type_id: Mapped[str | None] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(String(300))
    connected_at: Mapped[datetime | None]
    disconnected_at: Mapped[datetime | None]
    schedule_poll_due_at: Mapped[datetime | None]
    reconcile_due_at: Mapped[datetime | None]
    last_schedule_poll_at: Mapped[datetime | None]
    last_reconcile_at: Mapped[datetime | None]
    last_run: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)

    # One gym per external account: a second gym active on it would write its members into
    # the first gym's system and import that gym's roster as its own.
    __table_args__ = (
        Index(
            "uq_integration_connections_active_account",
            "provider",
            "external_account_id",
            unique=True,
            postgresql_where=text(ACCOUNT_IN_USE_WHERE),
            sqlite_where=text(ACCOUNT_IN_USE_WHERE),
        ),
    )


class EntityLink(IdMixin, Base):
    """A platform entity and its external twin. platform_id is empty for an external entity the
    poll discovered that nothing on the platform claims yet (a class, a booking made there)."""

    __tablename__ = "bridge_entity_map"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    entity_type: Mapped[EntityType] = mapped_column(_enum(EntityType, "bridge_entity_type"))
    platform_id: Mapped[str | None] = mapped_column(String(128))
    external_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH))
    origin: Mapped[Origin] = mapped_column(_enum(Origin, "bridge_entity_origin"))
    data: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)

    __table_args__ = (
        UniqueConstraint("organization_id", "entity_type", "external_id"),
        UniqueConstraint("organization_id", "entity_type", "platform_id"),
    )


class SyncOp(Base):
    """One change to send, in enqueue order (id) per aggregate_key."""

    __tablename__ = "bridge_sync_ops"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    op_type: Mapped[OpType] = mapped_column(_enum(OpType, "bridge_op_type"))
    aggregate_key: Mapped[str] = mapped_column(String(160))
    # A booking op's class session (class:<session id>): a booking.create that carries it waits
    # while more of its class's earlier booking.cancel ops, whoever's, are on their way than its
    # spare seats (the seat it takes may be one of theirs); the mirror decides which creates
    # carry it (bridge.mirror._class_key), the claim which may go (bridge.queue.blocked).
    class_key: Mapped[str | None] = mapped_column(String(160))
    dedupe_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[OpStatus] = mapped_column(
        _enum(OpStatus, "bridge_op_status"), default=OpStatus.pending
    )
    attempts: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(String(300))
    # Why a parked op parked: identity_conflict, retries_exhausted, rejected, member_unmapped...
    issue_code: Mapped[str | None] = mapped_column(String(64))
    run_after: Mapped[datetime]
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    superseded_by_id: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    completed_at: Mapped[datetime | None]

    __table_args__ = (
        # The claim scans an organization's waiting ops in id order.
        Index(
            "ix_bridge_sync_ops_waiting",
            "organization_id",
            "id",
            postgresql_where=text(_WAITING_SQL),
            sqlite_where=text(_WAITING_SQL),
        ),
        # Keeps the claim's NOT EXISTS (an earlier unfinished op of the same key) an index probe.
        Index(
            "ix_bridge_sync_ops_unfinished_key",
            "aggregate_key",
            "id",
            postgresql_where=text(_UNFINISHED_SQL),
            sqlite_where=text(_UNFINISHED_SQL),
        ),
        # The same for a booking.create's check of its class's earlier cancels.
        Index(
            "ix_bridge_sync_ops_unfinished_class",
            "class_key",
            "id",
            postgresql_where=text(_UNFINISHED_CLASS_SQL),
            sqlite_where=text(_UNFINISHED_CLASS_SQL),
        ),
        # The backstop: never two ops of one aggregate in flight, whatever a claim does.
        Index(
            "uq_bridge_sync_ops_in_flight_key",
            "aggregate_key",
            unique=True,
            postgresql_where=text("status = 'in_flight'"),
            sqlite_where=text("status = 'in_flight'"),
        ),
        Index("ix_bridge_sync_ops_organization_id_status", "organization_id", "status"),
        # The mirror reads an entity's last op by its aggregate, whatever its status.
        Index("ix_bridge_sync_ops_aggregate_key_id", "aggregate_key", "id"),
    )


class RosterEntry(IdMixin, Base):
    """An external user as the roster import read it: names, email, active. Phone numbers are
    never stored; disconnect deletes the organization's roster."""

    __tablename__ = "bridge_roster"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    external_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH))
    first_name: Mapped[str | None] = mapped_column(String(200))
    last_name: Mapped[str | None] = mapped_column(String(200))
    email: Mapped[str | None] = mapped_column(String(320))
    active: Mapped[bool] = mapped_column(default=True)
    fetched_at: Mapped[datetime]

    __table_args__ = (UniqueConstraint("organization_id", "external_id"),)


class BridgeIssue(IdMixin, Base):
    """A change the external system made that only a person can settle (the owner's issues
    inbox, beside the parked ops): one open entry per organization, kind and subject, so a
    change noticed again updates its entry instead of adding one."""

    __tablename__ = "bridge_issues"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(160))  # e.g. the external booking or class id
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)  # ids only, no personal data
    status: Mapped[str] = mapped_column(String(16), default="open")  # open, resolved, dismissed
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)
    resolved_at: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("organization_id", "kind", "subject", name="uq_bridge_issues_subject"),
    )


class SeriesCutover(IdMixin, Base):
    """The day a recurring class series (a class type's weekly slot in the gym's timezone:
    weekday and start time) moves its source of truth from the external system to the
    platform. Before it, what the external system does to the series' classes is applied
    here; from it on, the platform's word stands there."""

    __tablename__ = "bridge_series_cutovers"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    class_type_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("class_types.id", ondelete="CASCADE")
    )
    weekday: Mapped[int]  # Monday 0 .. Sunday 6
    start_time: Mapped[str] = mapped_column(String(5))  # HH:MM, local
    cutover_on: Mapped[date]
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)

    __table_args__ = (
        UniqueConstraint(
            "organization_id",
            "class_type_id",
            "weekday",
            "start_time",
            name="uq_bridge_series_cutovers_series",
        ),
    )
