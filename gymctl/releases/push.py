"""Push registration and delivery (spec A 6.4).

Registering needs an active membership in the organization the app maps to (the container app
may register in any organization the person belongs to). Delivery checks everything again at
send time, because any of it may have changed since the device registered: the organization's
scope and status, the membership, the app's enablement and the token's revocation. A token the
provider reports unregistered is revoked once the sends are done (none holds a write lock).
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access.memberships import resolve_membership
from gymctl.config import Settings
from gymctl.db import release_for_outside_call
from gymctl.errors import invalid, not_found
from gymctl.models import Membership, MembershipStatus, Organization, OrganizationStatus, User
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.releases import BrandedApp, PushRegistration
from gymctl.providers.push import PushMessage, PushProvider, token_digest
from gymctl.releases import codes
from gymctl.retention.copy import pick_locale

PLATFORMS = ("ios", "android")
MAX_TOKEN = 4096


def _mapped_app(
    session: Session, settings: Settings, organization_id: uuid.UUID, app_id: str
) -> BrandedApp | None:
    """None for the container app; the enabled mapping of this organization otherwise."""
    if app_id == settings.multi_org_app_id:
        return None
    app = session.scalar(
        select(BrandedApp).where(
            BrandedApp.organization_id == organization_id,
            (BrandedApp.apple_bundle_id == app_id) | (BrandedApp.android_package == app_id),
        )
    )
    if app is None or not app.enabled:
        raise not_found(codes.APP_IDENTITY_NOT_FOUND, "no enabled app of this gym answers to that")
    return app


def _upsert_registration(
    session: Session, app_id: str, token: str, fields: dict[str, Any]
) -> PushRegistration:
    """The locked row of this device token, written with `fields` (created when new). A device
    that registers twice at once (an app retrying) meets the other request's row instead of a
    unique-key error."""
    digest = token_digest(token)
    query = (
        select(PushRegistration)
        .where(PushRegistration.app_id == app_id, PushRegistration.token_sha256 == digest)
        .with_for_update()
    )
    row = session.scalar(query)
    if row is None:
        try:
            with (
                unique_violation("uq_push_registrations_app_id_token_sha256"),
                session.begin_nested(),
            ):
                row = PushRegistration(app_id=app_id, token_sha256=digest, token=token, **fields)
                session.add(row)
                session.flush()
            return row
        except UniqueViolation:
            row = session.scalars(query).one()
    for name, value in fields.items():
        setattr(row, name, value)
    session.flush()
    return row


def register(
    session: Session,
    settings: Settings,
    organization_id: uuid.UUID,
    user: User | None,
    *,
    app_id: str,
    platform: str,
    token: str,
    now: datetime,
    locale: str | None = None,
) -> PushRegistration:
    """`locale`: the app's language (X-Locale), what this device's pushes are written in."""
    membership = resolve_membership(session, organization_id, user)
    if platform not in PLATFORMS:
        raise invalid(codes.PUSH_PLATFORM_INVALID, "platform is ios or android")
    if not token or len(token) > MAX_TOKEN:
        raise invalid(codes.PUSH_TOKEN_INVALID, f"a push token has 1 to {MAX_TOKEN} characters")
    app = _mapped_app(session, settings, organization_id, app_id)
    # A device handed to someone else, or moved to another gym in the container app: the token
    # now belongs to this member only.
    return _upsert_registration(
        session,
        app_id,
        token,
        {
            "organization_id": organization_id,
            "user_id": membership.user_id,
            "branded_app_id": app.id if app is not None else None,
            "platform": platform,
            "registered_at": now,
            "revoked_at": None,
            "revoked_reason": None,
            "locale": pick_locale(locale),
        },
    )


def revoke(
    session: Session,
    organization_id: uuid.UUID,
    user: User | None,
    *,
    app_id: str,
    token: str,
    now: datetime,
) -> bool:
    """Sign-out revokes the device's token first (spec A 5.2). Only one's own; idempotent."""
    membership = resolve_membership(session, organization_id, user)
    row = session.scalar(
        select(PushRegistration).where(
            PushRegistration.app_id == app_id,
            PushRegistration.token_sha256 == token_digest(token or ""),
            PushRegistration.user_id == membership.user_id,
            PushRegistration.revoked_at.is_(None),
        )
    )
    if row is None:
        return False
    row.revoked_at, row.revoked_reason = now, "signed_out"
    session.flush()
    return True


def _refusal(
    session: Session, registration: PushRegistration, organization_id: uuid.UUID
) -> str | None:
    """Why this registration may not receive now (None: it may)."""
    if registration.revoked_at is not None:
        return "revoked"
    if registration.organization_id != organization_id:
        return "out_of_scope"
    organization = session.get(Organization, organization_id)
    if (
        organization is None
        or organization.deleted_at is not None
        or organization.status is not OrganizationStatus.active
    ):
        return "organization_inactive"
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == organization_id,
            Membership.user_id == registration.user_id,
        )
    )
    if membership is None or membership.status is not MembershipStatus.active:
        return "not_a_member"
    user = session.get(User, registration.user_id)
    if user is None or user.deleted_at is not None:
        return "not_a_member"
    if registration.branded_app_id is not None:
        app = session.get(BrandedApp, registration.branded_app_id)
        if app is None or app.organization_id != organization_id:
            return "out_of_scope"
        if not app.enabled:
            return "app_disabled"
    return None


def deliver(
    session: Session,
    provider: PushProvider,
    organization_id: uuid.UUID,
    user_ids: list[uuid.UUID],
    *,
    title: str,
    body: str,
    data: dict[str, Any] | None = None,
    now: datetime,
) -> dict[str, Any]:
    """Fan a message out to the members' devices, each one revalidated just before sending.
    The sends hold no write lock (decision s42): a transaction that only read ends first
    (`db.release_for_outside_call`), and a token the provider reports unregistered is revoked
    after them, unless its device registered again meanwhile."""
    registrations = session.scalars(
        select(PushRegistration)
        .where(PushRegistration.user_id.in_(user_ids))
        .order_by(PushRegistration.registered_at, PushRegistration.id)
    ).all()
    skipped: Counter[str] = Counter()
    messages = []
    for registration in registrations:
        reason = _refusal(session, registration, organization_id)
        if reason is not None:
            skipped[reason] += 1
            continue
        message = PushMessage(
            app_id=registration.app_id,
            platform=registration.platform,
            token=registration.token,
            title=title,
            body=body,
            data=dict(data or {}),
        )
        messages.append((registration.id, registration.registered_at, message))
    release_for_outside_call(session)
    sent, gone = 0, []
    for registration_id, registered_at, message in messages:
        if provider.send(message) == "unregistered":
            gone.append((registration_id, registered_at))
        else:
            sent += 1
    for registration_id, registered_at in gone:
        skipped["unregistered"] += 1
        registration = session.get(
            PushRegistration, registration_id, with_for_update=True, populate_existing=True
        )
        if registration is not None and registration.registered_at == registered_at:
            registration.revoked_at, registration.revoked_reason = now, "unregistered"
    session.flush()
    return {"sent": sent, "skipped": dict(sorted(skipped.items()))}
