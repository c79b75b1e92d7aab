"""What a request handler reaches for: its database session, its auth payload, the clock."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from flask import current_app, g, request
from sqlalchemy.orm import Session, sessionmaker

from gymctl.access.invitations import Outreach
from gymctl.access.platform_admin import PlatformAdmins
from gymctl.clock import Clock
from gymctl.config import Settings
from gymctl.crypto import FieldCipher, billing_cipher
from gymctl.identity.auth import Auth
from gymctl.identity.tokens import TokenVerifier
from gymctl.providers.card import CardProvider
from gymctl.providers.card_factory import card_provider_from_settings
from gymctl.providers.identity_admin import IdentityAdmin
from gymctl.providers.mail import Mailer
from gymctl.providers.storage import ObjectStore
from gymctl.retention.copy import pick_locale


@dataclass
class Services:
    settings: Settings
    session_factory: sessionmaker[Session]
    verifier: TokenVerifier | None
    clock: Clock
    mailer: Mailer
    identity_admin: IdentityAdmin
    platform_admins: PlatformAdmins
    store: ObjectStore
    injected_card_provider: CardProvider | None = None

    @property
    def outreach(self) -> Outreach:
        return Outreach(self.settings, self.mailer, self.identity_admin)

    @functools.cached_property
    def card_provider(self) -> CardProvider:
        return self.injected_card_provider or card_provider_from_settings(self.settings)

    @functools.cached_property
    def billing_cipher(self) -> FieldCipher:
        return billing_cipher(self.settings)


def services() -> Services:
    return current_app.extensions["gymctl"]


def db() -> Session:
    """The request's session, opened on first use; committed after a successful response."""
    if "db" not in g:
        g.db = services().session_factory()
    return g.db


def handover() -> sessionmaker[Session]:
    """The session factory, for domain work that commits on sessions of its own (money paths
    that store an attempt before calling a provider, publishing). The request's transaction
    ends first so that it holds no lock meanwhile: on the embedded default the second session
    would otherwise wait on the first one's write lock (STYLE 13). The request's session stays
    usable afterwards; it begins a new transaction on its next statement."""
    if "db" in g:
        g.db.commit()
    return services().session_factory


def auth() -> Auth:
    return g.auth


def now() -> datetime:
    return services().clock.now()


def client_locale() -> str:
    """The client's language: X-Locale (the apps send it on every request), else
    Accept-Language, else en."""
    return pick_locale(request.headers.get("X-Locale"), request.headers.get("Accept-Language"))


def client_ip() -> str | None:
    """The caller's address: the peer, or what the GYMCTL_PROXY_HOPS trusted proxies say it is
    (werkzeug's ProxyFix, installed by the app, rewrites remote_addr; a header from anyone
    else is ignored)."""
    address = request.remote_addr
    return address[:64] if address else None
