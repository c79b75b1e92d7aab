"""What a request handler reaches for: its database session, its auth payload, the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flask import current_app, g
from sqlalchemy.orm import Session, sessionmaker

from gymctl.clock import Clock
from gymctl.config import Settings
from gymctl.identity.auth import Auth
from gymctl.identity.tokens import TokenVerifier


@dataclass
class Services:
    settings: Settings
    session_factory: sessionmaker[Session]
    verifier: TokenVerifier | None
    clock: Clock


def services() -> Services:
    return current_app.extensions["gymctl"]


def db() -> Session:
    """The request's session, opened on first use; committed after a successful response."""
    if "db" not in g:
        g.db = services().session_factory()
    return g.db


def auth() -> Auth:
    return g.auth


def now() -> datetime:
    return services().clock.now()
