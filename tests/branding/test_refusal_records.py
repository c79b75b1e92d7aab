"""Spec A 6.2: "Refused writes appear as api.request_failed with the API code. Asset intake is
the one place a refusal is also captured: branding.asset_rejected" (source upload, library, or
stored). And a brand save keeps what it does not send (absent keeps, explicit null clears)."""

from __future__ import annotations

from sqlalchemy import select

from gymctl.models import BrandDraft, OutboxEvent, Role
from tests.access.conftest import snapshot
from tests.assets.test_routes import png, upload
from tests.branding.conftest import brand_asset, drafts

WORKSPACE = "/organizations/{}/brand-workspace"


def added_since(session, count):
    session.expire_all()
    return list(session.scalars(select(OutboxEvent).order_by(OutboxEvent.id)))[count:]


def outbox_count(session):
    return len(list(session.scalars(select(OutboxEvent.id))))


def state(session):
    """Everything but the outbox and the upload throttle's count (an attempt counts)."""
    return {
        k: v for k, v in snapshot(session).items() if k not in ("outbox_events", "rate_windows")
    }


def test_an_upload_refusal_records_asset_rejected_and_api_request_failed(client, gym, session):
    before, count = state(session), outbox_count(session)
    response = upload(client, gym, "logo", b"GIF89a-not-ours")
    assert (response.status_code, response.json["code"]) == (400, "brand_asset_source_format")
    added = added_since(session, count)
    assert [e.name for e in added] == ["branding.asset_rejected", "api.request_failed"]
    assert added[0].payload["source"] == "upload"
    assert added[1].payload["code"] == "brand_asset_source_format"
    assert state(session) == before


def test_an_unknown_slot_records_api_request_failed(client, gym, session):
    count = outbox_count(session)
    response = upload(client, gym, "banner", png())
    assert response.status_code == 404
    [failed] = added_since(session, count)
    assert (failed.name, failed.payload["code"]) == (
        "api.request_failed",
        "brand_asset_slot_unknown",
    )


def test_saving_a_foreign_key_records_asset_rejected_stored_and_api_request_failed(
    client, gym, session
):
    before, count = state(session), outbox_count(session)
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {"logo": "organizations/other/brand-assets/x.png"}},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (400, "brand_asset_not_owned")
    added = added_since(session, count)
    assert [e.name for e in added] == ["branding.asset_rejected", "api.request_failed"]
    assert {k: v for k, v in added[0].payload.items() if k != "actorUserId"} == {
        "asset": "logo",
        "source": "stored",
        "code": "brand_asset_not_owned",
        "format": None,
        "width": None,
        "height": None,
    }
    assert state(session) == before


def test_a_publish_refused_for_a_vanished_logo_records_asset_rejected_stored(
    client, gym, session, store
):
    logo = brand_asset(session, store, gym.id)
    drafts(session, store, gym.id, logos={"logo": str(logo.id)})
    store.delete(logo.key)
    count = outbox_count(session)
    response = client.post(
        WORKSPACE.format(gym.id) + "/brand/publish", headers=gym[Role.owner].headers
    )
    assert (response.status_code, response.json["code"]) == (400, "brand_asset_stored_invalid")
    added = added_since(session, count)
    assert [e.name for e in added] == ["branding.asset_rejected", "api.request_failed"]
    assert (added[0].payload["source"], added[0].payload["asset"]) == ("stored", "logo")


def test_saving_the_brand_without_logos_or_name_keeps_them(client, gym, session, store):
    logo = brand_asset(session, store, gym.id)
    drafts(session, store, gym.id, logos={"logo": str(logo.id)})
    response = client.put(
        WORKSPACE.format(gym.id) + "/brand",
        json={"palette": {"primaryColor": "#AA3300"}},
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json
    session.expire_all()
    draft = session.get(BrandDraft, gym.id)
    assert (draft.name, draft.logos) == ("Iron Temple", {"logo": logo.key})
    assert draft.palette["primaryColor"].upper() == "#AA3300"


def test_an_explicit_null_clears_the_brand_name_and_logos(client, gym, session, store):
    logo = brand_asset(session, store, gym.id)
    drafts(session, store, gym.id, logos={"logo": str(logo.id)})
    response = client.put(
        WORKSPACE.format(gym.id) + "/brand",
        json={"palette": {"primaryColor": "#AA3300"}, "name": None, "logos": None},
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 200, response.json
    session.expire_all()
    draft = session.get(BrandDraft, gym.id)
    assert (draft.name, draft.logos) == (None, {})
