"""The pending flags of spec A 3, one test per rule."""

from __future__ import annotations

from datetime import timedelta

from gymctl.branding import publishing, workspace
from gymctl.models import Website
from tests.branding.conftest import CONTENT, app_slot, brand_asset, drafts
from tests.conftest import NOW


def _pending(session, organization_id, channel):
    session.expire_all()
    return workspace.channel(session, organization_id, channel)["pending"]


def _publish(session_factory, store, gym, *channels):
    results = publishing.publish_channels(
        session_factory, store, gym.id, channels, actor_user_id=None, now=NOW
    )
    assert [r.result for r in results] == ["verified"] * len(channels), results


def test_brand_without_a_draft_is_not_pending(session, gym):
    assert _pending(session, gym.id, "brand") is False


def test_brand_draft_with_nothing_published_is_pending(session, store, gym):
    drafts(session, store, gym.id)
    assert _pending(session, gym.id, "brand") is True


def test_brand_identity_ignores_colour_case(session, session_factory, store, gym):
    drafts(session, store, gym.id, palette={"primaryColor": "#1c40a0"})
    _publish(session_factory, store, gym, "brand")
    assert _pending(session, gym.id, "brand") is False
    workspace.save_brand_draft(
        session,
        store,
        gym.id,
        palette={"primaryColor": "#1C40A0"},
        name="Iron Temple",
        logos={},
        actor_user_id=None,
        now=NOW,
    )
    assert _pending(session, gym.id, "brand") is False


def test_brand_name_or_logos_changing_is_pending(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    _publish(session_factory, store, gym, "brand")
    common = {"palette": {"primaryColor": "#1C40A0"}, "actor_user_id": None, "now": NOW}
    workspace.save_brand_draft(session, store, gym.id, name="Iron", logos={}, **common)
    assert _pending(session, gym.id, "brand") is True
    logo = brand_asset(session, store, gym.id)
    workspace.save_brand_draft(
        session, store, gym.id, name="Iron Temple", logos={"logo": str(logo.id)}, **common
    )
    assert _pending(session, gym.id, "brand") is True


def test_brand_unpublished_reads_pending_again(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    _publish(session_factory, store, gym, "brand")
    publishing.unpublish_brand(session, gym.id, actor_user_id=None, now=NOW)
    assert _pending(session, gym.id, "brand") is True


def test_website_not_adopted_is_never_pending(session, gym):
    session.add(Website(organization_id=gym.id, draft_revision=0, updated_at=NOW))
    session.flush()
    assert _pending(session, gym.id, "website") is False


def test_website_adopted_and_never_published_is_pending(session, gym):
    workspace.save_website_draft(session, gym.id, content=CONTENT, actor_user_id=None, now=NOW)
    assert _pending(session, gym.id, "website") is True


def test_website_pending_follows_published_content_revision(session, session_factory, store, gym):
    drafts(session, store, gym.id)
    _publish(session_factory, store, gym, "brand", "website")
    assert _pending(session, gym.id, "website") is False
    workspace.save_website_draft(
        session, gym.id, content={**CONTENT, "headline": "New"}, actor_user_id=None, now=NOW
    )
    assert _pending(session, gym.id, "website") is True
    publishing.restore_website(session, gym.id, revision=None, actor_user_id=None, now=NOW)
    assert _pending(session, gym.id, "website") is False


def test_member_app_draft_with_nothing_published_is_pending(session, store, gym):
    app_slot(session, store, gym.id)
    assert _pending(session, gym.id, "app") is True


def test_member_app_without_a_draft_is_not_pending(session, gym):
    assert _pending(session, gym.id, "app") is False


def test_a_fresh_app_publish_never_reads_as_pending(session, session_factory, store, gym):
    """publishedAt and updatedAt are written from one instant."""
    drafts(session, store, gym.id, at=NOW - timedelta(minutes=5))
    _publish(session_factory, store, gym, "brand", "app")
    state = workspace.channel(session, gym.id, "app")
    assert state["publishedAt"] == state["updatedAt"] == NOW.isoformat()
    assert state["pending"] is False


def test_member_app_written_within_1_s_of_publishing_is_not_pending(
    session, session_factory, store, gym
):
    """Pending only when the row was written more than 1 s after publishedAt."""
    drafts(session, store, gym.id)
    _publish(session_factory, store, gym, "brand", "app")
    workspace.save_app_draft(session, gym.id, display_name="Iron", now=NOW + timedelta(seconds=1))
    assert _pending(session, gym.id, "app") is False
    workspace.save_app_draft(
        session, gym.id, display_name="Iron", now=NOW + timedelta(seconds=1, milliseconds=1)
    )
    assert _pending(session, gym.id, "app") is True


def test_a_new_slot_upload_after_publishing_makes_the_app_pending(
    session, session_factory, store, gym
):
    drafts(session, store, gym.id)
    _publish(session_factory, store, gym, "brand", "app")
    app_slot(session, store, gym.id, slot="logo", at=NOW + timedelta(seconds=5))
    assert _pending(session, gym.id, "app") is True


def test_the_workspace_lists_the_channels_in_publishing_order(session, store, gym):
    drafts(session, store, gym.id)
    view = workspace.workspace(session, gym.id)
    assert [c["channel"] for c in view["channels"]] == ["brand", "website", "app"]
    assert all(c["pending"] for c in view["channels"])
