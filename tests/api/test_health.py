"""GET /health: database reachability and version; 503 when the database is down."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

import gymctl
from gymctl import migrate
from gymctl.models import Role
from tests.access.conftest import gym, platform_admin  # noqa: F401 (fixtures)
from webhooks.app import create_app


@pytest.mark.embedded
def test_health_reports_the_database_and_the_revision(settings, session_factory, clock, engine):
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json
    assert body["status"] == "ok"
    assert body["version"] == gymctl.__version__
    assert body["database"]["reachable"] is True
    assert body["database"]["revision"] == migrate.head()
    assert "server" not in body["database"]


def test_health_hides_the_database_server_version_from_anonymous_callers(client):
    """The server's version tells an attacker which exploits to try."""
    body = client.get("/health").json
    assert body["status"] == "ok"
    assert "server" not in body["database"]
    assert "sqlite" not in str(body)


def test_admin_health_shows_the_database_server_version_to_platform_admins(
    client,
    platform_admin,  # noqa: F811
    gym,  # noqa: F811
    engine,
):
    admin = client.get("/admin/health", headers=platform_admin.headers)
    assert admin.status_code == 200
    assert admin.json["database"]["server"].startswith(
        "sqlite" if engine.dialect.name == "sqlite" else "1"
    )
    refused = client.get("/admin/health", headers=gym[Role.owner].headers)
    assert refused.status_code == 403
    assert client.get("/admin/health").status_code == 401


def test_health_is_503_when_the_database_is_down(settings, clock):
    down = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/nowhere", connect_args={"connect_timeout": 2}
    )
    client = create_app(
        settings, session_factory=sessionmaker(bind=down), clock=clock
    ).test_client()
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json["status"] == "unavailable"
    assert response.json["database"]["reachable"] is False


def test_health_needs_no_token(client):
    assert client.get("/health").status_code == 200


def test_unknown_route_is_a_json_404(client):
    response = client.get("/nowhere")
    assert (response.status_code, response.json["code"]) == (404, "not_found")


def test_an_unexpected_fault_is_a_json_500_without_details(app):
    @app.get("/boom")
    def boom():
        raise RuntimeError("secret internals")

    response = app.test_client().get("/boom", headers={"Authorization": "Bearer x"})
    # The guard refuses before the handler: the route is not public.
    assert response.status_code == 401

    boom.gymctl_public = True
    response = app.test_client().get("/boom")
    assert (response.status_code, response.json["code"]) == (500, "internal_error")
    assert "secret" not in response.get_data(as_text=True)
