"""The quick start's demo brand: a palette, the member app's logo as the brand logo, a website
with two pricing cards, then a publishing run of all three channels. Skipped once published."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.branding import minisites, publishing, workspace
from gymctl.branding.published import live_brand
from gymctl.config import Settings
from gymctl.db import session_scope
from gymctl.models import BrandAsset, MemberAppDraftAsset
from gymctl.providers.storage import ObjectStore

DEMO_PALETTE = {"primaryColor": "#1C40A0", "secondaryColor": "#F6BE28"}
DEMO_CONTENT: dict[str, Any] = {
    "headline": "Strength for every body",
    "tagline": "Coached classes, open gym and a friendly crowd, seven days a week.",
    "about": "Demo Gym is a neighbourhood strength and conditioning gym.",
    "pricing": [
        {"name": "Open gym", "priceCents": 3900, "currency": "EUR", "interval": "month"},
        {
            "name": "Unlimited classes",
            "priceCents": 8900,
            "currency": "EUR",
            "interval": "month",
            "description": "Every coached class, open gym included.",
        },
    ],
    "contact": {"email": "hello@demo-gym.example", "address": "1 Example Street"},
}


def publish_demo_brand(
    session_factory: sessionmaker[Session],
    store: ObjectStore,
    settings: Settings,
    organization_id: uuid.UUID,
    slug: str,
    *,
    now: datetime,
) -> dict[str, Any] | None:
    with session_scope(session_factory) as session:
        if live_brand(session, organization_id) is not None:
            return None
        logo = session.scalar(
            select(BrandAsset)
            .join(MemberAppDraftAsset, MemberAppDraftAsset.asset_id == BrandAsset.id)
            .where(
                MemberAppDraftAsset.organization_id == organization_id,
                MemberAppDraftAsset.slot == "logo",
            )
        )
        workspace.save_brand_draft(
            session,
            store,
            organization_id,
            palette=DEMO_PALETTE,
            name="Demo Gym",
            logos={"logo": str(logo.id)} if logo else {},
            actor_user_id=None,
            now=now,
        )
        workspace.save_website_draft(
            session, organization_id, content=DEMO_CONTENT, actor_user_id=None, now=now
        )
        workspace.save_app_draft(session, organization_id, display_name="Demo Gym", now=now)
    results = publishing.publish_channels(
        session_factory, store, organization_id, workspace.CHANNELS, actor_user_id=None, now=now
    )
    return {
        "results": [r.as_json() for r in results],
        "minisiteUrl": minisites.minisite_url(settings, slug),
    }
