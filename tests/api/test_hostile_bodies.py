"""Hostile bodies (issue 20): deep, huge, malformed or oddly typed bodies get a 400-class JSON
answer with a code and change nothing, on public routes, bearer routes and both webhooks."""

from __future__ import annotations

import json

import pytest

from gymctl.identity.webhook_signature import sign
from gymctl.models import Role
from tests.access.conftest import gym, outsider, snapshot  # noqa: F401 (fixtures)
from tests.access.test_join import make_link
from tests.conftest import NOW, WEBHOOK_SECRET
from webhooks.bodies import MEMBER_BODY_BYTES, PUBLIC_BODY_BYTES, WEBHOOK_BODY_BYTES, depth

DEEP = b"[" * 400 + b"]" * 400  # 800 bytes
DEEPER = b"[" * 100_000 + b"]" * 100_000  # 200 KB: for the webhook's limit
DEEP_AND_SMALL = b"[" * 20_000 + b"]" * 20_000  # past the parser's recursion, under 64 KiB


@pytest.fixture
def link(session, gym):  # noqa: F811
    row = make_link(session, gym.organization)
    session.commit()
    return row


def _routes(gym, link) -> list[tuple[str, dict]]:  # noqa: F811
    owner = gym[Role.owner].headers
    return [
        (f"/join/{link.token}/checkout-failed", {}),
        (f"/join/{link.token}/request-invite", {}),
        (f"/organizations/{gym.id}/plans", owner),
        (f"/organizations/{gym.id}/members", owner),
        (f"/webhooks/card-provider/{gym.id}", {}),
    ]


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("400 levels", DEEP),
        ("20 000 levels", DEEP_AND_SMALL),
        ("not JSON", b"{nope"),
        ("not UTF-8", b'{"email": "\xff\xfe"}'),
        ("NaN", b'{"email": NaN}'),
        ("a number out of range", b'{"priceInCents": 1e999}'),
        ("a NUL", b'{"email": "a\\u0000@example.test"}'),
        ("a lone surrogate", b'{"email": "\\ud800@example.test"}'),
    ],
)
def test_a_malformed_json_body_is_a_400_with_a_code_on_every_json_route(
    client,
    session,
    gym,  # noqa: F811
    link,
    name,
    raw,
):
    before = snapshot(session)
    for path, headers in _routes(gym, link):
        response = client.post(path, data=raw, headers=headers, content_type="application/json")
        assert response.status_code == 400, (name, path, response.status_code)
        assert response.json["code"] in ("invalid_body", "webhook_malformed"), (name, path)
        assert response.json["message"]
    assert snapshot(session) == before


def _signed(body: bytes, delivery_id: str) -> dict[str, str]:
    timestamp = int(NOW.timestamp())
    return {
        "svix-id": delivery_id,
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, delivery_id, timestamp, body),
    }


def _user(**fields) -> dict:
    return {
        "id": "user_odd",
        "email_addresses": [
            {"id": "idn_1", "email_address": "odd@example.test", "verification": {"status": "x"}}
        ],
        "primary_email_address_id": "idn_1",
        "image_url": None,
        **fields,
    }


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("email an integer", {"type": "user.created", "data": _user(email_addresses=[{"id": 7}])}),
        ("image_url an object", {"type": "user.updated", "data": _user(image_url={"u": 1})}),
        ("id a list", {"type": "user.deleted", "data": {"id": ["user_odd"]}}),
        ("id longer than its column", {"type": "user.created", "data": _user(id="u" * 129)}),
        ("addresses an object", {"type": "user.created", "data": _user(email_addresses={})}),
        ("a lone surrogate kept", {"type": "user.created", "data": _user(image_url="\ud800")}),
    ],
)
def test_a_signed_identity_event_with_odd_types_is_a_400_and_changes_nothing(
    client, session, name, body
):
    raw = json.dumps(body).encode()
    before = snapshot(session)
    response = client.post(
        "/webhooks/identity",
        data=raw,
        headers=_signed(raw, f"msg_odd_{abs(hash(name))}"),
        content_type="application/json",
    )
    assert (response.status_code, response.json["code"]) == (400, "webhook_payload_invalid"), name
    assert snapshot(session) == before


def test_a_signed_identity_event_100_000_levels_deep_is_a_400(client, session):
    before = snapshot(session)
    raw = b'{"type": "user.created", "data": ' + DEEPER + b"}"
    response = client.post(
        "/webhooks/identity",
        data=raw,
        headers=_signed(raw, "msg_deep"),
        content_type="application/json",
    )
    assert (response.status_code, response.json["code"]) == (400, "webhook_payload_invalid")
    assert snapshot(session) == before


def test_depth_ignores_brackets_inside_strings():
    assert depth(b'{"a": "[[[[{{{{", "b": [1, {"c": "]\\"]"}]}') == 3
    assert depth(b"1") == 0


@pytest.mark.parametrize(
    ("route", "limit"),
    [
        ("public", PUBLIC_BODY_BYTES),
        ("member", MEMBER_BODY_BYTES),
        ("webhook", WEBHOOK_BODY_BYTES),
    ],
)
def test_a_body_over_its_route_class_limit_is_a_413_json_and_changes_nothing(
    client,
    session,
    gym,  # noqa: F811
    link,
    route,
    limit,
):
    path, headers = {
        "public": (f"/join/{link.token}/checkout-failed", {}),
        "member": (f"/organizations/{gym.id}/plans", gym[Role.owner].headers),
        "webhook": (f"/webhooks/card-provider/{gym.id}", {}),
    }[route]
    padding = "x" * (limit + 1)
    before = snapshot(session)
    response = client.post(path, json={"reason": padding}, headers=headers)
    assert response.status_code == 413
    assert response.json["code"] == "body_too_large"
    assert snapshot(session) == before
    within = client.post(path, json={"reason": "x" * 100}, headers=headers)
    assert within.status_code != 413
    # Just under the class's own limit is read (a signed-in route is not held to the public one).
    near = client.post(path, json={"reason": "x" * (limit - 1024)}, headers=headers)
    assert near.status_code != 413


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("put", "/organizations/{org}/join-enabled", {"joinEnabled": 0}, "joinEnabled"),
        ("put", "/organizations/{org}/join-enabled", {"joinEnabled": "false"}, "joinEnabled"),
        ("post", "/organizations/{org}/class-types",
         {"name": "Row", "defaultCapacity": "12", "durationMinutes": 45}, "defaultCapacity"),
        ("post", "/organizations/{org}/class-types",
         {"name": "Row", "defaultCapacity": 12, "durationMinutes": True}, "durationMinutes"),
        ("post", "/organizations/{org}/class-types",
         {"name": "Row", "defaultCapacity": 12.5, "durationMinutes": 45}, "defaultCapacity"),
        ("post", "/organizations/{org}/class-types",
         {"name": 7, "defaultCapacity": 12, "durationMinutes": 45}, "name"),
    ],
    ids=["0 for false", "'false' for false", "'12' for 12", "true for 1", "12.5 for an integer",
         "a number for a name"],
)  # fmt: skip
def test_a_value_of_another_json_type_is_a_400_not_coerced(
    client,
    session,
    gym,  # noqa: F811
    method,
    path,
    body,
    field,
):
    """The document says integer, boolean, string: the body is validated strictly as JSON.
    Coerced, `{"joinEnabled": 0}` turned joining off and `true` made a class of one."""
    before = snapshot(session)
    response = getattr(client, method)(
        path.format(org=gym.id), json=body, headers=gym[Role.owner].headers
    )
    assert response.status_code == 400, response.json
    assert response.json["code"] == "invalid_body"
    assert [f["field"] for f in response.json["fields"]] == [field]
    assert snapshot(session) == before


def test_a_null_body_is_a_400_not_an_empty_one(client, session, gym):  # noqa: F811
    """`null` read as no body: a join link was created, a brand published, from a body that
    is not an object (`[]`, `0` and `"x"` were refused already)."""
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/join-links",
        data=b"null",
        headers=gym[Role.owner].headers,
        content_type="application/json",
    )
    assert response.status_code == 400, response.json
    assert response.json["code"] == "invalid_body"
    assert snapshot(session) == before
    created = client.post(f"/organizations/{gym.id}/join-links", headers=gym[Role.owner].headers)
    assert created.status_code == 201, created.json  # no body at all: no fields, as before
