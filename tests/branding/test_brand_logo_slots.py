"""The brand draft's logos keep the rules of the slot each image was normalized for (spec A
2.11: "Each is uploaded on its own; nothing is derived from another slot"; the icon is an
opaque square, logo, wordmark and splashLogo transparent; asset rule 10 on save: "a missing or
wrongly typed object gives brand_asset_stored_invalid"), as the member app's slots do."""

from __future__ import annotations

import pytest

from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.branding.conftest import brand_asset, events

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _save(client, gym, logos):
    return client.put(
        f"/organizations/{gym.id}/brand-workspace/brand",
        json={"palette": {"primaryColor": "#1C40A0"}, "logos": logos},
        headers=gym[Role.owner].headers,
    )


def _state(session):
    return {k: v for k, v in snapshot(session).items() if k != "outbox_events"}


@pytest.mark.parametrize(
    ("stored_as", "saved_as"),
    [("logo", "icon"), ("wordmark", "icon"), ("icon", "logo"), ("icon", "splashLogo")],
)
def test_a_brand_logo_from_a_slot_with_other_rules_is_refused_and_changes_nothing(
    client, gym, session, store, stored_as, saved_as
):
    asset = brand_asset(session, store, gym.id, slot=stored_as)
    session.commit()
    before = _state(session)

    response = _save(client, gym, {saved_as: str(asset.id)})

    assert (response.status_code, response.json["code"]) == (400, "brand_asset_stored_invalid")
    assert _state(session) == before
    [rejected] = events(session, "branding.asset_rejected")
    assert (rejected.payload["asset"], rejected.payload["source"]) == (saved_as, "stored")


def test_a_transparent_image_serves_any_transparent_slot(client, gym, session, store):
    logo = brand_asset(session, store, gym.id, slot="logo")
    icon = brand_asset(session, store, gym.id, slot="icon")
    session.commit()

    response = _save(client, gym, {"wordmark": str(logo.id), "icon": str(icon.id)})

    assert response.status_code == 200, response.json
    assert response.json["draft"]["logos"] == {"wordmark": logo.key, "icon": icon.key}
