"""An upload sent chunked (Transfer-Encoding: chunked, no Content-Length: browsers' streaming
uploads and many HTTP clients send one so) is read against the upload's own limit, as one with
a length is (spec A 7: brand_asset_size is "body over MAX_BRAND_ASSET_BYTES (400)"). A hunt in
s63 found it read ahead at the signed-in JSON routes' 1 MiB before the route raised its limit:
a valid logo of a few MB was refused 413 body_too_large, and one past the asset limit answered
413 body_too_large instead of 400 brand_asset_size."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from gymctl.models import Role
from tests.assets.test_routes import added_events, last_event_id, state

pytestmark = pytest.mark.embedded

BOUNDARY = "s63chunkedboundary"


def _noisy_logo(side: int = 900) -> bytes:
    """A valid logo (a transparent PNG within 4096 px) of a few MB: noise does not compress."""
    out = io.BytesIO()
    Image.frombytes("RGBA", (side, side), os.urandom(side * side * 4)).save(out, "PNG")
    return out.getvalue()


def _chunked(client, path, data: bytes, headers):
    body = (
        (
            f"--{BOUNDARY}\r\n"
            'Content-Disposition: form-data; name="file"; filename="logo.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return client.post(
        path,
        input_stream=io.BytesIO(body),
        headers={**headers, "Transfer-Encoding": "chunked"},
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
        environ_overrides={"wsgi.input_terminated": True},  # as gunicorn sets it
    )


def test_a_logo_of_a_few_mb_sent_chunked_is_stored(client, gym):
    data = _noisy_logo()
    assert 1024 * 1024 < len(data) < 16 * 1024 * 1024

    response = _chunked(
        client, f"/organizations/{gym.id}/branding/assets/logo", data, gym[Role.owner].headers
    )

    assert response.status_code == 201, response.get_json()


def test_a_chunked_upload_past_the_asset_limit_is_refused_brand_asset_size(
    settings, session_factory, session, clock, gym
):
    from webhooks.app import create_app

    settings.max_brand_asset_bytes = 2 * 1024 * 1024
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    before, mark = state(session), last_event_id(session)

    response = _chunked(
        client,
        f"/organizations/{gym.id}/branding/assets/logo",
        _noisy_logo() + b"\0" * (2 * 1024 * 1024),
        gym[Role.owner].headers,
    )

    assert (response.status_code, response.json["code"]) == (400, "brand_asset_size")
    assert state(session) == before
    assert added_events(session, mark) == [
        ("branding.asset_rejected", "brand_asset_size"),
        ("api.request_failed", "brand_asset_size"),
    ]


def test_a_json_route_still_refuses_a_chunked_body_past_its_limit(client, gym):
    """The route class's limit stands for every route that does not read its own body."""
    response = client.put(
        f"/organizations/{gym.id}/branding/assets",
        input_stream=io.BytesIO(b'{"assets": {"logo": "' + b"a" * (1024 * 1024 + 10) + b'"}}'),
        headers={**gym[Role.owner].headers, "Transfer-Encoding": "chunked"},
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert (response.status_code, response.json["code"]) == (413, "body_too_large")
