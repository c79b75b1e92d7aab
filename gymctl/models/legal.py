"""Legal documents and the consents users gave to them (spec A 2.6)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Enum, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class LegalDocumentType(StrEnum):
    terms_of_use = "terms_of_use"
    privacy_policy = "privacy_policy"
    fitness_waiver = "fitness_waiver"


class LegalDocument(IdMixin, Base):
    __tablename__ = "legal_documents"

    type: Mapped[LegalDocumentType] = mapped_column(
        Enum(
            LegalDocumentType,
            name="legal_document_type",
            native_enum=False,
            create_constraint=True,
            length=32,
        )
    )
    version: Mapped[str] = mapped_column(String(64))
    locale: Mapped[str] = mapped_column(String(16))
    url: Mapped[str] = mapped_column(String(2048))
    published_at: Mapped[datetime]

    __table_args__ = (Index("ix_legal_documents_type_published_at", "type", "published_at"),)


class LegalConsent(IdMixin, Base):
    __tablename__ = "legal_consents"

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    document_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("legal_documents.id", ondelete="CASCADE")
    )
    accepted_at: Mapped[datetime]
    ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))

    __table_args__ = (UniqueConstraint("user_id", "document_id"),)
