"""Legal consent (spec A 2.6, 4): per required type, the latest published document wins."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access import codes
from gymctl.errors import not_found
from gymctl.events import EventKind, emit
from gymctl.models import LegalConsent, LegalDocument, LegalDocumentType, User
from gymctl.models.integrity import UniqueViolation, unique_violation

CONSENT_KEY = "uq_legal_consents_user_id_document_id"  # one consent per person and document


def latest_documents(session: Session, *, now: datetime) -> dict[LegalDocumentType, LegalDocument]:
    latest: dict[LegalDocumentType, LegalDocument] = {}
    for document in session.scalars(
        select(LegalDocument)
        .where(LegalDocument.published_at <= now)
        .order_by(LegalDocument.published_at)
    ):
        latest[document.type] = document
    return latest


def consent_status(session: Session, user: User, *, now: datetime) -> list[dict[str, Any]]:
    """One entry per required type; a type without a published document counts as owed."""
    latest = latest_documents(session, now=now)
    accepted = {
        consent.document_id: consent
        for consent in session.scalars(
            select(LegalConsent).where(
                LegalConsent.user_id == user.id,
                LegalConsent.document_id.in_([d.id for d in latest.values()]),
            )
        )
    }
    entries = []
    for doc_type in LegalDocumentType:
        document = latest.get(doc_type)
        consent = accepted.get(document.id) if document else None
        entries.append(
            {
                "type": doc_type.value,
                "owed": consent is None,
                "document": None
                if document is None
                else {
                    "id": str(document.id),
                    "version": document.version,
                    "locale": document.locale,
                    "url": document.url,
                    "publishedAt": document.published_at.isoformat(),
                },
                "acceptedAt": consent.accepted_at.isoformat() if consent else None,
            }
        )
    return entries


def record_consent(
    session: Session,
    user: User,
    document_id: uuid.UUID,
    *,
    ip: str | None,
    user_agent: str | None,
    now: datetime,
) -> LegalConsent:
    """Accept a published document; accepting it again keeps the first record."""
    document = session.get(LegalDocument, document_id)
    if document is None or document.published_at > now:
        raise not_found(codes.LEGAL_DOCUMENT_NOT_FOUND, "no such published document")
    existing = _consent(session, user.id, document_id)
    if existing is not None:
        return existing
    consent = LegalConsent(
        user_id=user.id,
        document_id=document_id,
        accepted_at=now,
        ip=ip,
        user_agent=(user_agent or "")[:512] or None,
    )
    # Two at once (a double tap, the app's retry) both read none: the second's insert broke the
    # one-consent key on PostgreSQL (a 500); it answers with the first's record instead.
    try:
        with unique_violation(CONSENT_KEY), session.begin_nested():
            session.add(consent)
    except UniqueViolation:
        return _consent(session, user.id, document_id)
    emit(
        session,
        EventKind.audit,
        "legal.consent_recorded",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        actor_user_id=user.id,
        payload={"type": document.type.value, "version": document.version},
    )
    session.flush()
    return consent


def _consent(session: Session, user_id: uuid.UUID, document_id: uuid.UUID) -> LegalConsent | None:
    return session.scalar(
        select(LegalConsent).where(
            LegalConsent.user_id == user_id, LegalConsent.document_id == document_id
        )
    )
