"""Small row factories with meaningful traits; each flushes and returns the row."""

from __future__ import annotations

import itertools
from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.models import (
    LegalConsent,
    LegalDocument,
    LegalDocumentType,
    Membership,
    MembershipStatus,
    Organization,
    Role,
    User,
)

_seq = itertools.count(1)


def user(
    session: Session,
    *,
    identity_id: str | None = "auto",
    email: str | None = None,
    deleted_at: datetime | None = None,
    **fields,
) -> User:
    n = next(_seq)
    row = User(
        identity_id=f"user_test{n}" if identity_id == "auto" else identity_id,
        email=email if email is not None else f"person{n}@example.test",
        deleted_at=deleted_at,
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def organization(session: Session, *, name: str | None = None, **fields) -> Organization:
    n = next(_seq)
    row = Organization(name=name or f"Gym {n}", slug=f"gym-{n}", **fields)
    session.add(row)
    session.flush()
    return row


def membership(
    session: Session,
    *,
    user: User,
    organization: Organization,
    role: Role = Role.member,
    status: MembershipStatus = MembershipStatus.active,
    **fields,
) -> Membership:
    row = Membership(
        user_id=user.id, organization_id=organization.id, role=role, status=status, **fields
    )
    session.add(row)
    session.flush()
    return row


def legal_document(
    session: Session, *, type: LegalDocumentType, published_at: datetime, version: str = "1"
) -> LegalDocument:
    row = LegalDocument(
        type=type,
        version=version,
        locale="en",
        url=f"https://legal.example.test/{type}/{version}",
        published_at=published_at,
    )
    session.add(row)
    session.flush()
    return row


def consent(
    session: Session, *, user: User, document: LegalDocument, accepted_at: datetime
) -> LegalConsent:
    row = LegalConsent(user_id=user.id, document_id=document.id, accepted_at=accepted_at)
    session.add(row)
    session.flush()
    return row
