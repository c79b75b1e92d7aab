"""The request auth payload (spec A 2.2), built by the API guard and read by controllers."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from gymctl.models import User


@dataclass
class Auth:
    """userId is the provider subject, not the database id (use user.id for that). `user` is
    None when the login has no row yet (webhook late or failed): controllers must tolerate it."""

    user_id: str
    session_id: str
    user: User | None
    role: str | None = None


# Built once: every authenticated request runs it (statement construction is not free).
_USER_BY_IDENTITY = select(User).where(User.identity_id == bindparam("identity_id"))


def user_by_identity(session: Session, identity_id: str) -> User | None:
    """The row linked to a login, soft-deleted rows included (callers decide what that means)."""
    return session.scalar(_USER_BY_IDENTITY, {"identity_id": identity_id})


def build_auth(
    session: Session, *, identity_id: str, session_id: str, role: str | None = None
) -> Auth:
    return Auth(
        user_id=identity_id,
        session_id=session_id,
        user=user_by_identity(session, identity_id),
        role=role,
    )
