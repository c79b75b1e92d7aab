"""A gym with one person per role, a published brand and member app whose images are really
stored, a dedicated app mapped, configured and enabled, and a release request; plus the CI
provider's stand-in (its own RSA key and a JWKS on loopback)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import uuid
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from PIL import Image

from gymctl.assets.intake import PNG, prefix
from gymctl.branding import publishing, workspace
from gymctl.models import BrandAsset, MemberAppDraftAsset
from gymctl.models.organizations import Tier
from gymctl.releases import branded_apps, requests
from tests.access.conftest import gym, outsider, platform_admin  # noqa: F401 (fixtures)
from tests.conftest import NOW
from tests.idp import SigningKey
from tests.providers.test_storage import s3_endpoint, s3_store  # noqa: F401 (fixtures)

CI_ISSUER = "https://token.actions.example.test"
REPOSITORY = "acme/gym-apps"
WORKFLOW_REF = "acme/gym-apps/.github/workflows/branded-app.yml@refs/heads/main"
APPLE_TEAM = "AB12CD34EF"
CERT = ":".join(["A1"] * 32)
APP_CONFIG = {
    "appleTeamId": APPLE_TEAM,
    "androidCertSha256": [CERT],
    "buildServiceProject": "bsp-7f3a9c",
    "iosProfile": "ios-appstore-prof-991",
    "androidProfile": "android-play-prof-992",
    "appleStoreAccount": "apple-acct-553311",
    "googleStoreAccount": "play-acct-884422",
    "pushCredentialSha256": hashlib.sha256(b"apns-key").hexdigest(),
}
COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"


class CiProvider:
    """The CI provider's OIDC side: mints workflow tokens and serves its public JWKS (no auth,
    like the real one) on loopback."""

    def __init__(self) -> None:
        self.key = SigningKey("ci-kid-1", name="ci-provider")
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = json.dumps({"keys": [provider.key.jwk()]}).encode()
                self.send_response(200 if self.path == "/.well-known/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks"

    def claims(self, now: datetime, **overrides: Any) -> dict[str, Any]:
        claims = {
            "iss": CI_ISSUER,
            "aud": "gymctl-releases",
            "sub": "repo:acme/gym-apps:environment:branded-app-internal",
            "repository": REPOSITORY,
            "repository_id": "123456789",
            "repository_owner": "acme",
            "workflow": "Branded app",
            "workflow_ref": WORKFLOW_REF,
            "job_workflow_ref": WORKFLOW_REF,
            "ref": "refs/heads/main",
            "event_name": "workflow_dispatch",
            "environment": "branded-app-internal",
            "iat": int(now.timestamp()),
            "nbf": int(now.timestamp()),
            "exp": int((now + timedelta(minutes=5)).timestamp()),
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, now: datetime, *, key: SigningKey | None = None, **overrides: Any) -> str:
        key = key or self.key
        return jwt.encode(
            self.claims(now, **overrides), key.private, algorithm="RS256", headers={"kid": key.kid}
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def ci():
    provider = CiProvider()
    yield provider
    provider.close()


@pytest.fixture
def settings(settings, ci, tmp_path):
    """The suite's settings with a home of the test's own and the CI provider's identity."""
    return settings.model_copy(
        update={
            "home": tmp_path / "home",
            "release_ci_issuer": CI_ISSUER,
            "release_ci_jwks_url": ci.jwks_url,
            "release_ci_repository": REPOSITORY,
            "release_ci_repository_id": "123456789",
            "release_ci_workflow": "Branded app",
            "release_ci_workflow_ref": WORKFLOW_REF,
        }
    )


@pytest.fixture
def store(app):
    return app.extensions["gymctl"].store


def png(size: tuple[int, int], *, opaque: bool) -> bytes:
    image = Image.new("RGBA", size, (20, 60, 160, 255 if opaque else 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def stored_asset(session, store, organization_id, slot: str) -> BrandAsset:
    """An image stored as the intake leaves it, with its true digest."""
    data = png((1024, 1024) if slot == "icon" else (256, 128), opaque=slot == "icon")
    key = f"{prefix(organization_id)}{uuid.uuid4()}.png"
    store.put(key, data, content_type=PNG)
    asset = BrandAsset(
        organization_id=organization_id,
        slot=slot,
        key=key,
        content_type=PNG,
        width=1024,
        height=1024,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        source="upload",
        report={},
        created_at=NOW,
    )
    session.add(asset)
    session.flush()
    return asset


def draft_app_images(session, store, organization_id, *, at=NOW) -> None:
    """The member app's draft icon and logo, each a stored image."""
    for slot in ("icon", "logo"):
        asset = stored_asset(session, store, organization_id, slot)
        row = session.get(MemberAppDraftAsset, (organization_id, slot))
        if row is None:
            session.add(
                MemberAppDraftAsset(
                    organization_id=organization_id, slot=slot, asset_id=asset.id, updated_at=at
                )
            )
        else:
            row.asset_id, row.updated_at = asset.id, at


def publish_branding(session, store, organization_id, *, primary="#1C40A0", at=NOW) -> None:
    """Brand and member app published, with icon and logo slots."""
    workspace.save_brand_draft(
        session,
        store,
        organization_id,
        palette={"primaryColor": primary},
        name="Iron Temple",
        logos={},
        actor_user_id=None,
        now=at,
    )
    draft_app_images(session, store, organization_id, at=at)
    workspace.save_app_draft(session, organization_id, display_name="Iron", now=at)
    publishing.publish_brand(session, store, organization_id, actor_user_id=None, now=at)
    publishing.publish_app(session, store, organization_id, actor_user_id=None, now=at)
    session.flush()


@pytest.fixture
def branded(session, store, settings, gym):  # noqa: F811
    """The gym published, its app mapped (link slug iron-temple), configured and enabled."""
    publish_branding(session, store, gym.id)
    gym.organization.slug = "iron-temple"
    gym.organization.tier = Tier.elite  # a dedicated app is the top tier's
    app = branded_apps.create_app(session, settings, gym.organization, now=NOW)
    branded_apps.configure(session, gym.id, APP_CONFIG, now=NOW)
    branded_apps.set_enabled(session, gym.id, True, now=NOW)
    requests.open_request(session, gym.id, now=NOW)
    session.commit()
    return app


SUBMISSION = {
    "appName": "Iron Temple",
    "description": "Book classes at Iron Temple.",
    "supportUrl": "https://iron.example/support",
    "contactEmail": "owner@iron.example",
}
