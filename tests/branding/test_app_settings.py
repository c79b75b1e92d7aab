"""The member app's draft settings over HTTP (PUT .../brand-workspace/app): a field the body
leaves out keeps the draft's value, as the brand save does (docs/decisions.md, Brand save); an
explicit null clears it."""

from __future__ import annotations

import pytest

from gymctl.models import MemberAppDraft, Role

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _save(client, gym, **kwargs):
    return client.put(
        f"/organizations/{gym.id}/brand-workspace/app", headers=gym[Role.owner].headers, **kwargs
    )


@pytest.mark.parametrize("absent", [{"json": {}}, {}], ids=["empty object", "no body"])
def test_a_save_without_display_name_keeps_it(client, gym, absent):
    assert _save(client, gym, json={"displayName": "Iron"}).status_code == 200

    kept = _save(client, gym, **absent)

    assert kept.status_code == 200, kept.json
    assert kept.json["draft"]["displayName"] == "Iron"


def test_an_explicit_null_display_name_clears_it(client, gym):
    assert _save(client, gym, json={"displayName": "Iron"}).status_code == 200

    cleared = _save(client, gym, json={"displayName": None})

    assert cleared.status_code == 200, cleared.json
    assert cleared.json["draft"]["displayName"] is None


@pytest.mark.parametrize("name", ["Iron\r\nGym", "Iron\u2028Gym", "Iron\x1bGym"])
def test_a_display_name_is_one_line_as_a_brand_name_is(client, gym, session, name):
    """The app's display name goes into the native build's input: one line, as the brand's
    name (a line break was saved and shipped). The refusal changes nothing (a branding refusal
    is recorded as api.request_failed, on purpose)."""
    assert _save(client, gym, json={"displayName": "Iron"}).status_code == 200

    refused = _save(client, gym, json={"displayName": name})

    assert (refused.status_code, refused.json["code"]) == (400, "brand_name_invalid")
    session.expire_all()
    assert session.get(MemberAppDraft, gym.id).display_name == "Iron"
