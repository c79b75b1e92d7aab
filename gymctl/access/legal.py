"""Legal consent (spec A 2.6, 4): per required type, the latest published document wins.

Platform operators publish the documents (publish_document: `gymctl legal publish`, POST
/admin/legal-documents) and list them (list_documents); members read their status and consent.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access import codes
from gymctl.clock import ensure_utc
from gymctl.db import advisory_lock
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import LegalConsent, LegalDocument, LegalDocumentType, User
from gymctl.models.integrity import UniqueViolation, unique_violation

CONSENT_KEY = "uq_legal_consents_user_id_document_id"  # one consent per person and document
PUBLISH_LOCK = "legal_documents:publish"
VERSION_MAX, LOCALE_MAX, URL_MAX = 64, 16, 2048  # the columns' lengths
# A BCP 47 tag's shape: a 2-3 letter language, then subtags (region, script, variant).
_LOCALE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")


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


# --- publishing (platform operators) -----------------------------------------------------------


def publish_document(
    session: Session,
    *,
    type: str,
    version: str,
    url: str,
    locale: str = "en",
    published_at: datetime | None = None,
    actor_user_id: uuid.UUID | None,
    actor: str,
    now: datetime,
) -> LegalDocument:
    """Publish a new version of a legal document; from its published_at it is the type's
    current document, and everyone who consented only to an older one owes consent again
    (GET /legal/consents/status, pendingLegalConsents of GET /users/me).

    The rules, each refusal changing nothing:
    - type is terms_of_use, privacy_policy or fitness_waiver, else 422
      legal_document_type_invalid.
    - version is 1 to 64 printable characters (trimmed), else 422
      legal_document_version_invalid; it is new for its type and locale, else 409
      legal_document_version_taken (a version names one text for good: consents point at it).
    - locale is a BCP 47 tag (en, es-ES, pt-BR; at most 16 characters), stored in its
      canonical case, else 422 legal_document_locale_invalid. The status picks per type, not
      per locale (spec A 2.6): a document of any locale becomes everyone's current one.
    - url is an absolute https URL with a host, no credentials, no spaces or control
      characters, at most 2048 characters, else 422 legal_document_url_invalid.
    - published_at defaults to now and may be in the future: the document is scheduled, the
      status keeps the current one until then, and a consent to it is refused until then. It
      may not be in the past, else 422 legal_document_backdated: a backdated version would
      either lose to the current one at once (a later published_at, silently never shown) or
      replace it while claiming to have been in force when members consented to the other.
      Another document of the type at that very instant is 409
      legal_document_published_at_taken: the status would pick one of the two at random.
      A document scheduled later than this one still takes over at its own time.

    Publishes are serialized by one lock, so two at once cannot both take a version or an
    instant. Audited (legal.document_published) with the actor, as a platform-admin action."""
    now = ensure_utc(now)
    doc_type = _document_type(type)
    version = _version(version)
    locale = _locale(locale)
    url = _url(url)
    at = now if published_at is None else ensure_utc(published_at)
    if at < now:
        raise unprocessable(
            codes.LEGAL_DOCUMENT_BACKDATED,
            f"published_at {at.isoformat()} is in the past: publish now or later",
        )
    advisory_lock(session, PUBLISH_LOCK)
    same_type = select(LegalDocument.id).where(LegalDocument.type == doc_type)
    if session.scalar(
        same_type.where(LegalDocument.locale == locale, LegalDocument.version == version)
    ):
        raise conflict(
            codes.LEGAL_DOCUMENT_VERSION_TAKEN,
            f"{doc_type.value} {version} ({locale}) is published already: give a new version",
        )
    if session.scalar(same_type.where(LegalDocument.published_at == at)):
        raise conflict(
            codes.LEGAL_DOCUMENT_PUBLISHED_AT_TAKEN,
            f"another {doc_type.value} document is published at {at.isoformat()}",
        )
    document = LegalDocument(
        type=doc_type, version=version, locale=locale, url=url, published_at=at
    )
    session.add(document)
    session.flush()
    emit(
        session,
        EventKind.audit,
        "legal.document_published",
        at=now,
        aggregate_type="legal_document",
        aggregate_id=document.id,
        actor_user_id=actor_user_id,
        payload={
            "type": doc_type.value,
            "version": version,
            "locale": locale,
            "url": url,
            "publishedAt": at.isoformat(),
            "publishedBy": actor,
            "platformAdmin": True,
        },
    )
    session.flush()
    return document


def list_documents(session: Session, *, now: datetime) -> list[dict[str, Any]]:
    """Every published and scheduled document, newest published_at first, each with its
    state: scheduled (published_at still ahead), current (what the status shows for its
    type) or superseded. A few rows per type and year: not paged."""
    current = {document.id for document in latest_documents(session, now=now).values()}
    documents = session.scalars(
        select(LegalDocument).order_by(
            LegalDocument.published_at.desc(), LegalDocument.type, LegalDocument.id
        )
    )
    return [_described(document, current, now) for document in documents]


def describe(session: Session, document: LegalDocument, *, now: datetime) -> dict[str, Any]:
    """One document as list_documents shows it."""
    current = {d.id for d in latest_documents(session, now=now).values()}
    return _described(document, current, now)


def _described(document: LegalDocument, current: set[uuid.UUID], now: datetime) -> dict[str, Any]:
    if document.published_at > now:
        state = "scheduled"
    else:
        state = "current" if document.id in current else "superseded"
    return {
        "id": str(document.id),
        "type": document.type.value,
        "version": document.version,
        "locale": document.locale,
        "url": document.url,
        "publishedAt": document.published_at.isoformat(),
        "state": state,
    }


def _document_type(value: str) -> LegalDocumentType:
    try:
        return LegalDocumentType(value)
    except ValueError:
        names = ", ".join(t.value for t in LegalDocumentType)
        raise unprocessable(
            codes.LEGAL_DOCUMENT_TYPE_INVALID, f"type must be one of: {names}"
        ) from None


def _version(value: str) -> str:
    value = value.strip()
    if not 0 < len(value) <= VERSION_MAX or not value.isprintable():
        raise unprocessable(
            codes.LEGAL_DOCUMENT_VERSION_INVALID,
            f"version must be 1 to {VERSION_MAX} printable characters",
        )
    return value


def _locale(value: str) -> str:
    value = value.strip()
    if len(value) > LOCALE_MAX or not _LOCALE.fullmatch(value):
        raise unprocessable(
            codes.LEGAL_DOCUMENT_LOCALE_INVALID, "locale must be a language tag such as en or es-ES"
        )
    language, *subtags = value.split("-")
    return "-".join(
        [language.lower()]
        + [
            tag.upper() if len(tag) == 2 else tag.title() if len(tag) == 4 else tag.lower()
            for tag in subtags
        ]
    )


def _url(value: str) -> str:
    value = value.strip()
    refused = unprocessable(
        codes.LEGAL_DOCUMENT_URL_INVALID,
        f"url must be an https address with a host, at most {URL_MAX} characters",
    )
    if len(value) > URL_MAX or any(c.isspace() or not c.isprintable() for c in value):
        raise refused
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:  # an unclosed [IPv6 bracket
        raise refused from None
    if parts.scheme != "https" or not host or parts.username is not None or "@" in parts.netloc:
        raise refused
    return value
