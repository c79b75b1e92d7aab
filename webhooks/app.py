"""The Flask app factory: `webhooks.app:create_app()` for gunicorn and the tests."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from datetime import date
from typing import Any

from flask import Flask, g, request
from flask.json.provider import DefaultJSONProvider
from sentry_sdk.integrations.flask import FlaskIntegration
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import Rule

from gymctl import clock as default_clock
from gymctl.access.platform_admin import PlatformAdmins
from gymctl.clock import Clock
from gymctl.config import Settings, get_settings
from gymctl.db import session_factory as default_session_factory
from gymctl.errors import invalid
from gymctl.identity.tokens import TokenVerifier, build_verifier
from gymctl.logs import configure_logging, request_id_var
from gymctl.providers.card import CardProvider
from gymctl.providers.identity_admin import IdentityAdmin, identity_admin_from_settings
from gymctl.providers.mail import Mailer, mailer_from_settings
from gymctl.providers.storage import ObjectStore, storage_from_settings
from gymctl.tracking import init_error_tracking
from webhooks import codes, errors, guard
from webhooks.blueprints import (
    admin,
    billing,
    billing_ops,
    billing_settings,
    bookings,
    branding,
    branding_assets,
    bridge,
    cancellations,
    health,
    identity,
    invitations,
    join,
    legal,
    minisites,
    movements,
    openapi,
    organizations,
    releases,
    tasks,
    testing,
    users,
)
from webhooks.bodies import apply_body_limit
from webhooks.context import Services

log = logging.getLogger("gymctl.api")
REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class JsonProvider(DefaultJSONProvider):
    """Instants in ISO 8601, as the OpenAPI document's date-time says (Flask's own default
    writes an HTTP date, "Wed, 25 Nov 2026 00:00:00 GMT"); keys in the order built."""

    sort_keys = False

    @staticmethod
    def default(o: Any) -> Any:
        if isinstance(o, date):  # a datetime is a date
            return o.isoformat()
        return DefaultJSONProvider.default(o)


class LazyRule(Rule):
    """A route whose URL builders are compiled when a URL is first built from it. Werkzeug
    compiles two per route as it is added (generated Python: 0.8 ms a route, 150 ms of the
    app's 174, measured: two thirds of create_app, paid by every gunicorn worker and every test
    app), and the API never builds a URL from a route (no url_for)."""

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        compile_now = super()._compile_builder
        compiled: list[Callable[..., tuple[str, str]]] = []

        def build(rule: Rule, /, **values: Any) -> tuple[str, str]:  # a value may be "rule"
            if not compiled:
                compiled.append(compile_now(append_unknown))
            return compiled[0](rule, **values)

        return build


class App(Flask):
    json_provider_class = JsonProvider
    url_rule_class = LazyRule

    def log_exception(self, exc_info) -> None:
        """Flask logs an unhandled exception's full text; ours leaves database values out."""
        errors.log_unhandled(exc_info[1])


def create_app(
    settings: Settings | None = None,
    *,
    session_factory: sessionmaker[Session] | None = None,
    verifier: TokenVerifier | None = None,
    clock: Clock | None = None,
    mailer: Mailer | None = None,
    identity_admin: IdentityAdmin | None = None,
    store: ObjectStore | None = None,
    card_provider: CardProvider | None = None,
) -> Flask:
    settings = settings or get_settings()
    settings.check()
    configure_logging(settings.log_level)
    init_error_tracking(settings, FlaskIntegration())
    clock = clock or default_clock
    if verifier is None and (settings.identity_public_key_pem or settings.identity_api_url):
        verifier = build_verifier(settings, clock=clock)

    app = App("gymctl")
    if settings.proxy_hops:
        # Only the configured proxies' X-Forwarded-For hops are believed (the last N).
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=settings.proxy_hops, x_proto=settings.proxy_hops
        )
    session_factory = session_factory or default_session_factory()
    identity_admin = identity_admin or identity_admin_from_settings(
        settings, session_factory, clock=clock
    )
    app.extensions["gymctl"] = Services(
        settings=settings,
        session_factory=session_factory,
        verifier=verifier,
        clock=clock,
        mailer=mailer or mailer_from_settings(settings, clock=clock),
        identity_admin=identity_admin,
        platform_admins=PlatformAdmins(identity_admin, clock),
        store=store or storage_from_settings(settings, clock=clock),
        injected_card_provider=card_provider,
    )
    app.before_request(_start_request)
    app.before_request(apply_body_limit)
    guard.install(app)
    app.after_request(_finish_request)
    app.teardown_request(_close_session)
    errors.register(app)
    for blueprint in (
        health.bp, identity.bp, users.bp, openapi.bp, organizations.bp, invitations.bp,
        join.bp, legal.bp, admin.bp, branding_assets.bp, billing.bp, movements.bp,
        branding.bp, minisites.bp, bridge.bp, bookings.bp, releases.bp, cancellations.bp,
        billing_ops.bp, billing_settings.bp, tasks.bp,
    ):  # fmt: skip
        app.register_blueprint(blueprint)
    if not settings.is_production:
        app.register_blueprint(testing.bp)  # spec B 4.4: the hooks do not exist in production
    return app


def _start_request() -> None:
    given = request.headers.get("X-Request-Id", "")
    g.request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
    g.request_token = request_id_var.set(g.request_id)
    g.started = time.perf_counter()
    if "\x00" in request.path:
        raise invalid(codes.PATH_INVALID, "the path contains a NUL character")


def _finish_request(response):
    """Commit at the edge: a successful response commits the request's session."""
    session = g.get("db")
    if session is not None:
        if response.status_code < 400 or g.get("commit_refusal"):
            session.commit()
        else:
            session.rollback()
    response.headers["X-Request-Id"] = g.get("request_id", "")
    auth = g.get("auth")
    log.info(
        "%s %s %s",
        request.method,
        request.path,
        response.status_code,
        extra={
            "status": response.status_code,
            "durationMs": round(
                (time.perf_counter() - g.get("started", time.perf_counter())) * 1000, 2
            ),
            "userId": auth.user_id if auth else None,
        },
    )
    return response


def _close_session(_error: BaseException | None) -> None:
    session = g.pop("db", None)
    if session is not None:
        session.close()
    token = g.pop("request_token", None)
    if token is not None:
        request_id_var.reset(token)
