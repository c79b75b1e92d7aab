"""The platform-admin guard asks the identity provider for the caller's private metadata (spec A
5.2; cached a minute): on the embedded default, with the outside-call detector on
(tests/embedded_outside_calls.py), no write lock is held while the provider answers (decisions
s42). A hunt in s54 found the guard asking inside the request's transaction, which the lookup
of a login with no users row yet had begun (BEGIN IMMEDIATE on SQLite) and only a recorded
session would have committed."""

# ruff: noqa: F811 (the fixture imported is redefined as a test argument)

from __future__ import annotations

from tests.conftest import NOW
from tests.embedded_outside_calls import factory, watching  # noqa: F401 (fixture)
from webhooks.app import create_app


def test_the_admin_guard_holds_no_write_lock_for_a_login_without_a_row(
    settings, clock, idp, factory
):
    app = create_app(settings, session_factory=factory, clock=clock)
    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={"platformRole": "admin"})
    headers = {"Authorization": f"Bearer {idp.token('user_ops', now=NOW)}"}

    with watching() as seen:
        response = app.test_client().get("/admin/legal-documents", headers=headers)

    assert response.status_code == 200, response.json
    assert "httpx" in seen.doors()  # the provider was asked
    assert not seen.calls, seen.report()
