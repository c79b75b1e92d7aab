"""Spec A 2.12: the identity lock, the public application-ID lookup, /b/<slug> resolution and
the web association files."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from gymctl.errors import DomainError
from gymctl.models import Organization, OrganizationStatus, Tier
from gymctl.models.releases import BrandedApp
from gymctl.releases import branded_apps
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.releases.conftest import APPLE_TEAM, CERT
from tests.releases.helpers import inserted_app, refused

CONTAINER = "com.gymctl.app"


@pytest.fixture(autouse=True)
def _top_tier(session, gym):
    gym.organization.tier = Tier.elite  # a dedicated app is the top tier's
    session.commit()


IOS_ID = "com.gymctl.gym.iron-temple"
ANDROID_ID = "com.gymctl.gym.iron_temple"


def test_a_new_mapping_generates_its_ids_from_the_link_slug_and_starts_disabled(
    session, settings, gym
):
    gym.organization.slug = "iron-temple"
    app = branded_apps.create_app(session, settings, gym.organization, now=NOW)
    assert (app.link_slug, app.apple_bundle_id, app.android_package) == (
        "iron-temple",
        IOS_ID,
        ANDROID_ID,
    )
    assert app.enabled is False


def test_the_mapping_is_immutable_and_ids_are_unique(session, settings, gym):
    branded_apps.create_app(session, settings, gym.organization, link_slug="iron", now=NOW)
    other = factories.organization(session, tier=Tier.elite)
    before = snapshot(session)
    with pytest.raises(DomainError) as again:
        branded_apps.create_app(session, settings, gym.organization, link_slug="other", now=NOW)
    assert (again.value.code, again.value.status) == ("branded_app_exists", 409)
    for kwargs in (
        {"link_slug": "iron"},
        {"link_slug": "fresh", "apple_bundle_id": "com.gymctl.gym.iron"},
        {"link_slug": "fresh2", "android_package": CONTAINER},
    ):
        with pytest.raises(DomainError) as taken:
            branded_apps.create_app(session, settings, other, now=NOW, **kwargs)
        assert (taken.value.code, taken.value.status) == ("branded_app_id_taken", 409)
    assert snapshot(session) == before


def test_invalid_ids_are_refused_before_anything_is_written(session, settings, gym):
    refused(
        session,
        lambda: branded_apps.create_app(
            session, settings, gym.organization, android_package="com.my-gym.app", now=NOW
        ),
        "android_package_invalid",
        400,
    )


def test_the_link_slug_is_independent_of_the_gyms_renameable_slug(client, session, branded, gym):
    gym.organization.slug = "renamed-gym"
    session.commit()
    response = client.get("/public/app-links/iron-temple")
    assert response.status_code == 200
    assert response.json["organization"]["id"] == str(gym.id)
    assert client.get("/public/app-links/renamed-gym").status_code == 404


@pytest.mark.embedded
def test_the_database_refuses_to_change_a_mapped_identity(connection):
    """Also without our code: a trigger on PostgreSQL and on SQLite."""
    _, app_id = inserted_app(connection)
    # The runtime switch and the config may change ...
    where = BrandedApp.id == app_id
    connection.execute(update(BrandedApp).where(where).values(enabled=True, config_revision=1))
    # ... the identity may not.
    for column in ("link_slug", "apple_bundle_id", "android_package"):
        savepoint = connection.begin_nested()
        with pytest.raises(DBAPIError, match="branded_app_identity_locked"):
            connection.execute(update(BrandedApp).where(where).values({column: "com.x.y"}))
        savepoint.rollback()


def test_only_the_configured_container_id_acts_as_container(client, branded):
    assert client.get(f"/public/apps/{CONTAINER}/identity").json == {"mode": "container"}


@pytest.mark.parametrize("application_id", [IOS_ID, ANDROID_ID])
def test_an_enabled_mapping_of_an_active_gym_unlocks_with_no_internal_fields(
    client, branded, gym, application_id
):
    response = client.get(f"/public/apps/{application_id}/identity?schema=4")
    assert response.status_code == 200
    body = response.json
    assert body["mode"] == "dedicated"
    assert body["organization"] == {"id": str(gym.id), "name": gym.organization.name}
    assert (body["linkSlug"], body["urlScheme"]) == ("iron-temple", "gymctl-iron-temple")
    assert body["branding"]["status"] == "published"
    text_ = response.get_data(as_text=True)
    for internal in ("enabled", IOS_ID, ANDROID_ID, APPLE_TEAM, CERT, "bsp-7f3a9c", "acct"):
        assert internal not in text_


@pytest.mark.parametrize(
    "state",
    ["unknown", "sandbox", "disabled", "inactive", "deleted"],
)
def test_everything_else_denies_with_one_answer(client, session, branded, gym, state):
    application_id = IOS_ID
    if state == "unknown":
        application_id = "com.example.unknown"
    elif state == "sandbox":
        application_id = "host.exp.Exponent"  # a development sandbox never unlocks
    elif state == "disabled":
        branded_apps.set_enabled(session, gym.id, False, now=NOW)
    elif state == "inactive":
        gym.organization.status = OrganizationStatus.inactive
    else:
        gym.organization.deleted_at = NOW
    session.commit()
    for path in (f"/public/apps/{application_id}/identity", "/public/app-links/iron-temple"):
        if state in ("unknown", "sandbox") and "app-links" in path:
            continue
        response = client.get(path)
        assert (response.status_code, response.json["code"]) == (404, "app_identity_not_found")


def test_link_resolution_does_not_depend_on_the_tier(client, session, branded, gym):
    for tier in Tier:
        gym.organization.tier = tier
        session.commit()
        assert client.get("/public/app-links/iron-temple").status_code == 200


def test_a_bad_schema_is_refused(client, branded):
    response = client.get(f"/public/apps/{IOS_ID}/identity?schema=5")
    assert (response.status_code, response.json["code"]) == (400, "schema_unsupported")


def test_association_files_claim_exactly_the_slug_and_below_never_a_bare_prefix(
    client, session, branded
):
    aasa = client.get("/.well-known/apple-app-site-association").json
    [entry] = aasa["applinks"]["details"]
    assert entry["appIDs"] == [f"{APPLE_TEAM}.{IOS_ID}"]
    assert entry["components"] == [{"/": "/b/iron-temple"}, {"/": "/b/iron-temple/*"}]
    assert entry["paths"] == ["/b/iron-temple", "/b/iron-temple/*"]
    assert not any(p.endswith("iron-temple*") for p in entry["paths"])
    [statement] = client.get("/.well-known/assetlinks.json").json
    assert statement["target"] == {
        "namespace": "android_app",
        "package_name": ANDROID_ID,
        "sha256_cert_fingerprints": [CERT],
    }


def test_a_disabled_app_is_left_out_of_the_association_files(client, session, branded, gym):
    branded_apps.set_enabled(session, gym.id, False, now=NOW)
    session.commit()
    assert client.get("/.well-known/apple-app-site-association").json["applinks"]["details"] == []
    assert client.get("/.well-known/assetlinks.json").json == []


def test_config_changes_are_validated_and_advance_the_config_revision(session, branded, gym):
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        branded_apps.configure(session, gym.id, {"appleTeamId": "short"}, now=NOW)
    assert (refused.value.code, refused.value.status) == ("branded_app_config_invalid", 400)
    with pytest.raises(DomainError) as unknown:
        branded_apps.configure(session, gym.id, {"enabled": True}, now=NOW)
    assert unknown.value.code == "branded_app_config_invalid"
    assert snapshot(session) == before
    revision = branded.config_revision
    branded_apps.configure(session, gym.id, {"iosProfile": "ios-prof-2"}, now=NOW)
    assert branded.config_revision == revision + 1
    branded_apps.configure(session, gym.id, {"iosProfile": "ios-prof-2"}, now=NOW)
    assert branded.config_revision == revision + 1  # no change, no revision


def test_a_gym_without_an_app_has_none_to_show(session, gym):
    with pytest.raises(DomainError) as missing:
        branded_apps.require_app(session, gym.id)
    assert (missing.value.code, missing.value.status) == ("branded_app_not_found", 404)
    assert session.get(Organization, gym.id) is not None


@pytest.mark.parametrize("tier", [Tier.starter, Tier.growth])
def test_a_gym_below_the_top_tier_maps_no_app(session, settings, gym, tier):
    """Spec A 1: "Organizations on the top tier can have a dedicated native mobile app"."""
    gym.organization.tier = tier
    session.flush()
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        branded_apps.create_app(session, settings, gym.organization, now=NOW)
    assert (refused.value.code, refused.value.status) == ("branded_app_tier_required", 409)
    assert refused.value.details["tier"] == tier.value
    assert snapshot(session) == before


def test_after_a_downgrade_no_candidate_is_cut_nor_build_dispatched(
    client, session, settings, store, branded, gym
):
    """The gym left the top tier: its pipeline stops (no snapshot, no build), while the app its
    members installed keeps resolving (spec A 2.12: resolution does not depend on the tier)."""
    from gymctl.releases import candidates, operations
    from tests.releases.conftest import COMMIT

    gym.organization.tier = Tier.growth
    session.commit()
    before = snapshot(session)
    for attempt in (
        lambda: candidates.cut_candidate(
            session, store, settings, gym.id, source_commit=COMMIT, now=NOW
        ),
        lambda: operations.dispatch(
            session, settings, gym.id, kind="build", platform="ios", now=NOW
        ),
    ):
        with pytest.raises(DomainError) as refused:
            attempt()
        assert (refused.value.code, refused.value.status) == ("branded_app_tier_required", 409)
    assert snapshot(session) == before
    assert client.get("/public/app-links/iron-temple").status_code == 200
