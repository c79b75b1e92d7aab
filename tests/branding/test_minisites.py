"""Minisites (spec A 2.9, 4, 8): resolve, the join URL's only source, the page and its contact
fallback, the 30-minute visual snapshot and its authoritative negatives, and the preview."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.access.join import create_join_link
from gymctl.branding import minisites, publishing
from gymctl.config import Settings
from gymctl.models import OrganizationStatus, Role, Website, WebsiteRevision
from gymctl.models.billing import PlanType
from tests.access.conftest import snapshot
from tests.billing.factories import make_plan
from tests.branding.conftest import CONTENT, drafts
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def site(session, session_factory, store, gym):
    """The gym's brand and website published."""
    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0"})
    results = publishing.publish_channels(
        session_factory, store, gym.id, ["brand", "website"], actor_user_id=None, now=NOW
    )
    assert [r.result for r in results] == ["verified", "verified"]
    return gym


def host(gym) -> str:
    return f"{gym.organization.slug}.sites.localhost"


def resolve(client, gym, **query):
    return client.get("/minisites/resolve", query_string={"host": host(gym), **query})


def test_resolve_answers_the_published_palette_and_content(client, site):
    response = resolve(client, site)
    assert response.status_code == 200, response.json
    body = response.json
    assert body["appearance"]["palette"]["primaryColor"] == "#1C40A0"
    assert body["appearance"]["brand"]["schemaVersion"] == 2
    assert body["content"]["headline"] == CONTENT["headline"]
    assert body["platformData"]["minisiteUrl"].endswith(f"/sites/{site.organization.slug}")


def test_a_host_with_a_port_or_trailing_dot_resolves(client, site):
    for name in (host(site) + ":443", host(site).upper() + "."):
        assert client.get("/minisites/resolve", query_string={"host": name}).status_code == 200


@pytest.mark.parametrize("name", ["elsewhere.example", "a.b.sites.localhost", "sites.localhost"])
def test_unknown_hosts_are_404(client, site, name):
    response = client.get("/minisites/resolve", query_string={"host": name})
    assert (response.status_code, response.json["code"]) == (404, "minisite_not_found")


def test_resolve_needs_a_host(client):
    response = client.get("/minisites/resolve")
    assert (response.status_code, response.json["code"]) == (400, "host_required")


def test_join_url_only_from_an_active_unrevoked_link_without_a_plan(client, session, site):
    """Spec A 2.9: a stored plan would override the plan chosen on a pricing card."""
    org = site.organization
    owner = site[Role.owner].user.id
    plan = make_plan(session, org, PlanType.card)
    create_join_link(session, org.id, actor_user_id=owner, label=None, plan_id=plan.id, now=NOW)
    revoked = create_join_link(
        session, org.id, actor_user_id=owner, label=None, plan_id=None, now=NOW
    )
    revoked.revoked_at = NOW
    inactive = create_join_link(
        session, org.id, actor_user_id=owner, label=None, plan_id=None, now=NOW
    )
    inactive.active = False
    session.commit()
    assert "joinUrl" not in resolve(client, site).json["platformData"]
    eligible = create_join_link(
        session, org.id, actor_user_id=owner, label=None, plan_id=None, now=NOW
    )
    session.commit()
    join_url = resolve(client, site).json["platformData"]["joinUrl"]
    assert join_url == f"https://app.example.test/join/{eligible.token}"


def test_the_page_falls_back_to_a_contact_action_without_a_join_url(client, site):
    page = client.get(f"/sites/{site.organization.slug}")
    assert (page.status_code, page.mimetype) == (200, "text/html")
    html = page.get_data(as_text=True)
    assert "--primary: #1C40A0;" in html
    assert html.count('href="mailto:hello@iron.example">Contact us') == 2
    assert "/join/" not in html


def test_the_pricing_cards_join_with_their_plan(client, session, site):
    link = create_join_link(
        session, site.id, actor_user_id=site[Role.owner].user.id, label=None, plan_id=None, now=NOW
    )
    session.commit()
    html = client.get(f"/sites/{site.organization.slug}").get_data(as_text=True)
    plan = CONTENT["pricing"][1]["planId"]
    assert f'href="https://app.example.test/join/{link.token}?plan={plan}">Join' in html
    assert "Contact us" not in html


def test_the_visual_snapshot_is_kept_30_minutes(client, session, site, clock):
    first = resolve(client, site).json
    revision = session.get(WebsiteRevision, (site.id, first["contentRevision"]))
    revision.content = {**revision.content, "headline": "Changed behind the cache"}
    session.commit()
    clock.set(NOW + timedelta(minutes=29))
    assert resolve(client, site).json["content"]["headline"] == CONTENT["headline"]
    clock.set(NOW + timedelta(minutes=30))
    assert resolve(client, site).json["content"]["headline"] == "Changed behind the cache"


def test_the_join_url_is_never_cached(client, session, site):
    assert "joinUrl" not in resolve(client, site).json["platformData"]
    create_join_link(
        session, site.id, actor_user_id=site[Role.owner].user.id, label=None, plan_id=None, now=NOW
    )
    session.commit()
    assert "joinUrl" in resolve(client, site).json["platformData"]


def _cached(site) -> bool:
    return any(key[0] == site.id for key in minisites.snapshots._entries)


@pytest.mark.parametrize(
    ("negative", "code"),
    [
        ("website_unpublished", "minisite_unpublished"),
        ("brand_unpublished", "minisite_unpublished"),
        ("disabled", "minisite_disabled"),
        ("deleted", "minisite_not_found"),
    ],
)
def test_authoritative_negatives_bypass_and_clear_the_cache(client, session, site, negative, code):
    assert resolve(client, site).status_code == 200
    assert _cached(site)
    if negative == "website_unpublished":
        website = session.get(Website, site.id)
        website.published_content_revision = None  # as another process would have done
    elif negative == "brand_unpublished":
        publishing.unpublish_brand(session, site.id, actor_user_id=None, now=NOW)
    elif negative == "disabled":
        site.organization.status = OrganizationStatus.inactive
    else:
        site.organization.deleted_at = NOW
    session.commit()
    response = resolve(client, site)
    assert (response.status_code, response.json["code"]) == (404, code)
    assert not _cached(site)
    page = client.get(f"/sites/{site.organization.slug}")
    assert (page.status_code, page.json["code"]) == (404, code)


def test_an_unpublished_website_is_404_from_the_start(client, session, store, gym):
    drafts(session, store, gym.id)
    response = resolve(client, gym)
    assert (response.status_code, response.json["code"]) == (404, "minisite_unpublished")


# --- preview -------------------------------------------------------------------------------


def _ticket(client, gym) -> str:
    return client.post(
        f"/organizations/{gym.id}/brand-workspace/preview-ticket", headers=gym[Role.owner].headers
    ).json["ticket"]


def test_preview_renders_the_draft_framed_by_the_dashboard_origin(client, session, site):
    session.add(
        WebsiteRevision(
            organization_id=site.id,
            revision=2,
            content={**CONTENT, "headline": "Draft headline"},
            created_at=NOW,
        )
    )
    session.get(Website, site.id).draft_revision = 2
    session.commit()
    slug = site.organization.slug
    response = client.post(f"/sites/{slug}/preview", data={"ticket": _ticket(client, site)})
    assert response.status_code == 200
    assert "Draft headline" in response.get_data(as_text=True)
    assert response.headers["Content-Security-Policy"] == "frame-ancestors https://app.example.test"
    assert response.headers["Cache-Control"] == "no-store"
    assert "Draft headline" not in client.get(f"/sites/{slug}").get_data(as_text=True)


def test_preview_get_is_405(client, site):
    response = client.get(f"/sites/{site.organization.slug}/preview")
    assert response.status_code == 405
    assert "POST" in response.headers["Allow"]


def test_preview_without_a_minted_origin_is_503(client, session, site):
    """FRONTEND_URL unset when the ticket was minted: studio.previewOriginMissing."""
    without = Settings(GYMCTL_ENV="test")
    minted = minisites.mint_preview_ticket(without, site.organization, now=NOW)
    assert minted["origin"] is None
    before = snapshot(session)
    response = client.post(
        f"/sites/{site.organization.slug}/preview", data={"ticket": minted["ticket"]}
    )
    assert (response.status_code, response.json["code"]) == (503, "studio.previewOriginMissing")
    assert snapshot(session) == before


@pytest.mark.parametrize("ticket", ["", "not-a-ticket"])
def test_preview_refuses_a_missing_or_forged_ticket(client, site, ticket):
    response = client.post(f"/sites/{site.organization.slug}/preview", data={"ticket": ticket})
    assert (response.status_code, response.json["code"]) == (403, "preview_ticket_invalid")


def test_preview_refuses_another_gyms_ticket(client, session, site):
    from tests import factories

    other = factories.organization(session)
    session.commit()
    ticket = minisites.mint_preview_ticket(
        Settings(GYMCTL_ENV="test", FRONTEND_URL="https://app.example.test"), other, now=NOW
    )["ticket"]
    response = client.post(f"/sites/{site.organization.slug}/preview", data={"ticket": ticket})
    assert (response.status_code, response.json["code"]) == (403, "preview_ticket_invalid")


def test_preview_refuses_an_expired_ticket_or_another_dashboard(client, site, clock):
    slug = site.organization.slug
    elsewhere = minisites.mint_preview_ticket(
        Settings(GYMCTL_ENV="test", FRONTEND_URL="https://evil.example"), site.organization, now=NOW
    )["ticket"]
    response = client.post(f"/sites/{slug}/preview", data={"ticket": elsewhere})
    assert (response.status_code, response.json["code"]) == (403, "preview_ticket_invalid")
    ticket = _ticket(client, site)
    clock.set(NOW + minisites.PREVIEW_TICKET_LIFETIME)
    response = client.post(f"/sites/{slug}/preview", data={"ticket": ticket})
    assert (response.status_code, response.json["code"]) == (403, "preview_ticket_expired")


def test_preview_of_an_unknown_site_is_404(client):
    response = client.post("/sites/nowhere/preview", data={"ticket": "x"})
    assert (response.status_code, response.json["code"]) == (404, "minisite_not_found")


def test_preview_needs_drafts(client, session, gym):
    response = client.post(
        f"/sites/{gym.organization.slug}/preview", data={"ticket": _ticket(client, gym)}
    )
    assert (response.status_code, response.json["code"]) == (409, "brand_draft_missing")
