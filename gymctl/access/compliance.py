"""Compliance PDFs (spec A 2.1): the one place a national id leaves the database, inside a PDF
served to staff who manage members; never in JSON, a log line or an event.

The document lists the gym, the person, the membership, the legal consents and the national id
(or that none was collected). Issuing one is audited, without the id.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from fpdf import FPDF
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access import codes, erased
from gymctl.access.memberships import membership_of
from gymctl.config import ConfigError, Settings
from gymctl.crypto import DecryptionError, national_id_cipher
from gymctl.errors import internal_error, unavailable
from gymctl.events import EventKind, emit
from gymctl.models import LegalConsent, LegalDocument, Membership, Organization, User


def national_id(settings: Settings, membership: Membership) -> str | None:
    """The person's national id as this organization holds it (on its membership, bound to that
    row), decrypted; None when not collected. The only reader of the stored id."""
    if membership.national_id_ciphertext is None:
        return None
    try:
        cipher = national_id_cipher(settings)
        return cipher.decrypt(
            membership.national_id_ciphertext,
            table="memberships",
            column="national_id",
            row_id=str(membership.id),
        )
    except ConfigError:
        raise unavailable(
            codes.NATIONAL_ID_NOT_CONFIGURED, "national ids cannot be read here"
        ) from None
    except DecryptionError:
        raise internal_error(
            codes.NATIONAL_ID_UNREADABLE, "the stored national id cannot be decrypted"
        ) from None


def compliance_pdf(
    session: Session,
    settings: Settings,
    organization: Organization,
    user_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> bytes:
    membership = membership_of(session, organization.id, user_id)
    person = session.get(User, user_id)
    consents = session.execute(
        select(LegalDocument.type, LegalDocument.version, LegalConsent.accepted_at)
        .join(LegalDocument, LegalDocument.id == LegalConsent.document_id)
        .where(LegalConsent.user_id == user_id)
        .order_by(LegalConsent.accepted_at)
    ).all()
    identifier = national_id(settings, membership)
    who = erased.shown(person, erased=erased.is_erased(session, membership))
    rows = [
        ("Organization", organization.name),
        ("Person", who["name"] or "-"),
        ("Email", who["email"] or "-"),
        ("National id", identifier or "not collected"),
        ("Role", membership.role.value),
        ("Membership status", membership.status.value),
        ("Member since", membership.created_at.date().isoformat()),
        ("Issued at", now.isoformat(timespec="seconds")),
    ]
    document = _render(
        rows, [(t.value, v, at.isoformat(timespec="seconds")) for t, v, at in consents]
    )
    emit(
        session,
        EventKind.audit,
        "user.compliance_pdf_issued",
        at=now,
        aggregate_type="user",
        aggregate_id=person.id,
        organization_id=organization.id,
        actor_user_id=actor_user_id,
        payload={"nationalIdIncluded": identifier is not None},
    )
    return document


def _render(rows: list[tuple[str, str]], consents: list[tuple[str, str, str]]) -> bytes:
    pdf = FPDF()
    pdf.set_title("Compliance record")
    pdf.set_creator("gymctl")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.cell(0, 12, "Compliance record", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=11)
    for label, value in rows:
        pdf.cell(50, 8, label)
        pdf.cell(0, 8, _latin(value), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.set_font("Helvetica", "B", 12)
    pdf.cell(0, 10, "Legal consents", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=11)
    for kind, version, accepted_at in consents or [("none recorded", "", "")]:
        pdf.cell(
            0, 8, _latin(f"{kind} {version} {accepted_at}".strip()), new_x="LMARGIN", new_y="NEXT"
        )
    return bytes(pdf.output())


def _latin(text: str) -> str:
    """The core fonts are Latin-1: anything else is replaced, never an error."""
    return text.encode("latin-1", "replace").decode("latin-1")
