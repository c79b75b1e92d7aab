"""The workspace and public branding over HTTP (spec A 4, 6.2, 9): access, every refusal with its
code and status and nothing changed but the api.request_failed record, events only after a
write that stands."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import OutboxEvent, Role
from tests.access.conftest import snapshot
from tests.branding.conftest import CONTENT, brand_asset, drafts, event_names, events

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

WORKSPACE = "/organizations/{}/brand-workspace"


def ws(gym, suffix=""):
    return WORKSPACE.format(gym.id) + suffix


def state(session):
    """Everything but the outbox (a refusal adds exactly its api.request_failed there)."""
    return {k: v for k, v in snapshot(session).items() if k != "outbox_events"}


def outbox(session):
    return list(session.scalars(select(OutboxEvent).order_by(OutboxEvent.id)))


@pytest.mark.parametrize("role", [Role.owner, Role.admin])
def test_staff_with_branding_access_read_the_workspace(client, gym, role):
    response = client.get(ws(gym), headers=gym[role].headers)
    assert response.status_code == 200
    assert [c["channel"] for c in response.json["channels"]] == ["brand", "website", "app"]


@pytest.mark.parametrize("role", [Role.coach, Role.member])
def test_roles_without_branding_access_are_refused(client, gym, role):
    response = client.get(ws(gym), headers=gym[role].headers)
    assert (response.status_code, response.json["code"]) == (403, "permission_denied")


def test_save_publish_and_read_back_over_http(client, gym, session, store):
    owner = gym[Role.owner].headers
    logo = brand_asset(session, store, gym.id)
    session.commit()
    saved = client.put(
        ws(gym, "/brand"),
        json={
            "palette": {"primaryColor": "#FFE600", "buttonColor": "#1C40A0"},
            "name": "Iron Temple",
            "logos": {"logo": str(logo.id)},
        },
        headers=owner,
    )
    assert saved.status_code == 200, saved.json
    assert saved.json["pending"] is True
    assert saved.json["draft"]["logos"] == {"logo": logo.key}
    assert (
        client.put(ws(gym, "/website"), json={"content": CONTENT}, headers=owner).status_code == 200
    )
    assert (
        client.put(ws(gym, "/app"), json={"displayName": "Iron"}, headers=owner).status_code == 200
    )
    run = client.post(ws(gym, "/publish"), json={"channels": ["website", "brand"]}, headers=owner)
    assert run.status_code == 200, run.json
    assert [(r["channel"], r["result"]) for r in run.json["results"]] == [
        ("brand", "verified"),
        ("website", "verified"),
    ]
    assert run.json["completed"] is True
    public = client.get(f"/public/organizations/{gym.id}/branding?schema=4").json
    assert public["status"] == "published"
    assert public["branding"]["palette"]["buttonColor"] == "#1C40A0"
    assert public["version"] is None  # no member app live yet
    assert "branding.brand_published" in event_names(session, gym.id)


def test_publish_one_channel_answers_its_result_and_state(client, gym, session, store):
    drafts(session, store, gym.id)
    owner = gym[Role.owner].headers
    brand = client.post(ws(gym, "/brand/publish"), headers=owner)
    assert (brand.status_code, brand.json["result"], brand.json["revision"]) == (200, "verified", 1)
    app = client.post(ws(gym, "/app/publish"), headers=owner)
    assert app.json["state"]["version"] == 1
    public = client.get(f"/public/organizations/{gym.id}/branding?schema=4").json
    assert (public["status"], public["version"]) == ("published", 1)


def test_a_refused_publish_answers_its_code_and_records_api_request_failed(client, gym, session):
    before = state(session)
    count = len(outbox(session))
    response = client.post(ws(gym, "/website/publish"), headers=gym[Role.admin].headers)
    assert (response.status_code, response.json["code"]) == (409, "website_draft_missing")
    assert state(session) == before
    [failed] = outbox(session)[count:]
    assert failed.name == "api.request_failed"
    assert failed.payload["code"] == "website_draft_missing"


def _refused(client, session, method, path, headers, *, json=None, stored=False):
    """`stored`: a stored asset refused on save is also branding.asset_rejected (spec A 6.2)."""
    before, count = state(session), len(outbox(session))
    response = client.open(path, method=method, json=json, headers=headers)
    assert state(session) == before, "a refused write changed something"
    added = outbox(session)[count:]
    names = ["branding.asset_rejected"] if stored else []
    assert [e.name for e in added] == [*names, "api.request_failed"]
    assert added[-1].payload["code"] == response.json["code"]
    return response.status_code, response.json["code"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"palette": []}, 400, "invalid_body"),
        ({"palette": {"secondaryColor": "#000000"}}, 400, "palette_primary_required"),
        ({"palette": {"primaryColor": "red"}}, 400, "palette_color_invalid"),
        ({"palette": {"primaryColor": "#000000", "accent": "#fff"}}, 400, "palette_field_unknown"),
        ({"palette": {"primaryColor": "#000000"}, "extra": 1}, 400, "invalid_body"),
        (
            {"palette": {"primaryColor": "#000000"}, "logos": {"logo": "x"}},
            400,
            "brand_logo_invalid",
        ),
        (
            {"palette": {"primaryColor": "#000000"}, "logos": {"cover": "x"}},
            400,
            "brand_logo_invalid",
        ),
    ],
)
def test_bad_brand_drafts_are_refused_with_a_code(client, gym, session, body, status, code):
    assert _refused(
        client, session, "PUT", ws(gym, "/brand"), gym[Role.owner].headers, json=body
    ) == (
        status,
        code,
    )


def test_a_logo_of_another_gym_is_not_found(client, gym, session, store):
    from tests import factories

    other = factories.organization(session)
    asset = brand_asset(session, store, other.id)
    session.commit()
    body = {"palette": {"primaryColor": "#000000"}, "logos": {"logo": str(asset.id)}}
    assert _refused(
        client, session, "PUT", ws(gym, "/brand"), gym[Role.owner].headers, json=body
    ) == (404, "brand_asset_not_found")


def test_a_logo_whose_object_is_gone_is_brand_asset_stored_invalid(client, gym, session, store):
    asset = brand_asset(session, store, gym.id)
    session.commit()
    store.delete(asset.key)
    body = {"palette": {"primaryColor": "#000000"}, "logos": {"logo": str(asset.id)}}
    assert _refused(
        client, session, "PUT", ws(gym, "/brand"), gym[Role.owner].headers, json=body, stored=True
    ) == (400, "brand_asset_stored_invalid")


def test_a_logo_key_outside_the_prefix_is_brand_asset_not_owned(client, gym, session, store):
    asset = brand_asset(session, store, gym.id)
    asset.key = "organizations/elsewhere/brand-assets/x.png"
    session.commit()
    body = {"palette": {"primaryColor": "#000000"}, "logos": {"logo": str(asset.id)}}
    assert _refused(
        client, session, "PUT", ws(gym, "/brand"), gym[Role.owner].headers, json=body, stored=True
    ) == (400, "brand_asset_not_owned")


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"headline": ""},
        {"headline": "x", "pricing": [{"name": "a", "priceCents": -1, "currency": "EUR"}]},
        {"headline": "x", "pricing": [{"name": "a", "priceCents": 1, "currency": "eur"}]},
        {"headline": "x", "contact": {"email": "not-an-address"}},
        {"headline": "x", "colour": "#fff"},
    ],
)
def test_bad_website_content_is_refused(client, gym, session, content):
    assert _refused(
        client,
        session,
        "PUT",
        ws(gym, "/website"),
        gym[Role.owner].headers,
        json={"content": content},
    ) == (400, "website_content_invalid")


@pytest.mark.parametrize(
    ("method", "suffix", "body", "status", "code"),
    [
        ("POST", "/shop/publish", None, 404, "channel_unknown"),
        ("POST", "/shop/unpublish", None, 404, "channel_unknown"),
        ("POST", "/shop/restore", None, 404, "channel_unknown"),
        ("POST", "/brand/publish", None, 409, "brand_draft_missing"),
        ("POST", "/app/publish", None, 409, "member_app_draft_missing"),
        ("POST", "/brand/unpublish", None, 409, "brand_not_published"),
        ("POST", "/website/unpublish", None, 409, "website_not_published"),
        ("POST", "/app/unpublish", None, 409, "member_app_not_published"),
        ("POST", "/brand/restore", {"revision": 3}, 404, "brand_revision_not_found"),
        ("POST", "/brand/restore", {}, 409, "brand_not_published"),
        ("POST", "/website/restore", {}, 409, "website_not_published"),
        ("POST", "/app/restore", {"revision": 2}, 404, "member_app_version_not_found"),
        ("POST", "/app/restore", {"revision": 0}, 400, "invalid_body"),
        ("POST", "/app/attestations", {"kind": "screenshot"}, 409, "member_app_not_published"),
        ("POST", "/app/attestations", {"kind": "store"}, 400, "invalid_body"),
        ("POST", "/publish", {"channels": ["shop"]}, 400, "invalid_body"),
        ("PUT", "/app", {"displayName": ""}, 400, "invalid_body"),
    ],
)
def test_every_workspace_refusal_has_its_code_and_changes_nothing(
    client, gym, session, method, suffix, body, status, code
):
    headers = gym[Role.owner].headers
    assert _refused(client, session, method, ws(gym, suffix), headers, json=body) == (status, code)


def test_the_publish_run_reports_the_failure_and_the_skipped(client, gym, session):
    response = client.post(ws(gym, "/publish"), json={}, headers=gym[Role.owner].headers)
    assert response.status_code == 200
    assert [(r["channel"], r["result"], r.get("code")) for r in response.json["results"]] == [
        ("brand", "failed", "brand_draft_missing"),
        ("website", "skipped", None),
        ("app", "skipped", None),
    ]
    assert response.json["completed"] is False
    assert [e.payload["code"] for e in events(session, "api.request_failed")] == [
        "brand_draft_missing"
    ]


def test_attest_then_read_the_attestations(client, gym, session, store):
    drafts(session, store, gym.id)
    headers = gym[Role.owner].headers
    client.post(ws(gym, "/publish"), json={"channels": ["brand", "app"]}, headers=headers)
    response = client.post(
        ws(gym, "/app/attestations"), json={"kind": "internalSmoke"}, headers=headers
    )
    assert response.status_code == 200
    assert response.json["attestations"]["internalSmoke"]["byUserId"] == str(
        gym[Role.owner].user.id
    )
    assert response.json["attestations"]["screenshot"] is None


@pytest.mark.parametrize("schema", ["0", "5", "x", "1.0", ""])
def test_public_branding_refuses_a_bad_schema(client, gym, schema):
    response = client.get(f"/public/organizations/{gym.id}/branding?schema={schema}")
    assert (response.status_code, response.json["code"]) == (400, "schema_unsupported")


def test_public_branding_of_an_unknown_organization_is_404(client):
    response = client.get("/public/organizations/00000000-0000-0000-0000-000000000000/branding")
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")


def test_public_branding_absent_schema_is_schema_1(client, gym, session, store):
    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0", "buttonColor": "#E4572E"})
    client.post(ws(gym, "/brand/publish"), headers=gym[Role.owner].headers)
    absent = client.get(f"/public/organizations/{gym.id}/branding").json
    one = client.get(f"/public/organizations/{gym.id}/branding?schema=1").json
    assert absent["branding"] == one["branding"]
    assert absent["schema"] == 1
    assert set(absent["branding"]["palette"]) == {"primaryColor", "secondaryColor", "accentColor"}
    assert absent["branding"]["brand"]["schemaVersion"] == 1


@pytest.mark.parametrize("schema", ["1", "2", "3", "4"])
def test_users_me_carries_the_same_projection(client, gym, session, store, schema):
    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0", "cardColor": "#FFFFFF"})
    client.post(ws(gym, "/brand/publish"), headers=gym[Role.owner].headers)
    me = client.get(f"/users/me?brandingSchema={schema}", headers=gym[Role.member].headers).json
    public = client.get(f"/public/organizations/{gym.id}/branding?schema={schema}").json
    assert me["branding"]["branding"] == public["branding"]
    assert me["branding"]["status"] == "published"
    assert me["branding"]["schema"] == int(schema)


def test_preview_ticket_is_minted_for_the_dashboard_origin(client, gym):
    response = client.post(ws(gym, "/preview-ticket"), headers=gym[Role.admin].headers)
    assert response.status_code == 201
    assert response.json["origin"] == "https://app.example.test"
    assert response.json["previewUrl"].endswith(f"/sites/{gym.organization.slug}/preview")
