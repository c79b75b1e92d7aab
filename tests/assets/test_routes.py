"""The asset routes (spec A 4): every refusal through HTTP, and the draft unchanged after it."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from PIL import Image, ImageDraw
from sqlalchemy import func, select

from gymctl.models import BrandAsset, MemberAppDraftAsset, OutboxEvent, Role
from tests.access.conftest import snapshot
from tests.assets import corpus
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def png(size=(800, 400), *, transparent=True) -> bytes:
    image = Image.new(
        "RGBA" if transparent else "RGB", size, (0, 0, 0, 0) if transparent else (255, 255, 255)
    )
    margin = min(size) // 4
    ImageDraw.Draw(image).rectangle(
        (margin, margin, size[0] - margin, size[1] - margin), fill=(10, 80, 200)
    )
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def jpeg(size=(1200, 600)) -> bytes:
    image = Image.new("RGB", size, (245, 245, 245))
    ImageDraw.Draw(image).ellipse((200, 100, size[0] - 200, size[1] - 100), fill=(20, 40, 90))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=92)
    return out.getvalue()


def upload(client, gym, slot, data, *, transform=None, by=Role.owner, filename="a.png"):
    form = {"file": (io.BytesIO(data), filename)}
    if transform is not None:
        form["transform"] = json.dumps(transform) if not isinstance(transform, str) else transform
    return client.post(
        f"/organizations/{gym.id}/branding/assets/{slot}",
        data=form,
        headers=gym[by].headers,
        content_type="multipart/form-data",
    )


def state(session):
    """Everything but the outbox (a refused upload adds its analytics records there)."""
    return {k: v for k, v in snapshot(session).items() if k != "outbox_events"}


def added_events(session, since: int) -> list[tuple[str, object]]:
    rows = session.scalars(
        select(OutboxEvent).where(OutboxEvent.id > since).order_by(OutboxEvent.id)
    )
    return [(e.name, e.payload.get("code")) for e in rows]


def last_event_id(session) -> int:
    return session.scalar(select(func.coalesce(func.max(OutboxEvent.id), 0)))


def draft_rows(session):
    return session.scalars(select(MemberAppDraftAsset)).all()


def test_upload_stores_a_new_key_and_points_the_draft_at_it(client, gym, session):
    first = upload(client, gym, "logo", png())
    assert first.status_code == 201, first.json
    assert first.json["key"].startswith(f"organizations/{gym.id}/brand-assets/")
    second = upload(client, gym, "logo", png())
    assert second.json["key"] != first.json["key"]  # every stored slot is a new immutable key
    [row] = draft_rows(session)
    assert str(row.asset_id) == second.json["id"]
    event = session.scalars(
        select(OutboxEvent).where(OutboxEvent.name == "branding.asset_normalized")
    ).first()
    assert set(event.payload) >= {"asset", "passthrough", "durationMs", "bytes"}
    assert "a.png" not in json.dumps(event.payload)


def test_the_preview_url_is_signed_fresh_and_serves_the_png(client, gym, clock):
    created = upload(client, gym, "wordmark", png()).json
    preview = created["previewUrl"]
    path = preview.split("/storage/", 1)[1]
    fetched = client.get(f"/storage/{path}")
    assert (fetched.status_code, fetched.mimetype) == (200, "image/png")
    clock.set(NOW + timedelta(hours=1, seconds=1))
    expired = client.get(f"/storage/{path}")
    assert (expired.status_code, expired.json["code"]) == (403, "storage_signature_invalid")
    key, query = path.split("?", 1)
    huge = client.get(f"/storage/{key}?expires={'9' * 4301}&{query.split('&', 1)[1]}")
    assert (huge.status_code, huge.json["code"]) == (403, "storage_signature_invalid")  # was 500
    clock.set(NOW + timedelta(seconds=30))  # the session token lives 60 s
    later = client.get(f"/organizations/{gym.id}/branding/assets", headers=gym[Role.coach].headers)
    assert later.status_code == 403  # coaches do not see branding
    again = client.get(f"/organizations/{gym.id}/branding/assets", headers=gym[Role.admin].headers)
    assert again.json["assets"]["wordmark"]["previewUrl"] != preview


@pytest.mark.parametrize(
    ("slot", "data", "transform", "code"),
    [
        ("logo", b"GIF89a\x01\x00\x01\x00", None, "brand_asset_source_format"),
        ("logo", b"<svg xmlns='http://www.w3.org/2000/svg'/>", None, "brand_asset_source_format"),
        ("icon", jpeg((1023, 1023)), None, "brand_icon_source_small"),
        ("icon", jpeg((1200, 1203)), None, "brand_icon_dimensions"),
        (
            "logo",
            png(),
            {"crop": {"x": 5000, "y": 0, "width": 10, "height": 10}},
            "brand_asset_crop",
        ),
        ("logo", png(), "{not json", "brand_asset_crop"),
        pytest.param("logo", png(), "[" * 100_000, "brand_asset_crop", id="100k-brackets"),
        pytest.param(
            "logo",
            png(),
            '{"crop": ' + '{"x": ' * 5_000 + "0" + "}" * 5_001,
            "brand_asset_crop",
            id="crop-5000-deep",
        ),
        ("logo", jpeg(), {"removeBackground": False}, "brand_logo_transparent"),
        ("logo", png((40, 40)), None, "brand_asset_dimensions"),
        ("icon", png((1024, 1024)), None, "brand_icon_opaque"),
    ],
)
def test_every_refusal_is_400_with_its_code_and_the_draft_is_unchanged(
    client, gym, session, slot, data, transform, code
):
    upload(client, gym, slot, png((1024, 1024), transparent=False) if slot == "icon" else png())
    before = snapshot(session)
    response = upload(client, gym, slot, data, transform=transform)
    assert (response.status_code, response.json["code"]) == (400, code)
    after = snapshot(session)
    assert after["member_app_draft_assets"] == before["member_app_draft_assets"]
    assert after["brand_assets"] == before["brand_assets"]
    rejected = session.scalars(
        select(OutboxEvent).where(OutboxEvent.name == "branding.asset_rejected")
    ).all()
    assert [e.payload["code"] for e in rejected] == [code]


def test_a_malformed_body_is_brand_asset_multipart(client, gym, session):
    url = f"/organizations/{gym.id}/branding/assets/logo"
    assert upload(client, gym, "logo", png()).status_code == 201
    before, mark = state(session), last_event_id(session)
    plain = client.post(
        url, data=png(), headers={**gym[Role.owner].headers, "Content-Type": "image/png"}
    )
    assert (plain.status_code, plain.json["code"]) == (400, "brand_asset_multipart")
    two = client.post(
        url,
        data={"file": (io.BytesIO(png()), "a.png"), "other": (io.BytesIO(png()), "b.png")},
        headers=gym[Role.owner].headers,
        content_type="multipart/form-data",
    )
    assert (two.status_code, two.json["code"]) == (400, "brand_asset_multipart")
    assert state(session) == before
    refusal = [
        ("branding.asset_rejected", "brand_asset_multipart"),
        ("api.request_failed", "brand_asset_multipart"),
    ]
    assert added_events(session, mark) == refusal * 2


def test_an_oversized_body_is_refused_while_streaming(
    settings, session_factory, session, clock, gym
):
    from webhooks.app import create_app

    settings.max_brand_asset_bytes = 10_000
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    assert upload(client, gym, "logo", png()).status_code == 201
    before, mark = state(session), last_event_id(session)
    response = upload(client, gym, "logo", png((2000, 2000)) + b"\0" * 200_000)
    assert (response.status_code, response.json["code"]) == (400, "brand_asset_size")
    assert state(session) == before
    assert added_events(session, mark) == [
        ("branding.asset_rejected", "brand_asset_size"),
        ("api.request_failed", "brand_asset_size"),
    ]


def test_unknown_slot_is_404(client, gym):
    response = upload(client, gym, "banner", png())
    assert (response.status_code, response.json["code"]) == (404, "brand_asset_slot_unknown")


def test_uploads_are_limited_to_20_per_minute_per_route(client, gym, clock):
    for _ in range(20):
        assert upload(client, gym, "logo", b"GIF89a").status_code == 400
    limited = upload(client, gym, "logo", png())
    assert (limited.status_code, limited.json["code"]) == (429, "rate_limited")
    clock.set(NOW + timedelta(seconds=61))
    assert upload(client, gym, "logo", png()).status_code == 201


def test_a_library_asset_reused_in_a_native_slot_goes_through_the_same_path(client, gym, session):
    logo = upload(client, gym, "logo", png((1100, 1100))).json
    reused = client.post(
        f"/organizations/{gym.id}/brand-assets/{logo['id']}/native/wordmark",
        headers=gym[Role.owner].headers,
    )
    assert reused.status_code == 201
    assert reused.json["key"] != logo["key"]
    icon = client.post(
        f"/organizations/{gym.id}/brand-assets/{logo['id']}/native/icon",
        headers=gym[Role.owner].headers,
    )
    assert (icon.status_code, icon.json["code"]) == (400, "brand_icon_opaque")


def test_saving_rechecks_every_stored_asset(client, gym, session, app):
    logo = upload(client, gym, "logo", png()).json
    url = f"/organizations/{gym.id}/branding/assets"
    headers = gym[Role.owner].headers
    foreign = client.put(
        url, json={"assets": {"logo": "organizations/other/brand-assets/x.png"}}, headers=headers
    )
    assert (foreign.status_code, foreign.json["code"]) == (400, "brand_asset_not_owned")
    missing = f"organizations/{gym.id}/brand-assets/missing.png"
    gone = client.put(url, json={"assets": {"logo": missing}}, headers=headers)
    assert (gone.status_code, gone.json["code"]) == (400, "brand_asset_stored_invalid")
    store = app.extensions["gymctl"].store
    store.put(f"organizations/{gym.id}/brand-assets/text.png", b"hi", content_type="text/plain")
    typed = client.put(
        url,
        json={"assets": {"logo": f"organizations/{gym.id}/brand-assets/text.png"}},
        headers=headers,
    )
    assert (typed.status_code, typed.json["code"]) == (400, "brand_asset_stored_invalid")
    saved = client.put(url, json={"assets": {"wordmark": logo["key"]}}, headers=headers)
    assert saved.json["assets"]["wordmark"]["key"] == logo["key"]
    assert session.scalar(select(func.count()).select_from(BrandAsset)) == 1


@pytest.mark.parametrize(
    ("data", "transform", "code"),
    [
        (corpus.png_bomb(), None, "brand_asset_source_too_large"),
        (corpus.uneven_corners_png(), {"removeBackground": True}, "brand_asset_background_uneven"),
        (corpus.flat_jpeg(), {"removeBackground": True}, "brand_asset_empty"),
        (corpus.truncated(corpus.noisy_jpeg()), None, "brand_asset_source_format"),
        (corpus.apng(), None, "brand_asset_source_format"),
    ],
)
def test_the_other_refusals_through_http_leave_the_draft_unchanged(
    client, gym, session, data, transform, code
):
    upload(client, gym, "logo", png())
    before = snapshot(session)
    response = upload(client, gym, "logo", data, transform=transform)
    assert (response.status_code, response.json["code"]) == (400, code)
    after = snapshot(session)
    assert after["member_app_draft_assets"] == before["member_app_draft_assets"]
    assert after["brand_assets"] == before["brand_assets"]


def test_output_still_too_large_through_http(settings, session_factory, clock, gym, session):
    from webhooks.app import create_app

    data = corpus.noisy_jpeg(2400, 800, 16, 40)
    settings.max_brand_asset_bytes = len(data) + 1  # the source fits; its PNG cannot
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    response = upload(client, gym, "logo", data, transform={"removeBackground": True})
    assert (response.status_code, response.json["code"]) == (400, "brand_asset_output_too_large")
    assert session.scalar(select(func.count()).select_from(BrandAsset)) == 0
