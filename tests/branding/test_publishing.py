"""Publishing (spec A 3, 6.2): the order, the stop at the first failure, the fresh read, the
brand revision the website gets, attestations, unpublish and restore, and the events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.branding import publishing, workspace
from gymctl.branding.published import live_app_version, live_brand, public_branding
from gymctl.errors import DomainError
from gymctl.models import BrandDraft, MemberAppDraftAsset, MemberAppVersion, Role, Website
from tests.access.conftest import snapshot
from tests.branding.conftest import CONTENT, app_slot, brand_asset, drafts, event_names, events
from tests.conftest import NOW


def run(session_factory, store, gym, *channels, now=NOW):
    return publishing.publish_channels(
        session_factory, store, gym.id, channels, actor_user_id=None, now=now
    )


def test_channels_publish_in_the_order_brand_website_app(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    results = run(session_factory, store, gym, "app", "website", "brand")
    assert [(r.channel, r.result) for r in results] == [
        ("brand", "verified"),
        ("website", "verified"),
        ("app", "verified"),
    ]
    assert event_names(session, gym.id)[-3:] == [
        "branding.brand_published",
        "branding.website_published",
        "branding.app_published",
    ]


def test_the_run_stops_at_the_first_failure(session, session_factory, store, gym):
    """The brand fails (no draft): website and app are skipped and nothing goes live."""
    workspace.save_website_draft(session, gym.id, content=CONTENT, actor_user_id=None, now=NOW)
    session.commit()
    results = run(session_factory, store, gym, "brand", "website", "app")
    assert [(r.channel, r.result) for r in results] == [
        ("brand", "failed"),
        ("website", "skipped"),
        ("app", "skipped"),
    ]
    assert results[0].as_json()["code"] == "brand_draft_missing"
    session.expire_all()
    assert live_brand(session, gym.id) is None
    assert session.get(Website, gym.id).published_content_revision is None
    assert not [n for n in event_names(session, gym.id) if n.endswith("_published")]
    [failed] = events(session, "api.request_failed")
    assert failed.payload == {
        "operation": "branding.brand.publish",
        "code": "brand_draft_missing",
        "status": 409,
    }


def test_a_failure_after_a_verified_channel_keeps_that_channel_live(
    session, session_factory, store, gym
):
    drafts(session, store, gym.id)
    session.delete(session.get(Website, gym.id))
    session.commit()
    results = run(session_factory, store, gym, "brand", "website", "app")
    assert [r.result for r in results] == ["verified", "failed", "skipped"]
    assert results[1].error.code == "website_draft_missing"
    session.expire_all()
    assert live_brand(session, gym.id).revision == 1
    assert live_app_version(session, gym.id) is None


def test_the_website_publish_sends_the_brand_revision_read_after_the_brand_step(
    session, session_factory, store, gym
):
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand")
    draft = session.get(BrandDraft, gym.id)
    draft.palette = {"primaryColor": "#E4572E"}
    session.commit()
    results = run(session_factory, store, gym, "brand", "website")
    assert [(r.result, r.revision) for r in results] == [("verified", 2), ("verified", 1)]
    session.expire_all()
    assert session.get(Website, gym.id).published_brand_revision == 2
    [event] = events(session, "branding.website_published")
    assert event.payload["brandRevision"] == 2


def test_a_website_or_app_needs_a_published_brand(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    [website] = run(session_factory, store, gym, "website")
    [app] = run(session_factory, store, gym, "app")
    assert website.error.code == app.error.code == "brand_not_published"


def test_drafts_never_go_live_until_published(session, session_factory, store, gym):
    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0"})
    name = gym.organization.name
    assert public_branding(session, gym.id, name, 4)["status"] == "unpublished"
    run(session_factory, store, gym, "brand")
    workspace.save_brand_draft(
        session,
        store,
        gym.id,
        palette={"primaryColor": "#E4572E"},
        name="Iron Temple",
        logos={},
        actor_user_id=None,
        now=NOW,
    )
    read = public_branding(session, gym.id, name, 4)
    assert read["status"] == "published"
    assert read["branding"]["palette"]["primaryColor"] == "#1C40A0"


def test_the_app_counts_as_live_when_the_public_read_shows_its_version(
    session, session_factory, store, gym
):
    drafts(session, store, gym.id)
    results = run(session_factory, store, gym, "brand", "app")
    assert results[1].revision == 1
    session.expire_all()
    assert public_branding(session, gym.id, "x", 4)["version"] == 1
    publishing.unpublish_brand(session, gym.id, actor_user_id=None, now=NOW)
    # The public read no longer says published: the app would not count as live.
    assert publishing.is_live(session, gym.id, "app", 1) is False


def test_is_live_needs_the_fresh_read_to_show_each_change(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand", "website")
    session.expire_all()
    assert publishing.is_live(session, gym.id, "brand", 1) is True
    assert publishing.is_live(session, gym.id, "brand", 2) is False  # revision not advanced
    workspace.save_brand_draft(
        session,
        store,
        gym.id,
        palette={"primaryColor": "#000000"},
        name=None,
        logos={},
        actor_user_id=None,
        now=NOW,
    )
    assert publishing.is_live(session, gym.id, "brand", 1) is False  # something is pending
    assert publishing.is_live(session, gym.id, "website", 1) is True
    assert publishing.is_live(session, gym.id, "website", 2) is False


def test_publishing_the_member_app_resets_the_attestations(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand", "app")
    for kind in ("screenshot", "internalSmoke"):
        publishing.attest_app(session, gym.id, kind, actor_user_id=None, now=NOW)
    session.commit()
    attested = workspace.channel(session, gym.id, "app")["attestations"]
    assert attested["screenshot"] is not None
    assert attested["internalSmoke"] is not None
    run(session_factory, store, gym, "app", now=NOW + timedelta(minutes=1))
    session.expire_all()
    state = workspace.channel(session, gym.id, "app")
    assert state["version"] == 2
    assert state["attestations"] == {"screenshot": None, "internalSmoke": None}
    assert session.get(MemberAppVersion, (gym.id, 1)).screenshot_attested_at == NOW


def test_attestations_need_a_live_version_and_a_known_kind(session, gym):
    with pytest.raises(DomainError) as refused:
        publishing.attest_app(session, gym.id, "screenshot", actor_user_id=None, now=NOW)
    assert (refused.value.code, refused.value.status) == ("member_app_not_published", 409)
    with pytest.raises(DomainError) as unknown:
        publishing.attest_app(session, gym.id, "store", actor_user_id=None, now=NOW)
    assert (unknown.value.code, unknown.value.status) == ("attestation_unknown", 400)


def test_brand_published_says_whether_the_app_picks_it_up(session, session_factory, store, gym):
    """branding.brand_published carries appPropagated: a live member app reads it at once."""
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand", "app")
    run(session_factory, store, gym, "brand")
    first, second = events(session, "branding.brand_published")
    assert first.payload["appPropagated"] is False
    assert second.payload["appPropagated"] is True


def test_a_stored_logo_gone_bad_refuses_the_brand_publish_and_writes_nothing(
    session, session_factory, store, gym
):
    """Asset rule 10: on publish every stored asset is re-checked."""
    logo = brand_asset(session, store, gym.id)
    drafts(session, store, gym.id, logos={"logo": str(logo.id)})
    store.delete(logo.key)
    before = {k: v for k, v in snapshot(session).items() if k != "outbox_events"}
    [result] = run(session_factory, store, gym, "brand")
    assert (result.result, result.error.code) == ("failed", "brand_asset_stored_invalid")
    assert {k: v for k, v in snapshot(session).items() if k != "outbox_events"} == before
    assert "branding.brand_published" not in event_names(session, gym.id)


def test_unpublish_each_channel_and_its_event(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand", "website", "app")
    common = {"actor_user_id": None, "now": NOW}
    publishing.unpublish_app(session, gym.id, **common)
    publishing.unpublish_website(session, gym.id, **common)
    publishing.unpublish_brand(session, gym.id, **common)
    view = workspace.workspace(session, gym.id)
    assert [c["live"] for c in view["channels"]] == [False, False, False]
    assert event_names(session, gym.id)[-3:] == [
        "branding.app_unpublished",
        "branding.website_unpublished",
        "branding.brand_unpublished",
    ]
    for step, code in (
        (publishing.unpublish_app, "member_app_not_published"),
        (publishing.unpublish_website, "website_not_published"),
        (publishing.unpublish_brand, "brand_not_published"),
    ):
        with pytest.raises(DomainError) as refused:
            step(session, gym.id, **common)
        assert (refused.value.code, refused.value.status) == (code, 409)


def test_restore_brings_a_published_brand_back_into_the_draft(session, session_factory, store, gym):
    drafts(session, store, gym.id, palette={"primaryColor": "#111111"})
    run(session_factory, store, gym, "brand")
    draft = session.get(BrandDraft, gym.id)
    draft.palette = {"primaryColor": "#222222"}
    session.commit()
    run(session_factory, store, gym, "brand")
    session.expire_all()
    publishing.restore_brand(session, store, gym.id, revision=1, actor_user_id=None, now=NOW)
    state = workspace.channel(session, gym.id, "brand")
    assert state["draft"]["palette"] == {"primaryColor": "#111111"}
    assert state["pending"] is True  # restored into the draft, not live
    assert state["published"]["revision"] == 2
    publishing.restore_brand(session, store, gym.id, revision=None, actor_user_id=None, now=NOW)
    assert workspace.channel(session, gym.id, "brand")["pending"] is False
    assert [e.payload["revision"] for e in events(session, "branding.brand_restored")] == [1, 2]
    with pytest.raises(DomainError) as missing:
        publishing.restore_brand(session, store, gym.id, revision=9, actor_user_id=None, now=NOW)
    assert (missing.value.code, missing.value.status) == ("brand_revision_not_found", 404)


def test_restore_without_anything_published_is_refused(session, store, gym):
    common = {"revision": None, "actor_user_id": None, "now": NOW}
    with pytest.raises(DomainError) as brand:
        publishing.restore_brand(session, store, gym.id, **common)
    with pytest.raises(DomainError) as website:
        publishing.restore_website(session, gym.id, **common)
    with pytest.raises(DomainError) as app:
        publishing.restore_app(session, store, gym.id, version=None, actor_user_id=None, now=NOW)
    assert [e.value.code for e in (brand, website, app)] == [
        "brand_not_published",
        "website_not_published",
        "member_app_not_published",
    ]


def test_restore_website_to_an_unknown_revision_is_404(session, store, gym):
    drafts(session, store, gym.id)
    with pytest.raises(DomainError) as missing:
        publishing.restore_website(session, gym.id, revision=7, actor_user_id=None, now=NOW)
    assert (missing.value.code, missing.value.status) == ("website_revision_not_found", 404)


def test_restore_app_puts_the_versions_slots_back(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    run(session_factory, store, gym, "brand", "app")
    app_slot(session, store, gym.id, slot="wordmark", at=NOW + timedelta(minutes=1))
    session.commit()
    assert workspace.channel(session, gym.id, "app")["pending"] is True
    publishing.restore_app(session, store, gym.id, version=None, actor_user_id=None, now=NOW)
    session.expire_all()
    slots = {
        row.slot for row in session.query(MemberAppDraftAsset).filter_by(organization_id=gym.id)
    }
    assert slots == {"icon"}
    assert workspace.channel(session, gym.id, "app")["pending"] is False
    assert events(session, "branding.app_restored")[0].payload["version"] == 1
    with pytest.raises(DomainError) as missing:
        publishing.restore_app(session, store, gym.id, version=5, actor_user_id=None, now=NOW)
    assert (missing.value.code, missing.value.status) == ("member_app_version_not_found", 404)


def test_unknown_or_no_channels_are_refused(session_factory, store, gym):
    for channels in ((), ("brand", "shop")):
        with pytest.raises(DomainError) as refused:
            run(session_factory, store, gym, *channels)
        assert refused.value.code == "channel_unknown"


def test_users_me_reads_the_same_live_branding_as_the_public_read(
    client, session, session_factory, store, gym
):
    """GET /users/me carries "the same projection as GET /public/organizations/:id/branding"
    (it reads the live brand revision and app version in its one membership query)."""
    owner = gym[Role.owner].headers

    def both():
        me = client.get("/users/me?brandingSchema=4", headers=owner).json["branding"]
        public = client.get(f"/public/organizations/{gym.id}/branding?schema=4").json
        return me, {key: public[key] for key in me}

    drafts(session, store, gym.id, palette={"primaryColor": "#1C40A0"})
    run(session_factory, store, gym, "brand", "app")
    me, public = both()
    assert (me["status"], me["version"], me["brandRevision"]) == ("published", 1, 1)
    assert me == public

    publishing.unpublish_brand(session, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    me, public = both()
    assert (me["status"], me["branding"]) == ("unpublished", None)
    assert me == public
