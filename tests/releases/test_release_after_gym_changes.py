"""The release pipeline at its joins with the gym's life: a build dispatched before the gym was
deleted or moved below the top tier is not handed to CI when the run claims it, and a brand
publish below the top tier supersedes the candidate without cutting a replacement (spec A 1,
2.12; docs/decisions.md s56, s57)."""

from __future__ import annotations

from sqlalchemy import func, select

from gymctl.access import gyms, tiers
from gymctl.branding import publishing, workspace
from gymctl.models.organizations import Tier
from gymctl.models.releases import ReleaseCandidate
from tests.conftest import NOW
from tests.releases.test_ci_access import _claim, _dispatch, candidate  # noqa: F401 (fixture)


def test_a_deleted_gyms_dispatched_build_is_not_handed_to_ci(
    client,
    session,
    settings,
    gym,
    candidate,  # noqa: F811
    ci,
):
    """Spec A 2.12 "Disabled apps and inactive or deleted organizations deny access"; s56: no
    build is made for a gym that may not have the app. A build dispatched before the owner
    deleted the gym must not get executor access and the gym's inputs afterwards."""
    operation, nonce = _dispatch(session, settings, gym)
    gyms.delete_organization(session, gym.organization, actor_user_id=None, now=NOW)
    session.commit()
    response = _claim(client, ci.token(NOW), operation, nonce)
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")
    assert "executorAccess" not in response.json
    session.expire_all()
    assert (operation.nonce_used_at, operation.status) == (None, "dispatched")


def test_a_gym_moved_below_the_top_tier_gets_no_build_claimed(
    client,
    session,
    settings,
    gym,
    candidate,  # noqa: F811
    ci,
):
    """Spec A 1 "Organizations on the top tier can have a dedicated native mobile app"; decision
    s56 "Below elite the mapping, a candidate and a build dispatch answer 409
    branded_app_tier_required". A build dispatched while elite is not built once the gym moved
    to starter before the CI run claimed it."""
    operation, nonce = _dispatch(session, settings, gym)
    tiers.set_tier(session, gym.id, Tier.starter, actor_user_id=None, now=NOW)
    session.commit()
    response = _claim(client, ci.token(NOW), operation, nonce)
    assert response.status_code == 409, response.json
    assert response.json["code"] == "branded_app_tier_required"
    session.expire_all()
    assert (operation.nonce_used_at, operation.status) == (None, "dispatched")


def test_a_publish_below_the_top_tier_cuts_no_replacement_candidate(
    client,
    session,
    store,
    settings,
    gym,
    candidate,  # noqa: F811
):
    """Decision s56: below elite "a candidate ... answer[s] 409 branded_app_tier_required". The
    candidate a publish replaces (spec A 3) is a candidate all the same: a gym moved down a tier
    must not get a new one cut by its next brand publish."""
    tiers.set_tier(session, gym.id, Tier.starter, actor_user_id=None, now=NOW)
    session.commit()
    workspace.save_brand_draft(
        session,
        store,
        gym.id,
        palette={"primaryColor": "#A01C40"},
        name="Iron Temple",
        actor_user_id=None,
        now=NOW,
    )
    publishing.publish_brand(session, store, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    count = session.scalar(
        select(func.count())
        .select_from(ReleaseCandidate)
        .where(ReleaseCandidate.organization_id == gym.id)
    )
    assert count == 1, "a replacement candidate was cut for a gym below the top tier"
