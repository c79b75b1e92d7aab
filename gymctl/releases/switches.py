"""Per-organization feature switches (spec A 9): off by default, enabled per organization by an
operator. The release area's three are the only ones so far; a switch name outside SWITCHES is
refused, so a typo never silently reads as "off"."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models.releases import FeatureSwitch
from gymctl.releases import codes

RELEASE_TRACKER = "member-app-release-tracker"
INTERNAL_UPLOAD_ASSISTANCE = "member-app-internal-upload-assistance"
HERMES_ASSISTANCE = "member-app-hermes-assistance"
SWITCHES = (RELEASE_TRACKER, INTERNAL_UPLOAD_ASSISTANCE, HERMES_ASSISTANCE)


def _known(name: str) -> str:
    if name not in SWITCHES:
        raise invalid(codes.FEATURE_SWITCH_UNKNOWN, f"switches: {', '.join(SWITCHES)}")
    return name


def is_enabled(session: Session, organization_id: uuid.UUID, name: str) -> bool:
    row = session.get(FeatureSwitch, (organization_id, _known(name)))
    return row is not None and row.enabled


def states(session: Session, organization_id: uuid.UUID) -> dict[str, bool]:
    rows = session.scalars(
        select(FeatureSwitch).where(FeatureSwitch.organization_id == organization_id)
    )
    on = {row.name for row in rows if row.enabled}
    return {name: name in on for name in SWITCHES}


def set_switch(
    session: Session, organization_id: uuid.UUID, name: str, enabled: bool, *, now: datetime
) -> dict[str, bool]:
    row = session.get(FeatureSwitch, (organization_id, _known(name)))
    if row is None:
        row = FeatureSwitch(organization_id=organization_id, name=name)
        session.add(row)
    if bool(row.enabled) != enabled:
        emit(
            session,
            EventKind.audit,
            "feature_switch.changed",
            at=now,
            aggregate_type="organization",
            aggregate_id=organization_id,
            organization_id=organization_id,
            payload={"switch": name, "enabled": enabled},
        )
    row.enabled, row.updated_at = enabled, now
    session.flush()
    return states(session, organization_id)


def require(session: Session, organization_id: uuid.UUID, name: str) -> None:
    """Refuse (404, as if the feature did not exist) while the switch is off."""
    if not is_enabled(session, organization_id, name):
        raise not_found(codes.FEATURE_DISABLED, "this feature is not enabled here")
