"""Branded apps, push registrations and the release pipeline (spec A 2.12-2.14, 3, 5.5, 6.4).

Immutable by the database, not only by the code: a release candidate's snapshot and an evidence
row refuse every UPDATE, and a branded app refuses a change of its identity (application IDs,
link slug, organization). Triggers of migration 0010 hold these on PostgreSQL and SQLite alike.
Mutable state lives beside them: supersession rows, per-platform state, operations.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String, UniqueConstraint, Uuid, false, text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


def _org() -> ForeignKey:
    return ForeignKey("organizations.id", ondelete="CASCADE")


class BrandedApp(IdMixin, Base):
    """A dedicated native app: its identity is locked once created; `enabled` is the internal
    runtime switch (not a release status, never owner-editable)."""

    __tablename__ = "organization_branded_apps"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), unique=True)
    link_slug: Mapped[str] = mapped_column(String(40), unique=True)
    apple_bundle_id: Mapped[str] = mapped_column(String(155), unique=True)
    android_package: Mapped[str] = mapped_column(String(150), unique=True)
    enabled: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Operator configuration (team id, certificate fingerprints, build-service project,
    # per-platform profiles, store accounts, push-credential digest); every change is a new
    # config revision, which supersedes the current release candidate.
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    config_revision: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class PushRegistration(IdMixin, Base):
    """One device token of one native app, held by one member of the mapped organization."""

    __tablename__ = "push_registrations"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), index=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # Null for the multi-organization container app.
    branded_app_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("organization_branded_apps.id", ondelete="CASCADE")
    )
    app_id: Mapped[str] = mapped_column(String(155))
    platform: Mapped[str] = mapped_column(String(16))
    token: Mapped[str] = mapped_column(String(4096))
    token_sha256: Mapped[str] = mapped_column(String(64))
    registered_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    revoked_reason: Mapped[str | None] = mapped_column(String(32))
    # The app's language when it registered (X-Locale): what the member's pushes are written in.
    locale: Mapped[str | None] = mapped_column(String(8))

    __table_args__ = (UniqueConstraint("app_id", "token_sha256"),)


class PushNotice(IdMixin, Base):
    """An event of the outbox pushed to its member's devices (spec A 6.4 fanout), one per
    event: the event's id keys it, so an event is pushed once however often the job runs."""

    __tablename__ = "push_notices"

    outbox_event_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), unique=True
    )
    organization_id: Mapped[uuid.UUID] = mapped_column(_org())
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(32))
    sent: Mapped[int]  # devices it reached (0: none registered, or none may receive now)
    created_at: Mapped[datetime]


class FeatureSwitch(Base):
    """A per-organization feature switch; a missing row is off."""

    __tablename__ = "organization_feature_switches"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    enabled: Mapped[bool] = mapped_column(default=False, server_default=false())
    updated_at: Mapped[datetime]


class ReleaseRequest(IdMixin, Base):
    """A gym's request for its dedicated app, with the owner's submission intake (nullable JSON)
    and its revision (0 until the first save)."""

    __tablename__ = "release_requests"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), unique=True)
    branded_app_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organization_branded_apps.id", ondelete="CASCADE")
    )
    submission: Mapped[dict[str, Any] | None]
    submission_revision: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ReleaseCandidate(IdMixin, Base):
    """An immutable snapshot; the database refuses any UPDATE of the row."""

    __tablename__ = "release_candidates"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), index=True)
    release_request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_requests.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer)
    snapshot: Mapped[dict[str, Any]]
    snapshot_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    brand_schema_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]

    __table_args__ = (UniqueConstraint("release_request_id", "generation"),)


class CandidateSupersession(Base):
    """A candidate stops being current: written once, beside the immutable snapshot."""

    __tablename__ = "release_candidate_supersessions"

    candidate_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_candidates.id", ondelete="CASCADE"), primary_key=True
    )
    reason: Mapped[str] = mapped_column(String(32))
    superseded_at: Mapped[datetime]


class ReleaseApproval(IdMixin, Base):
    """An owner approval for one purpose, bound to the intake revision (and, except for the
    intake itself, to a candidate's snapshot_sha256)."""

    __tablename__ = "release_approvals"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), index=True)
    release_request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_requests.id", ondelete="CASCADE")
    )
    candidate_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("release_candidates.id", ondelete="CASCADE")
    )
    purpose: Mapped[str] = mapped_column(String(32))
    revision: Mapped[int] = mapped_column(Integer)
    snapshot_sha256: Mapped[str | None] = mapped_column(String(64))
    approved_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    approved_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]


class BusinessCheck(Base):
    """One of the four owner checks of a release target and artifact generation."""

    __tablename__ = "release_business_checks"

    release_request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_requests.id", ondelete="CASCADE"), primary_key=True
    )
    target: Mapped[str] = mapped_column(String(16), primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    check: Mapped[str] = mapped_column(String(48), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    observed_at: Mapped[datetime]
    recorded_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)


class ReleaseOperation(IdMixin, Base):
    """One dispatch of the protected CI workflow for a candidate, with the CI identity it must
    prove and its single-use nonce (stored as a digest)."""

    __tablename__ = "release_operations"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), index=True)
    candidate_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_candidates.id", ondelete="CASCADE")
    )
    snapshot_sha256: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    platform: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    nonce_sha256: Mapped[str] = mapped_column(String(64))
    nonce_used_at: Mapped[datetime | None]
    ci: Mapped[dict[str, Any]] = mapped_column(default=dict)
    access_sha256: Mapped[str | None] = mapped_column(String(64))
    access_expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    submitted_at: Mapped[datetime | None]


class ReleaseEvidence(IdMixin, Base):
    """Append-only: the database refuses any UPDATE of the row."""

    __tablename__ = "release_evidence"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), index=True)
    candidate_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_candidates.id", ondelete="CASCADE")
    )
    operation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("release_operations.id", ondelete="CASCADE")
    )
    platform: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(32))
    result: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(16))
    observed_at: Mapped[datetime]
    recorded_at: Mapped[datetime]
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ReleasePlatformState(Base):
    """Where each platform's release stands now (mutable; the evidence is the history)."""

    __tablename__ = "release_platform_states"

    release_request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_requests.id", ondelete="CASCADE"), primary_key=True
    )
    platform: Mapped[str] = mapped_column(String(16), primary_key=True)
    candidate_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("release_candidates.id", ondelete="CASCADE")
    )
    state: Mapped[str] = mapped_column(String(32))
    updated_at: Mapped[datetime]
