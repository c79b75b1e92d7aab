"""preview_not_configured (503): a production deployment without MINISITE_PREVIEW_SERVER_SECRET
(spec A 6: the API and the renderer must share it; production makes none of its own, unlike
development's secret under GYMCTL_HOME). Both doors that need the secret refuse with the code,
change nothing and write no secret: the dashboard's ticket (POST .../brand-workspace/
preview-ticket) and the framed preview (POST {minisite}/preview). Kept beside the asset tests:
the preview shows the draft's assets."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from gymctl.branding import minisites, publishing
from gymctl.config import Settings
from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.billing.factories import TEST_KEY
from tests.branding.conftest import drafts, store  # noqa: F401 (fixture)
from tests.conftest import NOW
from webhooks.app import create_app

pytestmark = pytest.mark.embedded  # both engines


@pytest.fixture
def site(session, session_factory, store, gym):  # noqa: F811 (fixture)
    """The gym's brand and website published (as tests/branding/test_minisites.py makes it)."""
    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0"})
    results = publishing.publish_channels(
        session_factory, store, gym.id, ["brand", "website"], actor_user_id=None, now=NOW
    )
    assert [r.result for r in results] == ["verified", "verified"]
    return gym


@pytest.fixture
def production(settings, idp, tmp_path) -> Settings:
    """A production deployment that passes the start check, with no preview secret set."""
    production = Settings(
        GYMCTL_ENV="production",
        GYMCTL_HOME=str(tmp_path / "home"),
        GYMCTL_DATABASE_URL="postgresql+psycopg://unused@127.0.0.1/none",
        IDENTITY_JWT_KEY=settings.identity_jwt_key.get_secret_value(),
        IDENTITY_API_URL=idp.url,
        IDENTITY_WEBHOOK_SECRET="whsec_c2VjcmV0",
        IDENTITY_PUBLISHABLE_KEY="pk_live_Y2xlcmsuZ3ltLmV4YW1wbGUk",  # clerk.gym.example$
        INVITE_SECRET="i" * 40,
        GYMCTL_BILLING_ENCRYPTION_KEY=TEST_KEY,
        GYMCTL_SMTP_URL="smtp://127.0.0.1:2525",
        GYMCTL_CARD_PROVIDER_URL="http://127.0.0.1:9/api",
        GYMCTL_STORAGE_SIGNING_SECRET="s" * 40,
        FRONTEND_URL="https://app.example.test",
    )
    assert production.minisite_preview_server_secret is None
    production.check()  # it starts: the secret is not a start requirement
    return production


@pytest.fixture
def live(production, session_factory, clock, store):  # noqa: F811 (fixture)
    return create_app(production, session_factory=session_factory, clock=clock, store=store)


def refused(response) -> None:
    assert (response.status_code, response.json["code"]) == (503, "preview_not_configured")
    assert "MINISITE_PREVIEW_SERVER_SECRET" in response.json["message"]


def test_the_dashboards_ticket_is_503_and_changes_nothing(live, session, site, production):
    before = snapshot(session)
    response = live.test_client().post(
        f"/organizations/{site.id}/brand-workspace/preview-ticket",
        headers=site[Role.owner].headers,
    )
    refused(response)
    assert "ticket" not in response.json
    assert snapshot(session) == before
    assert not (production.home / "secrets").exists()  # production writes no secret of its own


def test_the_framed_preview_is_503_and_changes_nothing(
    live, session, site, production, library_ticket
):
    before = snapshot(session)
    response = live.test_client().post(
        f"/sites/{site.organization.slug}/preview", data={"ticket": library_ticket}
    )
    refused(response)
    assert snapshot(session) == before
    assert not (production.home / "secrets").exists()


@pytest.fixture
def library_ticket(settings, site) -> str:
    """A well-formed ticket (minted where a secret is set): the refusal is about the missing
    secret, not the ticket."""
    configured = SecretStr("preview-secret-0123456789abcdef0123456789")
    development = settings.model_copy(update={"minisite_preview_server_secret": configured})
    return minisites.mint_preview_ticket(development, site.organization, now=NOW)["ticket"]
