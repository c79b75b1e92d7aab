"""Refused branding writes appear as api.request_failed with the API code (spec A 6.2); the
refused write itself changes nothing, so this is written in a transaction of its own. A stored
asset refused on save or publish is also branding.asset_rejected with source "stored"."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.assets.intake import StoredAssetRefused, asset_rejected
from gymctl.errors import DomainError
from gymctl.events import EventKind, emit


def record_refusal(
    session: Session,
    organization_id: uuid.UUID,
    *,
    operation: str,
    error: DomainError,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> None:
    """Write api.request_failed and mark the error audited (the door then commits this record
    and nothing else: the caller rolled its work back first, keeping only audited records).
    Once per error: a refusal recorded deeper down is not recorded again by its door."""
    if error.request_failed_recorded:
        return
    if isinstance(error, StoredAssetRefused):
        asset_rejected(
            session,
            organization_id=organization_id,
            actor_user_id=actor_user_id,
            now=now,
            asset=error.slot,
            source="stored",
            code=error.code,
        )
    emit(
        session,
        EventKind.analytics,
        "api.request_failed",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"operation": operation, "code": error.code, "status": error.status},
    )
    error.audited = True
    error.request_failed_recorded = True
