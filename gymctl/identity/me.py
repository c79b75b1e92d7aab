"""GET /users/me: the signed-in person, their memberships and the active organization."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, bindparam, exists, func, join, select
from sqlalchemy.orm import Session, aliased

from gymctl.access.ownership import awaiting_consent, settle_ownership
from gymctl.branding.published import live_markers, public_branding_at
from gymctl.config import Settings
from gymctl.errors import forbidden, not_found, unauthorized
from gymctl.identity import codes
from gymctl.identity.auth import Auth
from gymctl.identity.users import first_request
from gymctl.models import (
    LegalConsent,
    LegalDocument,
    LegalDocumentType,
    Membership,
    MembershipStatus,
    Organization,
    User,
)
from gymctl.models.identity import same_address
from gymctl.models.organizations import OrganizationStatus
from gymctl.providers.identity_admin import IdentityAdmin


def _accepted_latest_documents():
    """How many required types have their latest published document (published_at not after
    :now) accepted by :user_id."""
    latest = (
        select(LegalDocument.type, func.max(LegalDocument.published_at).label("published_at"))
        .where(LegalDocument.published_at <= bindparam("now"))
        .group_by(LegalDocument.type)
        .subquery()
    )
    return (
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
            and_(
                LegalConsent.document_id == LegalDocument.id,
                LegalConsent.user_id == bindparam("user_id"),
            ),
        )
    )


_PROFILE = aliased(User)
# Each membership row carries its organization's live brand revision and app version, so the
# branding of the active organization costs no extra round trip (none while nothing is live).
_LIVE_BRAND, _LIVE_APP = live_markers(Membership.organization_id)

# Built once: /users/me is the hottest authenticated route. One round trip: the user's live
# memberships (deleted organizations left out), each row carrying the legal-consent count.
_LIVE_MEMBERSHIPS = join(
    Membership,
    Organization,
    and_(Organization.id == Membership.organization_id, Organization.deleted_at.is_(None)),
)
_ME = (
    select(
        _accepted_latest_documents().scalar_subquery().label("accepted"),
        # Spec A 5.3: is there a profile a gym created under this address, not yet linked?
        exists()
        .where(
            same_address(_PROFILE.email, bindparam("email")),
            _PROFILE.identity_id.is_(None),
            _PROFILE.deleted_at.is_(None),
            ~awaiting_consent(_PROFILE.id),
        )
        .label("unlinked_profile"),
        Membership.organization_id,
        Membership.role,
        Membership.status,
        Membership.invitation_held,
        Organization.name,
        Organization.slug,
        Organization.status.label("organization_status"),
        _LIVE_BRAND.label("brand_revision"),
        _LIVE_APP.label("app_version"),
    )
    .select_from(User)
    .outerjoin(_LIVE_MEMBERSHIPS, Membership.user_id == User.id)
    .where(User.id == bindparam("user_id"))
    .order_by(Membership.created_at, Membership.id)
)


def _active(memberships: list[Row], organization_id: uuid.UUID | None) -> Row | None:
    """The organization context: the one asked for, else the earliest active membership of
    an active gym, the rule every organization route resolves a caller by
    (memberships.resolve_membership): an inactive gym was the app's context, every call of
    which answered 404. Never a token claim (spec A 1). The list shows every gym."""
    usable = [
        m
        for m in memberships
        if m.status is MembershipStatus.active
        and m.organization_status is OrganizationStatus.active
    ]
    if organization_id is None:
        return usable[0] if usable else None
    chosen = next((m for m in usable if m.organization_id == organization_id), None)
    if chosen is None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no active membership in that organization")
    return chosen


def current_user(
    session: Session,
    auth: Auth,
    *,
    now: datetime,
    identity_admin: IdentityAdmin,
    settings: Settings,
    organization_id: uuid.UUID | None = None,
    branding_schema: int = 1,
) -> dict[str, Any]:
    user = auth.user
    if user is None:
        # Valid session, no row yet: the user.created webhook is late or failed.
        user = first_request(
            session, auth.user_id, identity_admin=identity_admin, settings=settings, now=now
        )
    if user.deleted_at is not None:
        raise unauthorized(codes.USER_DELETED, "this account was deleted")
    rows = session.execute(_ME, {"user_id": user.id, "now": now, "email": user.email}).all()
    held = any(row.invitation_held for row in rows)
    if rows[0].unlinked_profile or (held and user.email_verified_at is not None):
        if user.email_verified_at is None:
            raise forbidden(
                codes.EMAIL_OWNERSHIP_REQUIRED,
                "a gym registered this address; confirm you own it with the gym",
            )
        user = settle_ownership(session, user, now=now)
        rows = session.execute(_ME, {"user_id": user.id, "now": now, "email": user.email}).all()
    memberships = [row for row in rows if row.organization_id is not None]
    # Spec A 2.6: a required type with no published document counts as owed.
    pending_legal_consents = len(LegalDocumentType) - (rows[0].accepted or 0)
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
                "organizationName": m.name,
                "role": m.role.value,
                "status": m.status.value,
            }
            for m in memberships
        ],
        "activeOrganization": None,
        "pendingLegalConsents": pending_legal_consents,
        "invitationHeld": any(m.invitation_held for m in memberships),
    }
    if active is not None:
        body["activeOrganization"] = {
            "id": str(active.organization_id),
            "name": active.name,
            "slug": active.slug,
            "role": active.role.value,
        }
        # The same projection as GET /public/organizations/:id/branding?schema=N.
        body["branding"] = public_branding_at(
            session,
            active.organization_id,
            active.name,
            branding_schema,
            brand_revision=active.brand_revision,
            app_version=active.app_version,
        )
    return body
