"""The gym with one person per role (shared with the access tests), its object store, and
small factories for the three channels' drafts."""

from __future__ import annotations

import io
import uuid

import pytest
from PIL import Image, ImageDraw
from sqlalchemy import select

from gymctl.assets.intake import PNG, prefix
from gymctl.branding import workspace
from gymctl.models import BrandAsset, MemberAppDraftAsset, OutboxEvent
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.conftest import NOW

CONTENT = {
    "headline": "Lift together",
    "tagline": "Coached strength classes",
    "about": "A friendly gym.",
    "pricing": [
        {"name": "Open gym", "priceCents": 3900, "currency": "EUR", "interval": "month"},
        {
            "name": "Unlimited",
            "priceCents": 8900,
            "currency": "EUR",
            "description": "Every class",
            "planId": "6f1c2a4e-6a3c-4a8e-9d2b-3f5e7c9a1b20",
        },
    ],
    "contact": {"email": "hello@iron.example", "phone": "+31 20 123 4567"},
}


@pytest.fixture
def store(app):
    return app.extensions["gymctl"].store


def logo_png() -> bytes:
    image = Image.new("RGBA", (256, 128), (0, 0, 0, 0))
    ImageDraw.Draw(image).rectangle((32, 32, 224, 96), fill=(20, 60, 160, 255))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def brand_asset(session, store, organization_id, *, slot="logo", content_type=PNG) -> BrandAsset:
    """A stored library image (as the intake would leave it)."""
    data = logo_png()
    key = f"{prefix(organization_id)}{uuid.uuid4()}.png"
    store.put(key, data, content_type=content_type)
    asset = BrandAsset(
        organization_id=organization_id,
        slot=slot,
        key=key,
        content_type=PNG,
        width=256,
        height=128,
        bytes=len(data),
        sha256="0" * 64,
        source="upload",
        report={},
        created_at=NOW,
    )
    session.add(asset)
    session.flush()
    return asset


def app_slot(session, store, organization_id, *, slot="icon", at=NOW) -> BrandAsset:
    """The member app's draft slot pointing at a stored asset."""
    asset = brand_asset(session, store, organization_id, slot=slot)
    session.add(
        MemberAppDraftAsset(
            organization_id=organization_id, slot=slot, asset_id=asset.id, updated_at=at
        )
    )
    session.flush()
    return asset


def drafts(session, store, organization_id, *, palette=None, logos=None, at=NOW):
    """A brand draft, website content and a member app draft with one slot."""
    workspace.save_brand_draft(
        session,
        store,
        organization_id,
        palette=palette or {"primaryColor": "#1C40A0"},
        name="Iron Temple",
        logos=logos or {},
        actor_user_id=None,
        now=at,
    )
    workspace.save_website_draft(
        session, organization_id, content=CONTENT, actor_user_id=None, now=at
    )
    app_slot(session, store, organization_id, at=at)
    workspace.save_app_draft(session, organization_id, display_name="Iron", now=at)
    session.commit()


def event_names(session, organization_id=None) -> list[str]:
    query = select(OutboxEvent.name).order_by(OutboxEvent.id)
    if organization_id is not None:
        query = query.where(OutboxEvent.organization_id == organization_id)
    return list(session.scalars(query))


def events(session, name) -> list[OutboxEvent]:
    return list(session.scalars(select(OutboxEvent).where(OutboxEvent.name == name)))
