"""Spec A 4 rule 10 for a stored key no object store can hold: "On save and publish every stored
asset is re-checked: a key outside the organization's prefix gives brand_asset_not_owned; a
missing or wrongly typed object gives brand_asset_stored_invalid."

A key under the gym's own prefix that the stores' rule (storage.validate_key) refuses names no
object we could have stored: it is missing, 400 brand_asset_stored_invalid, as a well-formed
missing key is, refused from its text before the store (or the database) is asked. Before,
the store's ValueError was a 500. Every door that reaches the re-check is taken over HTTP: the
assets save (a key from the caller), and the brand save, publish and restore and the member
app's publish and restore (keys from rows, planted here as legacy data would hold them)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.assets.intake import StoredAssetRefused, prefix
from gymctl.models import (
    BrandAsset,
    BrandDraft,
    BrandRevision,
    MemberAppDraftAsset,
    MemberAppVersion,
    OutboxEvent,
    Role,
)
from gymctl.releases.build_input import asset_digests
from tests.access.conftest import snapshot
from tests.branding.conftest import brand_asset, drafts
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # both engines

WORKSPACE = "/organizations/{}/brand-workspace"

TAILS = [
    pytest.param("a//b.png", id="empty-segment"),
    pytest.param("x\t.png", id="tab"),
    pytest.param("x" * 300 + ".png", id="segment-over-250-bytes"),
    pytest.param("./x.png", id="dot-segment"),
    pytest.param("a/\u2028.png", id="line-separator"),
]


@pytest.fixture(name="store")
def _store(app):
    """The app's object store."""
    return app.extensions["gymctl"].store


@pytest.fixture
def heads(monkeypatch, store):
    """The keys the object store is asked about."""
    asked: list[str] = []
    real = store.head

    def head(key):
        asked.append(key)
        return real(key)

    monkeypatch.setattr(store, "head", head)
    return asked


def state(session):
    """Every row but the outbox (a refusal records its events there) and the throttle's."""
    return {
        k: v for k, v in snapshot(session).items() if k not in ("outbox_events", "rate_windows")
    }


def rejected(session, count: int) -> list[tuple[str, str | None]]:
    session.expire_all()
    rows = list(session.scalars(select(OutboxEvent).order_by(OutboxEvent.id)))[count:]
    return [(row.name, row.payload.get("code")) for row in rows]


def outbox_count(session) -> int:
    return len(list(session.scalars(select(OutboxEvent.id))))


def refused(response) -> tuple[int, str | None]:
    return response.status_code, (response.get_json() or {}).get("code")


# --- PUT /branding/assets: the key comes from the caller ------------------------------------


@pytest.mark.parametrize("tail", TAILS)
def test_saving_an_unstorable_key_is_stored_invalid_before_the_store_is_asked(
    client, gym, session, heads, tail
):
    before, count = state(session), outbox_count(session)
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {"logo": prefix(gym.id) + tail}},
        headers=gym[Role.owner].headers,
    )
    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before
    assert rejected(session, count) == [
        ("branding.asset_rejected", "brand_asset_stored_invalid"),
        ("api.request_failed", "brand_asset_stored_invalid"),
    ]


def test_a_missing_well_formed_key_answers_the_same_code_after_the_store(
    client, gym, session, heads
):
    key = f"{prefix(gym.id)}{uuid.uuid4()}.png"
    before = state(session)
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {"logo": key}},
        headers=gym[Role.owner].headers,
    )
    assert refused(response) == (400, "brand_asset_stored_invalid")
    assert heads == [key]
    assert state(session) == before


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("organizations/other/brand-assets/a//b.png", id="foreign-and-unstorable"),
        pytest.param("{prefix}../{other}/brand-assets/x.png", id="traversal"),
    ],
)
def test_a_key_outside_the_prefix_stays_not_owned(client, gym, session, heads, key):
    key = key.format(prefix=prefix(gym.id), other=uuid.uuid4())
    before = state(session)
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {"logo": key}},
        headers=gym[Role.owner].headers,
    )
    assert refused(response) == (400, "brand_asset_not_owned")
    assert heads == []
    assert state(session) == before


def test_one_unstorable_key_refuses_the_whole_save(client, gym, session, store, heads):
    good = brand_asset(session, store, gym.id, slot="logo")
    session.commit()
    before = state(session)
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {"logo": good.key, "wordmark": prefix(gym.id) + "a//b.png"}},
        headers=gym[Role.owner].headers,
    )
    assert refused(response) == (400, "brand_asset_stored_invalid")
    assert state(session) == before
    assert session.scalars(select(MemberAppDraftAsset)).all() == []


# --- keys read from rows: the brand's and the member app's drafts and published versions -----


def _drafts(session, store, gym):
    """The gym's three drafts, a stored logo on the brand's."""
    logo = brand_asset(session, store, gym.id)
    drafts(session, store, gym.id, logos={"logo": str(logo.id)})
    return logo


def _post(client, gym, path: str, **kwargs):
    return client.post(WORKSPACE.format(gym.id) + path, headers=gym[Role.owner].headers, **kwargs)


def _plant_draft_logo(session, gym, key: str, heads: list[str]) -> None:
    session.get(BrandDraft, gym.id).logos = {"logo": key}
    session.commit()
    heads.clear()  # the setup's own checks


@pytest.mark.parametrize("tail", TAILS)
def test_publishing_a_brand_draft_holding_an_unstorable_key_is_refused(
    client,
    gym,
    session,
    store,
    heads,
    tail,
):
    _drafts(session, store, gym)
    _plant_draft_logo(session, gym, prefix(gym.id) + tail, heads)
    before = state(session)

    response = _post(client, gym, "/brand/publish")

    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before
    assert session.scalars(select(BrandRevision)).all() == []


def test_publishing_all_channels_stops_at_the_brand(client, gym, session, store, heads):
    _drafts(session, store, gym)
    _plant_draft_logo(session, gym, prefix(gym.id) + "a//b.png", heads)
    before = state(session)

    response = _post(client, gym, "/publish", json={})

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["completed"] is False
    assert [(r["channel"], r["result"], r.get("code")) for r in body["results"]] == [
        ("brand", "failed", "brand_asset_stored_invalid"),
        ("website", "skipped", None),
        ("app", "skipped", None),
    ]
    assert heads == []
    assert state(session) == before


@pytest.mark.parametrize("tail", TAILS)
def test_saving_the_brand_keeping_an_unstorable_logo_is_refused(
    client,
    gym,
    session,
    store,
    heads,
    tail,
):
    _drafts(session, store, gym)
    _plant_draft_logo(session, gym, prefix(gym.id) + tail, heads)
    before = state(session)

    response = client.put(
        WORKSPACE.format(gym.id) + "/brand",
        json={"palette": {"primaryColor": "#AA3300"}},
        headers=gym[Role.owner].headers,
    )

    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before


def test_restoring_a_brand_revision_holding_an_unstorable_key_is_refused(
    client,
    gym,
    session,
    store,
    heads,
):
    _drafts(session, store, gym)
    assert _post(client, gym, "/brand/publish").status_code == 200
    session.expire_all()
    session.get(BrandRevision, (gym.id, 1)).logos = {"logo": prefix(gym.id) + "x\t.png"}
    session.commit()
    heads.clear()
    before = state(session)

    response = _post(client, gym, "/brand/restore", json={})

    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before


def _unstorable_asset(session, gym, tail: str, *, slot: str = "icon") -> BrandAsset:
    """A stored asset's row whose key no store can hold (as legacy data might)."""
    asset = BrandAsset(
        organization_id=gym.id,
        slot=slot,
        key=prefix(gym.id) + tail,
        content_type="image/png",
        width=1024,
        height=1024,
        bytes=1,
        sha256="0" * 64,
        source="upload",
        report={},
        created_at=NOW,
    )
    session.add(asset)
    session.flush()
    return asset


@pytest.mark.parametrize("tail", TAILS)
def test_publishing_an_app_draft_slot_with_an_unstorable_key_is_refused(
    client,
    gym,
    session,
    store,
    heads,
    tail,
):
    _drafts(session, store, gym)
    assert _post(client, gym, "/brand/publish").status_code == 200
    session.expire_all()
    asset = _unstorable_asset(session, gym, tail)
    session.get(MemberAppDraftAsset, (gym.id, "icon")).asset_id = asset.id
    session.commit()
    heads.clear()
    before = state(session)

    response = _post(client, gym, "/app/publish")

    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before
    assert session.scalars(select(MemberAppVersion)).all() == []


def test_restoring_an_app_version_holding_an_unstorable_key_is_refused(
    client,
    gym,
    session,
    store,
    heads,
):
    _drafts(session, store, gym)
    assert _post(client, gym, "/brand/publish").status_code == 200
    assert _post(client, gym, "/app/publish").status_code == 200
    session.expire_all()
    version = session.get(MemberAppVersion, (gym.id, 1))
    version.assets = {"icon": {"key": prefix(gym.id) + "./x.png", "sha256": "0" * 64}}
    session.commit()
    heads.clear()
    before = state(session)

    response = _post(client, gym, "/app/restore", json={})

    assert refused(response) == (400, "brand_asset_stored_invalid"), response.get_json()
    assert heads == []
    assert state(session) == before


def test_the_build_inputs_digests_refuse_an_unstorable_key_unread(gym, store):
    class Unasked:
        def __getattr__(self, name):
            raise AssertionError(f"the store was asked ({name})")

    with pytest.raises(StoredAssetRefused) as refusal:
        asset_digests(Unasked(), gym.id, {"icon": {"key": prefix(gym.id) + "a//b.png"}})
    assert refusal.value.code == "brand_asset_stored_invalid"
