"""What is live: the published brand (the API issue 6's branded apps build on), the member app's
live version, and the public branding read (spec A 4, 9).

`live_brand(session, organization_id)` returns the published brand or None. Its `brand` is the
schemaVersion 2 document frozen at publish (resolved schema-4 palette, light and dark roles);
`logos` maps a slot to the durable object key of a stored brand asset; `revision` advances on
every publish. Drafts are never visible here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, ScalarSelect, case, select
from sqlalchemy.orm import Session

from gymctl.branding.palette import Palette
from gymctl.branding.projections import project
from gymctl.models import BrandRevision, MemberAppVersion


@dataclass(frozen=True)
class PublishedBrand:
    organization_id: uuid.UUID
    revision: int
    name: str | None
    palette: Palette  # what the owner set; the rest of `brand` was derived
    brand: dict[str, Any]  # schemaVersion 2
    logos: dict[str, str]
    published_at: datetime

    def projection(self, schema: int) -> dict[str, Any]:
        """The palette and brand as an app asking for `schema` (1 to 4) reads them."""
        return {
            "name": self.name,
            **project(self.brand, schema, owner_surfaces=self.palette.owner_surfaces()),
        }


def latest_revision(session: Session, organization_id: uuid.UUID) -> BrandRevision | None:
    return session.scalar(
        select(BrandRevision)
        .where(BrandRevision.organization_id == organization_id)
        .order_by(BrandRevision.revision.desc())
        .limit(1)
    )


def live_brand(session: Session, organization_id: uuid.UUID) -> PublishedBrand | None:
    row = latest_revision(session, organization_id)
    if row is None or row.unpublished_at is not None:
        return None
    return _published(organization_id, row)


def _published(organization_id: uuid.UUID, row: BrandRevision) -> PublishedBrand:
    return PublishedBrand(
        organization_id=organization_id,
        revision=row.revision,
        name=row.name,
        palette=Palette.parse(row.palette),
        brand=row.brand,
        logos=dict(row.logos),
        published_at=row.published_at,
    )


def latest_app_version(session: Session, organization_id: uuid.UUID) -> MemberAppVersion | None:
    return session.scalar(
        select(MemberAppVersion)
        .where(MemberAppVersion.organization_id == organization_id)
        .order_by(MemberAppVersion.version.desc())
        .limit(1)
    )


def live_app_version(session: Session, organization_id: uuid.UUID) -> MemberAppVersion | None:
    row = latest_app_version(session, organization_id)
    return None if row is None or row.unpublished_at is not None else row


def live_markers(organization_id: ColumnElement[Any]) -> tuple[ScalarSelect, ScalarSelect]:
    """(live brand revision, live member-app version) of the organization in `organization_id`,
    as correlated subqueries a hot read embeds instead of two more round trips; None when the
    latest is unpublished or there is none (the rule of live_brand and live_app_version)."""
    brand = (
        select(case((BrandRevision.unpublished_at.is_(None), BrandRevision.revision)))
        .where(BrandRevision.organization_id == organization_id)
        .order_by(BrandRevision.revision.desc())
        .limit(1)
        .scalar_subquery()
    )
    app = (
        select(case((MemberAppVersion.unpublished_at.is_(None), MemberAppVersion.version)))
        .where(MemberAppVersion.organization_id == organization_id)
        .order_by(MemberAppVersion.version.desc())
        .limit(1)
        .scalar_subquery()
    )
    return brand, app


def public_branding(
    session: Session, organization_id: uuid.UUID, organization_name: str, schema: int
) -> dict[str, Any]:
    """status is published while a brand is live; version is the member app's live version
    (null when none); branding is the requested schema's projection (null when unpublished)."""
    app = live_app_version(session, organization_id)
    return branding_payload(
        live_brand(session, organization_id),
        app.version if app is not None else None,
        organization_name,
        schema,
    )


def public_branding_at(
    session: Session,
    organization_id: uuid.UUID,
    organization_name: str,
    schema: int,
    *,
    brand_revision: int | None,
    app_version: int | None,
) -> dict[str, Any]:
    """public_branding from markers already read (live_markers): one query when a brand is
    live, none otherwise."""
    row = (
        session.get(BrandRevision, (organization_id, brand_revision))
        if brand_revision is not None
        else None
    )
    brand = _published(organization_id, row) if row is not None else None
    return branding_payload(brand, app_version, organization_name, schema)


def branding_payload(
    brand: PublishedBrand | None, app_version: int | None, organization_name: str, schema: int
) -> dict[str, Any]:
    return {
        "schema": schema,
        "organizationName": organization_name,
        "status": "published" if brand is not None else "unpublished",
        "version": app_version,
        "brandRevision": brand.revision if brand is not None else None,
        "branding": brand.projection(schema) if brand is not None else None,
    }
