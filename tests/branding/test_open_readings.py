"""Open readings of spec A decided for issue 23 (docs/decisions.md): what the public branding
`status` follows, and whether coaches upload member-app images."""

from __future__ import annotations

import pytest

from gymctl.branding import publishing
from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.assets.test_routes import png, upload
from tests.branding.conftest import drafts
from tests.conftest import NOW


def public(client, gym):
    response = client.get(f"/public/organizations/{gym.id}/branding?schema=4")
    assert response.status_code == 200
    return response.json


def test_public_status_follows_the_brand_and_version_the_member_app(client, session, gym, store):
    """A gym owner publishes the brand first: installed apps show the gym's colours at once
    (status published, version null until the member app is published); unpublishing the app
    keeps the brand showing, unpublishing the brand hides it whatever the app's state."""
    drafts(session, store, gym.id)
    publishing.publish_brand(session, store, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    read = public(client, gym)
    assert (read["status"], read["version"]) == ("published", None)
    publishing.publish_app(session, store, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    assert (public(client, gym)["status"], public(client, gym)["version"]) == ("published", 1)
    publishing.unpublish_app(session, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    read = public(client, gym)
    assert (read["status"], read["version"], read["branding"] is None) == ("published", None, False)
    publishing.unpublish_brand(session, gym.id, actor_user_id=None, now=NOW)
    session.commit()
    read = public(client, gym)
    assert (read["status"], read["branding"]) == ("unpublished", None)


@pytest.mark.parametrize("path", ["/branding/assets/logo", "/branding/assets"])
def test_coaches_do_not_change_member_app_images(client, session, gym, path):
    """Member-app images are the gym's public identity: owner and admin (branding in the
    matrix) upload them; a coach is refused with nothing stored or recorded."""
    before = snapshot(session)
    if path.endswith("/logo"):
        response = upload(client, gym, "logo", png(), by=Role.coach)
    else:
        response = client.put(
            f"/organizations/{gym.id}{path}",
            json={"assets": {"logo": f"organizations/{gym.id}/brand-assets/x.png"}},
            headers=gym[Role.coach].headers,
        )
    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before
