"""A stored image keeps the rules of the slot it was normalized for (spec A 2.11:
"Each is uploaded on its own; nothing is derived from another slot"; the icon is an opaque
square PNG at 1024x1024, the other slots transparent; asset rule 10: on save every stored asset
is re-checked, "a missing or wrongly typed object gives brand_asset_stored_invalid")."""

from __future__ import annotations

import pytest

from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.assets.test_routes import png, upload

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("uploaded_as", "image", "saved_as"),
    [
        ("logo", png((800, 400)), "icon"),  # transparent and not square, as the app's icon
        ("icon", png((1024, 1024), transparent=False), "splashLogo"),  # opaque, as a logo
    ],
)
def test_saving_an_asset_of_one_slot_into_a_slot_with_other_rules_is_refused(
    client, gym, session, engine, uploaded_as, image, saved_as
):
    """PUT .../branding/assets re-checked only the key's prefix and the object's type: a
    transparent 800x400 logo became the member app's icon (published, it is the native build's
    app icon, which the stores refuse when transparent), an opaque icon a splash logo."""
    stored = upload(client, gym, uploaded_as, image)
    assert stored.status_code == 201, stored.json
    before = snapshot(session)

    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        json={"assets": {saved_as: stored.json["key"]}},
        headers=gym[Role.owner].headers,
    )

    assert (response.status_code, response.json["code"]) == (400, "brand_asset_stored_invalid")
    after = snapshot(session)
    assert {k: v for k, v in after.items() if k != "outbox_events"} == {
        k: v for k, v in before.items() if k != "outbox_events"
    }
