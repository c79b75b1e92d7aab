"""Error tracking: with SENTRY_DSN an unexpected fault reaches a (loopback) Sentry endpoint with
the request's user id; unset, nothing is sent."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import sentry_sdk
from pydantic import SecretStr

from tests.conftest import NOW
from webhooks.app import create_app


class Collector:
    """A stand-in Sentry ingest endpoint that keeps every envelope it is sent."""

    def __init__(self) -> None:
        self.envelopes: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector.envelopes.append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def dsn(self) -> str:
        return f"http://publickey@127.0.0.1:{self.server.server_address[1]}/1"


@pytest.fixture
def collector():
    sentry_sdk.init(dsn=None)
    collector = Collector()
    yield collector
    sentry_sdk.get_client().close()
    sentry_sdk.init(dsn=None)
    collector.server.shutdown()


def _app_with_fault(settings, session_factory, clock):
    app = create_app(settings, session_factory=session_factory, clock=clock)

    @app.get("/fault")
    def fault():
        raise RuntimeError("unexpected fault")

    return app


def test_a_fault_reaches_error_tracking_with_the_user_id(
    settings, session_factory, clock, idp, collector
):
    settings.sentry_dsn = SecretStr(collector.dsn)
    client = _app_with_fault(settings, session_factory, clock).test_client()
    token = idp.token("user_tracked", now=NOW)
    response = client.get("/fault", headers={"Authorization": f"Bearer {token}"})
    assert (response.status_code, response.json["code"]) == (500, "internal_error")
    sentry_sdk.flush(timeout=5)
    sent = b"".join(collector.envelopes)
    assert b"unexpected fault" in sent
    assert b"user_tracked" in sent


def test_nothing_is_sent_when_sentry_dsn_is_unset(settings, session_factory, clock, idp, collector):
    assert settings.sentry_dsn is None
    client = _app_with_fault(settings, session_factory, clock).test_client()
    token = idp.token("user_tracked", now=NOW)
    assert client.get("/fault", headers={"Authorization": f"Bearer {token}"}).status_code == 500
    sentry_sdk.flush(timeout=1)
    assert sentry_sdk.get_client().transport is None
    assert collector.envelopes == []
