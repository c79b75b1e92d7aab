"""The identity provider's webhook events with access's rule on sign-up: a new login accepts
the invitations sent to its address (spec A 3, 5.3). Composed here, above identity and access,
so that identity never imports access; both doors (the webhook, the demo) call this."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.access.invitations import accept_on_sign_up
from gymctl.config import Settings
from gymctl.identity import users


def user_created(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    user, outcome = users.user_created(session, data, now=now, settings=settings)
    accept_on_sign_up(session, user, now=now)
    return outcome


HANDLERS: dict[str, users.Handler] = {**users.HANDLERS, "user.created": user_created}


def apply_identity_event(
    session: Session, delivery_id: str, event: Any, *, now: datetime, settings: Settings
) -> str:
    """Apply one verified delivery once (gymctl.identity.users.apply_identity_event)."""
    return users.apply_identity_event(
        session, delivery_id, event, handlers=HANDLERS, now=now, settings=settings
    )
