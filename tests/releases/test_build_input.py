"""Spec A 2.13: the administrator-only build input {app, brand, submission, assets,
assetDownloads}; digests from the stored objects; signed URLs short-lived and never stored."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import MemberAppVersion
from gymctl.models.organizations import Tier
from gymctl.releases import branded_apps
from gymctl.releases.build_input import build_input
from tests.access.conftest import snapshot
from tests.releases.conftest import publish_branding


def test_the_admin_route_serves_the_build_input(client, session, branded, gym, platform_admin):
    response = client.get(
        f"/admin/organizations/{gym.id}/releases/build-input", headers=platform_admin.headers
    )
    assert response.status_code == 200
    body = response.json
    assert set(body) == {"app", "brand", "submission", "assets", "assetDownloads"}
    assert body["app"]["appleBundleId"] == "com.gymctl.gym.iron-temple"
    assert body["app"]["androidPackage"] == "com.gymctl.gym.iron_temple"
    assert body["app"]["nativeVersion"] == "1.0.6"
    assert body["app"]["links"]["urlScheme"] == "gymctl-iron-temple"
    assert body["brand"]["schemaVersion"] == 2
    assert body["submission"] == {"intake": None, "revision": 0}
    assert set(body["assets"]) == {"icon", "logo"}
    assert body["brand"]["assets"] == {n: a["key"] for n, a in body["assets"].items()}


def test_owners_and_staff_never_reach_it(client, branded, gym):
    for role in gym.people:
        response = client.get(
            f"/admin/organizations/{gym.id}/releases/build-input", headers=gym[role].headers
        )
        assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")


def test_digests_are_computed_from_the_stored_objects(session, store, settings, branded, gym):
    data = build_input(session, store, settings, gym.id)
    for name, entry in data["assets"].items():
        assert entry["sha256"] == hashlib.sha256(store.get(entry["key"])).hexdigest(), name


def test_a_stored_object_that_changed_since_publish_is_refused(
    session, store, settings, branded, gym
):
    data = build_input(session, store, settings, gym.id)
    store.put(data["assets"]["logo"]["key"], b"\x89PNG tampered", content_type="image/png")
    with pytest.raises(DomainError) as refused:
        build_input(session, store, settings, gym.id)
    assert (refused.value.code, refused.value.status) == ("release_asset_digest_mismatch", 409)
    store.delete(data["assets"]["icon"]["key"])
    with pytest.raises(DomainError) as gone:
        build_input(session, store, settings, gym.id)
    assert (gone.value.code, gone.value.status) == ("release_asset_missing", 409)


def test_a_published_asset_that_is_gone_is_missing_not_invalid(
    client, session, store, branded, gym, platform_admin
):
    route = f"/admin/organizations/{gym.id}/releases/build-input"
    keys = client.get(route, headers=platform_admin.headers).json["brand"]["assets"]
    store.delete(keys["logo"])
    before = snapshot(session)
    gone = client.get(route, headers=platform_admin.headers)
    assert (gone.status_code, gone.json["code"], gone.json["asset"]) == (
        409,
        "release_asset_missing",
        "logo",
    )
    assert snapshot(session) == before
    # An object still there but no longer a PNG is what the publish recheck calls invalid.
    store.put(keys["logo"], b"GIF89a", content_type="image/gif")
    typed = client.get(route, headers=platform_admin.headers)
    assert (typed.status_code, typed.json["code"]) == (400, "brand_asset_stored_invalid")


def test_the_folder_stores_download_urls_are_signed_short_lived_and_never_stored(
    client, session, store, settings, branded, gym, clock
):
    data = build_input(session, store, settings, gym.id)
    url = data["assetDownloads"]["icon"]
    query = parse_qs(urlsplit(url).query)
    assert int(query["expires"][0]) - int(clock.now().timestamp()) == 15 * 60
    served = client.get(urlsplit(url).path + "?" + urlsplit(url).query)
    assert served.status_code == 200
    assert hashlib.sha256(served.data).hexdigest() == data["assets"]["icon"]["sha256"]
    tampered = client.get(urlsplit(url).path + "?expires=" + query["expires"][0] + "&signature=0")
    assert tampered.status_code == 403
    # Nothing stored anywhere holds the signature.
    stored = json.dumps(snapshot(session), default=str)
    assert query["signature"][0] not in stored


def test_on_s3_the_downloads_are_presigned_for_fifteen_minutes(session, settings, gym, s3_store):
    publish_branding(session, s3_store, gym.id)
    gym.organization.tier = Tier.elite
    branded_apps.create_app(
        session, settings, gym.organization, link_slug="iron-s3", now=gym.organization.created_at
    )
    data = build_input(session, s3_store, settings, gym.id)
    url = data["assetDownloads"]["logo"]
    assert parse_qs(urlsplit(url).query)["X-Amz-Expires"] == ["900"]
    fetched = httpx.get(url)
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == data["assets"]["logo"]["sha256"]
    version = session.scalar(select(MemberAppVersion))
    assert "X-Amz" not in json.dumps(version.assets)
