"""The dedicated app of a gym and its identity lock (spec A 2.12).

The application-ID mapping and the link slug are set once, at creation, and never change (the
database refuses it too); the link slug starts as the gym's slug but is independent of it, so
renaming the gym breaks no installed link. `enabled` is the internal runtime switch: operators
flip it, owners never see or edit it, and it is not a release status.

The public lookup lets only the configured multi-organization container ID act as a container;
every other ID resolves only through an enabled mapping of an active organization, and every
refusal (unknown, disabled, inactive, deleted) is the same 404 so nothing leaks.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gymctl.branding.published import public_branding
from gymctl.config import Settings
from gymctl.db import advisory_lock
from gymctl.errors import DomainError, conflict, invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Organization, OrganizationStatus
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.organizations import Tier
from gymctl.models.releases import BrandedApp
from gymctl.releases import codes, identifiers

TEAM_ID = re.compile(r"^[A-Z0-9]{10}$")
CERT_SHA256 = re.compile(r"^[0-9A-F]{2}(?::[0-9A-F]{2}){31}$")
DIGEST = re.compile(r"^[0-9a-f]{64}$")
TEXT_ID = re.compile(r"^[A-Za-z0-9._:/@-]{1,200}$")
PLATFORMS = ("ios", "android")
# A gym's app raced by another's for one of its IDs, or by a second mapping of the same gym.
_ID_KEYS = tuple(
    f"uq_organization_branded_apps_{c}" for c in ("link_slug", "apple_bundle_id", "android_package")
)
_ONE_APP = "uq_organization_branded_apps_organization_id"
MAPPING_LOCK = "branded_apps:mapping"  # create_app: one mapping at a time
TOP_TIER = Tier.elite


def require_top_tier(organization: Organization) -> None:
    """409 branded_app_tier_required below the top tier (spec A 1: "Organizations on the top
    tier can have a dedicated native mobile app, built and released through an operator-run
    pipeline"): no app is mapped, no candidate cut and no build dispatched for another gym. An
    app already installed keeps resolving whatever the tier (spec A 2.12)."""
    if organization.tier != TOP_TIER:
        raise conflict(
            codes.BRANDED_APP_TIER_REQUIRED,
            f"a dedicated app is for gyms on the top tier ({TOP_TIER.value}); this gym is on "
            f"{organization.tier.value} (gymctl members tier)",
            tier=organization.tier.value,
        )


def may_have_app(organization: Organization | None) -> bool:
    """A live gym on the top tier: what a build, an upload or a new candidate of its app needs
    at the moment it happens, not only when it was asked for."""
    return (
        organization is not None
        and organization.deleted_at is None
        and organization.status is OrganizationStatus.active
        and organization.tier == TOP_TIER
    )


def require_building(organization: Organization | None) -> None:
    """A build or an upload starting: 404 organization_not_found for a gym deleted or inactive
    since it was dispatched (spec A 2.12: they deny access; what a gym serves ends with it),
    409 branded_app_tier_required for one moved below the top tier (`require_top_tier`)."""
    if (
        organization is None
        or organization.deleted_at is not None
        or organization.status is not OrganizationStatus.active
    ):
        raise not_found(
            codes.ORGANIZATION_NOT_FOUND, "the gym is deleted or inactive: its app is not built"
        )
    require_top_tier(organization)


def find_app(session: Session, organization_id: uuid.UUID) -> BrandedApp | None:
    return session.scalar(select(BrandedApp).where(BrandedApp.organization_id == organization_id))


def require_app(session: Session, organization_id: uuid.UUID) -> BrandedApp:
    app = find_app(session, organization_id)
    if app is None:
        raise not_found(codes.BRANDED_APP_NOT_FOUND, "this organization has no dedicated app")
    return app


def create_app(
    session: Session,
    settings: Settings,
    organization: Organization,
    *,
    link_slug: str | None = None,
    apple_bundle_id: str | None = None,
    android_package: str | None = None,
    now: datetime,
) -> BrandedApp:
    """Map a gym on the top tier to its dedicated app. IDs default to <prefix>.<link slug>
    (Android: hyphens as underscores); the mapping is immutable from here on."""
    require_top_tier(organization)
    if find_app(session, organization.id) is not None:
        raise conflict(codes.BRANDED_APP_EXISTS, "the app mapping is immutable")
    slug = identifiers.validate_link_slug(link_slug or organization.slug)
    prefix = settings.branded_app_id_prefix
    apple = identifiers.validate_apple_bundle_id(
        apple_bundle_id or identifiers.generated_apple_bundle_id(prefix, slug)
    )
    android = identifiers.validate_android_package(
        android_package or identifiers.generated_android_package(prefix, slug)
    )
    if settings.multi_org_app_id in (apple, android):
        raise conflict(codes.BRANDED_APP_ID_TAKEN, "that is the container app's ID")
    # The database's unique keys are per column: an Apple ID equal to another gym's Android
    # package is caught only by this read, so mappings are made one at a time (two at once
    # both committed, and the lookup answered either gym for the ID).
    advisory_lock(session, MAPPING_LOCK)
    taken = session.scalar(
        select(BrandedApp.id).where(
            or_(
                BrandedApp.link_slug == slug,
                BrandedApp.apple_bundle_id.in_([apple, android]),
                BrandedApp.android_package.in_([apple, android]),
            )
        )
    )
    if taken is not None:
        raise conflict(codes.BRANDED_APP_ID_TAKEN, "another gym's app holds that ID")
    app = BrandedApp(
        organization_id=organization.id,
        link_slug=slug,
        apple_bundle_id=apple,
        android_package=android,
        enabled=False,
        config={},
        config_revision=0,
        created_at=now,
        updated_at=now,
    )
    try:
        with unique_violation(*_ID_KEYS, _ONE_APP), session.begin_nested():
            session.add(app)
            session.flush()
    except UniqueViolation as refused:
        if refused.constraint == _ONE_APP:
            raise conflict(codes.BRANDED_APP_EXISTS, "the app mapping is immutable") from None
        raise conflict(codes.BRANDED_APP_ID_TAKEN, "another gym's app holds that ID") from None
    _audit(session, app, "branded_app.created", now, {"linkSlug": slug})
    return app


def _audit(
    session: Session, app: BrandedApp, name: str, now: datetime, payload: dict[str, Any]
) -> None:
    emit(
        session,
        EventKind.audit,
        name,
        at=now,
        aggregate_type="branded_app",
        aggregate_id=app.id,
        organization_id=app.organization_id,
        payload=payload,
    )


def set_enabled(
    session: Session, organization_id: uuid.UUID, enabled: bool, *, now: datetime
) -> BrandedApp:
    """The internal runtime switch: operators only (CLI, admin)."""
    app = require_app(session, organization_id)
    if app.enabled != enabled:
        app.enabled = enabled
        app.updated_at = now
        _audit(session, app, "branded_app.enabled_changed", now, {"enabled": enabled})
        session.flush()
    return app


def _checked_config(changes: dict[str, Any]) -> dict[str, Any]:
    checks = {
        "appleTeamId": lambda v: isinstance(v, str) and TEAM_ID.fullmatch(v),
        "androidCertSha256": lambda v: (
            isinstance(v, list)
            and 0 < len(v) <= 5
            and all(isinstance(x, str) and CERT_SHA256.fullmatch(x) for x in v)
        ),
        "buildServiceProject": lambda v: isinstance(v, str) and TEXT_ID.fullmatch(v),
        "iosProfile": lambda v: isinstance(v, str) and TEXT_ID.fullmatch(v),
        "androidProfile": lambda v: isinstance(v, str) and TEXT_ID.fullmatch(v),
        "appleStoreAccount": lambda v: isinstance(v, str) and TEXT_ID.fullmatch(v),
        "googleStoreAccount": lambda v: isinstance(v, str) and TEXT_ID.fullmatch(v),
        "pushCredentialSha256": lambda v: isinstance(v, str) and DIGEST.fullmatch(v),
    }
    for name, value in changes.items():
        if name not in checks:
            raise invalid(codes.BRANDED_APP_CONFIG_INVALID, f"unknown setting {name}")
        if not checks[name](value):
            raise invalid(codes.BRANDED_APP_CONFIG_INVALID, f"{name} is malformed", field=name)
    return changes


def configure(
    session: Session, organization_id: uuid.UUID, changes: dict[str, Any], *, now: datetime
) -> BrandedApp:
    """Operator configuration; a real change is a new config revision (which supersedes the
    current release candidate)."""
    app = require_app(session, organization_id)
    merged = {**app.config, **_checked_config(changes)}
    if merged != app.config:
        app.config = merged
        app.config_revision += 1
        app.updated_at = now
        _audit(
            session,
            app,
            "branded_app.configured",
            now,
            {"settings": sorted(changes), "configRevision": app.config_revision},
        )
        session.flush()
    return app


def describe_for_operator(app: BrandedApp, settings: Settings) -> dict[str, Any]:
    """Internal: operators' view (never an owner-facing response)."""
    return {
        "organizationId": str(app.organization_id),
        "linkSlug": app.link_slug,
        "urlScheme": identifiers.url_scheme(settings.branded_app_scheme_brand, app.link_slug),
        "appleBundleId": app.apple_bundle_id,
        "androidPackage": app.android_package,
        "enabled": app.enabled,
        "configRevision": app.config_revision,
        "config": dict(app.config),
        "createdAt": app.created_at.isoformat(),
    }


# --- the public lookup ---------------------------------------------------------------------


def _live_app(session: Session, *conditions: Any) -> tuple[BrandedApp, Organization] | None:
    row = session.execute(
        select(BrandedApp, Organization)
        .join(Organization, Organization.id == BrandedApp.organization_id)
        .where(
            *conditions,
            BrandedApp.enabled.is_(True),
            Organization.status == OrganizationStatus.active,
            Organization.deleted_at.is_(None),
        )
    ).first()
    return (row[0], row[1]) if row is not None else None


def _denied() -> DomainError:
    return not_found(codes.APP_IDENTITY_NOT_FOUND, "no enabled app answers to that")


def _dedicated(
    session: Session, settings: Settings, app: BrandedApp, organization: Organization, schema: int
) -> dict[str, Any]:
    branding = public_branding(session, organization.id, organization.name, schema)
    return {
        "mode": "dedicated",
        "organization": {"id": str(organization.id), "name": organization.name},
        "linkSlug": app.link_slug,
        "urlScheme": identifiers.url_scheme(settings.branded_app_scheme_brand, app.link_slug),
        "branding": branding,
    }


def lookup_application(
    session: Session, settings: Settings, application_id: str, *, schema: int
) -> dict[str, Any]:
    """What a native binary learns about itself at start. Only the configured container ID is a
    container; anything else unlocks only through an enabled mapping of an active gym."""
    if application_id == settings.multi_org_app_id:
        return {"mode": "container"}
    if not application_id or len(application_id) > identifiers.APPLE_MAX:
        raise _denied()
    found = _live_app(
        session,
        or_(
            BrandedApp.apple_bundle_id == application_id,
            BrandedApp.android_package == application_id,
        ),
    )
    if found is None:
        raise _denied()
    return _dedicated(session, settings, *found, schema)


def resolve_link(session: Session, settings: Settings, slug: str, *, schema: int) -> dict[str, Any]:
    """An installed app opening /b/<slug>: the tier plays no part; a disabled app or an inactive
    or deleted gym denies."""
    if not identifiers.LINK_SLUG.fullmatch(slug or ""):
        raise _denied()
    found = _live_app(session, BrandedApp.link_slug == slug)
    if found is None:
        raise _denied()
    return _dedicated(session, settings, *found, schema)


def live_apps(session: Session) -> list[BrandedApp]:
    """Enabled apps of active gyms: the ones the association files claim links for."""
    return list(
        session.scalars(
            select(BrandedApp)
            .join(Organization, Organization.id == BrandedApp.organization_id)
            .where(
                BrandedApp.enabled.is_(True),
                Organization.status == OrganizationStatus.active,
                Organization.deleted_at.is_(None),
            )
            .order_by(BrandedApp.link_slug)
        )
    )
