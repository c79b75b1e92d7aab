"""Consenting to a document twice at once (a double tap, the app's retry) records it once and
answers both as a repeat does, never a 500. On PostgreSQL each request read no consent and
both inserted one; the second broke the one-consent-per-document key."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select

from gymctl.access import legal
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, LegalConsent, LegalDocumentType, User
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_second_consent_while_the_first_commits_is_a_repeat(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        document = factories.legal_document(
            session, type=LegalDocumentType.terms_of_use, published_at=NOW - timedelta(days=1)
        )
        person = factories.user(session, identity_id="user_consents", email="c@example.test")
        session.commit()
    answers = []

    def second():
        with factory() as session:
            try:
                consent = legal.record_consent(
                    session,
                    session.get(User, person.id),
                    document.id,
                    ip="192.0.2.2",
                    user_agent=None,
                    now=NOW + timedelta(seconds=1),
                )
                answers.append(consent.accepted_at)
                session.commit()
            except Exception as error:
                answers.append(repr(error)[:200])

    with factory() as first:
        first_consent = legal.record_consent(
            first, first.get(User, person.id), document.id, ip="192.0.2.1", user_agent=None, now=NOW
        )
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=thread)
        first.commit()
    thread.join(timeout=30)

    assert (first_consent.accepted_at, answers) == (NOW, [NOW])  # the second answers the first
    with factory() as session:
        assert session.scalars(select(LegalConsent.ip)).all() == ["192.0.2.1"]
        recorded = select(func.count()).where(AuditLog.action == "legal.consent_recorded")
        assert session.scalar(recorded) == 1
