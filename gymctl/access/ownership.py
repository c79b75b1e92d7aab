"""Email ownership (spec A 5.3): unproven logins, linking gym-created profiles, Mark email
verified. A login whose address is unproven is never linked to the profile a gym created under
that address: the person could be anyone who typed it. Once an operator confirms ownership out of
band, the next /users/me links the profile and releases held invitations."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, exists, select, update
from sqlalchemy.orm import Session

from gymctl.access.folding import fold_person
from gymctl.access.invitations import release_held
from gymctl.db import locked_row
from gymctl.events import EventKind, emit
from gymctl.models import Invitation, LegalConsent, User
from gymctl.models.identity import same_address


def awaiting_consent(profile_id) -> ColumnElement[bool]:
    """A profile a gym made for the address of an existing login: only that person's consent
    (accepting the link request) links it, never signing in (gymctl.access.invitations)."""
    return exists().where(Invitation.profile_user_id == profile_id)


def unlinked_profiles(session: Session, email: str) -> list[User]:
    """Rows a gym created under this address that no login owns yet, oldest first."""
    return list(
        session.scalars(
            select(User)
            .where(
                same_address(User.email, email),
                User.identity_id.is_(None),
                User.deleted_at.is_(None),
                ~awaiting_consent(User.id),
            )
            .order_by(User.created_at, User.id)
        )
    )


def link_profiles(session: Session, login: User, *, now: datetime) -> User:
    """Give the oldest gym-created profile the login's identity (the gym's records keep pointing
    at it) and fold the login row and any other profiles into it. Returns the linked row.

    The login's row is locked and read fresh first: two /users/me at once (the web app and the
    mobile app) both read the profile unlinked, and the second folded the login again and
    audited a second user.linked; it now answers with the row the first linked."""
    identity_id = login.identity_id
    login = locked_row(session, User, login.id)
    if identity_id is not None and login.identity_id != identity_id:
        return session.scalar(select(User).where(User.identity_id == identity_id)) or login
    profiles = unlinked_profiles(session, login.email or "")
    if not profiles or login.email_verified_at is None:
        return login
    target, others = profiles[0], profiles[1:]
    for source in [login, *others]:
        _move_records(session, source, target, now=now)
        source.deleted_at = now
        source.updated_at = now
    login.identity_id = None
    session.flush()
    target.identity_id = identity_id
    target.image_url = login.image_url or target.image_url
    target.email_verified_at = login.email_verified_at
    target.email_verified_by = login.email_verified_by
    target.updated_at = now
    emit(
        session,
        EventKind.audit,
        "user.linked",
        at=now,
        aggregate_type="user",
        aggregate_id=target.id,
        payload={"loginRowId": str(login.id), "mergedProfiles": [str(p.id) for p in others]},
    )
    session.flush()
    return target


def _move_records(session: Session, source: User, target: User, *, now: datetime) -> None:
    """What the source row holds follows the person (folding.fold_person), consents too, but
    for a document the target accepted already."""
    fold_person(session, source, target, now=now)
    accepted = set(
        session.scalars(select(LegalConsent.document_id).where(LegalConsent.user_id == target.id))
    )
    session.execute(
        update(LegalConsent)
        .where(LegalConsent.user_id == source.id, LegalConsent.document_id.not_in(accepted))
        .values(user_id=target.id)
    )
    session.flush()


def settle_ownership(session: Session, user: User, *, now: datetime) -> User:
    """What the next /users/me does for a proven login: link profiles, release held invitations."""
    user = link_profiles(session, user, now=now)
    release_held(session, user, now=now)
    return user


def mark_email_verified(
    session: Session, user: User, *, actor_user_id: uuid.UUID | None, actor: str, now: datetime
) -> bool:
    """An operator confirmed ownership out of band. False when it was already proven.

    The row is locked and read fresh first: two marks at once (two operators, or a button
    pressed twice) both read the address unproven on PostgreSQL, and the second answered
    changed too and audited a second user.email_verified; it is now a repeat."""
    user = locked_row(session, User, user.id)
    if user.email_verified_at is not None:
        return False
    user.email_verified_at = now
    user.email_verified_by = actor
    user.updated_at = now
    emit(
        session,
        EventKind.audit,
        "user.email_verified",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        actor_user_id=actor_user_id,
        payload={"verifiedBy": actor, "platformAdmin": True},
    )
    session.flush()
    return True
