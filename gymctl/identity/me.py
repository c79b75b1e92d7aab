"""GET /users/me: the signed-in person, their memberships and the active organization."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from gymctl.errors import DomainError, not_found
from gymctl.identity.auth import Auth
from gymctl.identity.users import find_or_create
from gymctl.models import (
    LegalConsent,
    LegalDocument,
    LegalDocumentType,
    Membership,
    MembershipStatus,
    Organization,
    User,
)


def pending_legal_consents(session: Session, user: User, *, now: datetime) -> int:
    """Required types whose latest published document the user has not accepted; a type with no
    published document counts as owed (spec A 2.6, 4). One query."""
    latest = (
        select(LegalDocument.type, func.max(LegalDocument.published_at).label("published_at"))
        .where(LegalDocument.published_at <= now)
        .group_by(LegalDocument.type)
        .subquery()
    )
    accepted = session.scalar(
        select(func.count(func.distinct(LegalDocument.type)))
        .join(
            latest,
            and_(
                LegalDocument.type == latest.c.type,
                LegalDocument.published_at == latest.c.published_at,
            ),
        )
        .join(
            LegalConsent,
            and_(LegalConsent.document_id == LegalDocument.id, LegalConsent.user_id == user.id),
        )
    )
    return len(LegalDocumentType) - (accepted or 0)


def _memberships(session: Session, user: User) -> list[Membership]:
    return list(
        session.scalars(
            select(Membership)
            .join(Organization)
            .where(Membership.user_id == user.id, Organization.deleted_at.is_(None))
            .order_by(Membership.created_at, Membership.id)
        )
    )


def _active(memberships: list[Membership], organization_id: uuid.UUID | None) -> Membership | None:
    """The organization context: the one asked for, else the earliest active membership.
    Never a token claim (spec A 1)."""
    usable = [m for m in memberships if m.status is MembershipStatus.active]
    if organization_id is None:
        return usable[0] if usable else None
    chosen = next((m for m in usable if m.organization_id == organization_id), None)
    if chosen is None:
        raise not_found("organization_not_found", "no active membership in that organization")
    return chosen


def current_user(
    session: Session,
    auth: Auth,
    *,
    now: datetime,
    organization_id: uuid.UUID | None = None,
    branding_schema: int = 1,
) -> dict[str, Any]:
    user = auth.user
    if user is None:
        # Valid session, no row yet: the user.created webhook is late or failed.
        user, _created = find_or_create(session, auth.user_id, now=now)
    if user.deleted_at is not None:
        raise DomainError("user_deleted", "this account was deleted", status=401)
    memberships = _memberships(session, user)
    active = _active(memberships, organization_id)
    body: dict[str, Any] = {
        "user": {
            "id": str(user.id),
            "identityId": user.identity_id,
            "email": user.email,
            "imageUrl": user.image_url,
        },
        "memberships": [
            {
                "organizationId": str(m.organization_id),
                "organizationName": m.organization.name,
                "role": m.role.value,
                "status": m.status.value,
            }
            for m in memberships
        ],
        "activeOrganization": None,
        "pendingLegalConsents": pending_legal_consents(session, user, now=now),
        "invitationHeld": any(m.invitation_held for m in memberships),
    }
    if active is not None:
        organization = active.organization
        body["activeOrganization"] = {
            "id": str(organization.id),
            "name": organization.name,
            "slug": organization.slug,
            "role": active.role.value,
        }
        body["branding"] = {
            "schema": branding_schema,
            "organizationName": organization.name,
            # Palettes and publishing arrive with the branding issue; until then nothing is live.
            "status": "unpublished",
        }
    return body
