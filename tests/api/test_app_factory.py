"""What create_app shares or defers so that a worker (and each test's app) starts in 15 ms,
not 230 ms: the routes' URL builders, compiled on first use (webhooks.app.LazyRule), and one
TLS context for every outside client (gymctl.providers.http_client)."""

from __future__ import annotations

import ssl
import uuid

from flask import url_for

from gymctl.identity.tokens import build_verifier
from gymctl.providers import http_client
from gymctl.providers.identity_admin import HttpIdentityAdmin
from webhooks.app import LazyRule


def test_the_routes_build_urls_as_werkzeug_does_when_asked(app):
    """No route builds a URL today; one that does gets what werkzeug's own builder gives."""
    rules = list(app.url_map.iter_rules())
    assert rules
    assert all(isinstance(rule, LazyRule) for rule in rules)
    adapter = app.url_map.bind("api.example.test")
    org_id = uuid.UUID("0b6f3c1e-8d2a-4d6b-9a51-3f1c2e7d9a10")
    roster = "organizations.roster"
    assert adapter.build(roster, {"org_id": org_id}) == f"/organizations/{org_id}/members"
    # Values the route does not name go to the query string (the other builder).
    assert adapter.build(roster, {"org_id": org_id, "page": 2}) == (
        f"/organizations/{org_id}/members?page=2"
    )
    assert adapter.build(roster, {"org_id": org_id, "rule": "x"}) == (  # the builder's own name
        f"/organizations/{org_id}/members?rule=x"
    )
    assert adapter.build(roster, {"org_id": org_id}, force_external=True) == (
        f"http://api.example.test/organizations/{org_id}/members"
    )
    with app.test_request_context():
        assert url_for("health.health") == "/health"


def _context(client) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # httpx's transport, httpcore's pool


def test_the_apps_outside_clients_share_one_tls_context_that_verifies(settings):
    shared = http_client.tls_context()
    assert shared.verify_mode == ssl.CERT_REQUIRED
    assert shared.check_hostname
    verifier = build_verifier(settings)
    admin = HttpIdentityAdmin(settings.identity_api_url, "sk_test")
    made = http_client.new_client(timeout=3)
    try:
        assert _context(verifier._key_set._client) is shared
        assert _context(admin._client) is shared
        assert _context(made) is shared
    finally:
        made.close()
