"""`gymctl serve` on the embedded default, as an attacker and as a gym owner: gunicorn's own
refusals answer JSON, and an image upload (rate-limited in the request's own session) is not
held behind SQLite's write lock."""

from __future__ import annotations

import io
import json
import socket
import subprocess

import httpx
import pytest
from PIL import Image

from tests.test_quickstart import GYMCTL, free_port, gymctl, home_env, wait_for  # noqa: F401


@pytest.fixture
def served(home_env):  # noqa: F811
    out = json.loads(gymctl(home_env, "quickstart", "--json").stdout)
    port = free_port()
    server = subprocess.Popen(
        [*GYMCTL, "serve", "--port", str(port), "--workers", "1"],
        env=home_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/health")
        yield f"http://127.0.0.1:{port}", out
    finally:
        server.terminate()
        server.wait(timeout=15)


def _raw(base: str, request: bytes) -> tuple[str, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def test_gunicorn_refusals_answer_json_not_html(served):
    base, _ = served
    status, headers, body = _raw(
        base, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    )
    assert status.startswith("HTTP/1.1 4")
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["code"] in ("headers_too_large", "bad_request")

    status, headers, body = _raw(base, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status.startswith("HTTP/1.1 414")
    assert json.loads(body)["code"] == "request_line_too_long"


def test_an_image_upload_under_serve_on_sqlite_is_stored_at_once(served):
    """The upload throttle counted in a second session, which waited 30 s on the request's own
    write lock and answered 500."""
    base, out = served
    headers = {"Authorization": f"Bearer {out['token']}"}
    me = httpx.get(f"{base}/users/me", headers=headers, timeout=10).json()
    org_id = me["activeOrganization"]["id"]
    image = io.BytesIO()
    logo = Image.new("RGBA", (512, 256), (0, 0, 0, 0))
    logo.paste((200, 30, 30, 255), (64, 64, 448, 192))
    logo.save(image, "PNG")
    upload = httpx.post(
        f"{base}/organizations/{org_id}/branding/assets/logo",
        headers=headers,
        files={"file": ("logo.png", image.getvalue(), "image/png")},
        timeout=20,
    )
    assert upload.status_code == 201, upload.text
