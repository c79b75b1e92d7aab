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


def _chunked(path: str, chunks: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode() + chunks


def _chunks(body: bytes, size: int = 8192) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def test_a_chunked_body_is_read_whole_and_its_limit_holds(served):
    """A chunked body has no declared length: werkzeug stopped reading it at the route's limit
    without a word, and the route parsed the head of a 20 MB body ("not JSON", 400). A small
    one reads as a declared one does; one past the limit is 413, as a declared length is."""
    base, _ = served
    small = b'{"reason": "declined"}'
    status, _, body = _raw(base, _chunked("/join/x/checkout-failed", _chunks(small, 7)))
    assert (status.split()[1], json.loads(body)["code"]) == ("404", "join_link_not_found")

    big = b'{"reason": "' + b"x" * (200 * 1024) + b'"}'
    status, _, body = _raw(base, _chunked("/join/x/checkout-failed", _chunks(big)))
    assert (status.split()[1], json.loads(body)["code"]) == ("413", "body_too_large")


@pytest.mark.parametrize(
    "framing",
    [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n"],
    ids=["chunk size not hex", "chunk without its terminator"],
)
def test_a_malformed_chunked_body_is_a_400_not_a_500(served, framing):
    """gunicorn raises its ParseException as the route reads the body: it reached the view as
    an unhandled error (500) on every route that reads one, webhooks included."""
    base, _ = served
    for path in ("/webhooks/identity", "/join/x/request-invite"):
        status, headers, body = _raw(base, _chunked(path, framing))
        assert status.split()[1] == "400", (path, status)
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["code"] == "invalid_body"
