"""Legal consent (spec A 2.6, 4): one status entry per required type, the latest published
document per type wins, a consent records where it came from and is given once."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import AuditLog, LegalConsent, LegalDocumentType
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

TYPES = ["terms_of_use", "privacy_policy", "fitness_waiver"]
UA = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 Chrome/120.0 Safari"


def publish(session: Session, doc_type: str, version: str, *, days_ago: float):
    return factories.legal_document(
        session,
        type=LegalDocumentType(doc_type),
        version=version,
        published_at=NOW - timedelta(days=days_ago),
    )


def status(client, person) -> dict[str, dict]:
    response = client.get("/legal/consents/status", headers=person.headers)
    assert response.status_code == 200
    return {entry["type"]: entry for entry in response.json["consents"]}


def pending(client, person) -> int:
    response = client.get("/users/me", headers=person.headers)
    assert response.status_code == 200
    return response.json["pendingLegalConsents"]


def consent(client, person, document_id, **headers):
    return client.post(
        "/legal/consents",
        json={"documentId": str(document_id)},
        headers={**person.headers, **headers},
    )


# --- status ----------------------------------------------------------------------------------


def test_status_has_one_entry_per_required_type_and_a_type_without_a_document_is_owed(
    client, session, outsider
):
    publish(session, "terms_of_use", "1", days_ago=3)
    session.commit()

    response = client.get("/legal/consents/status", headers=outsider.headers)

    assert response.status_code == 200
    entries = response.json["consents"]
    assert [entry["type"] for entry in entries] == TYPES
    by_type = {entry["type"]: entry for entry in entries}
    assert by_type["terms_of_use"]["document"]["version"] == "1"
    for missing in ("privacy_policy", "fitness_waiver"):
        assert by_type[missing]["owed"] is True
        assert by_type[missing]["document"] is None


def test_the_latest_published_document_per_type_wins_and_a_future_one_is_not_yet_published(
    client, session, outsider
):
    publish(session, "terms_of_use", "2", days_ago=1)
    publish(session, "terms_of_use", "1", days_ago=30)
    publish(session, "terms_of_use", "3", days_ago=-1)  # scheduled for tomorrow
    publish(session, "privacy_policy", "7", days_ago=0)  # published this very instant
    session.commit()

    entries = status(client, outsider)

    assert entries["terms_of_use"]["document"]["version"] == "2"
    assert (
        entries["terms_of_use"]["document"]["publishedAt"] == (NOW - timedelta(days=1)).isoformat()
    )
    assert entries["privacy_policy"]["document"]["version"] == "7"


def test_a_consent_to_an_older_version_leaves_the_type_owed(client, session, outsider):
    old = publish(session, "terms_of_use", "1", days_ago=30)
    factories.consent(
        session, user=outsider.user, document=old, accepted_at=NOW - timedelta(days=29)
    )
    publish(session, "terms_of_use", "2", days_ago=1)
    session.commit()

    entries = status(client, outsider)

    assert entries["terms_of_use"]["owed"] is True
    assert entries["terms_of_use"]["acceptedAt"] is None
    assert pending(client, outsider) == 3


def test_status_requires_a_session(client):
    response = client.get("/legal/consents/status")
    assert response.status_code == 401


# --- recording a consent ---------------------------------------------------------------------


def test_a_consent_records_the_address_the_trusted_proxy_saw_and_the_user_agent(
    client, session, outsider
):
    document = publish(session, "fitness_waiver", "1", days_ago=2)
    session.commit()

    response = consent(
        client,
        outsider,
        document.id,
        **{"X-Forwarded-For": "10.0.0.7, 198.51.100.23", "User-Agent": UA},
    )

    assert response.status_code == 201
    assert response.json == {"documentId": str(document.id), "acceptedAt": NOW.isoformat()}
    session.expire_all()
    [row] = session.scalars(select(LegalConsent).where(LegalConsent.user_id == outsider.user.id))
    assert (row.document_id, row.ip, row.user_agent, row.accepted_at) == (
        document.id,
        "198.51.100.23",
        UA,
        NOW,
    )
    [audit] = session.scalars(select(AuditLog).where(AuditLog.action == "legal.consent_recorded"))
    assert audit.data["type"] == "fitness_waiver"
    assert status(client, outsider)["fitness_waiver"]["owed"] is False


def test_consenting_twice_answers_201_both_times_and_keeps_the_first_record(
    client, session, clock, idp, outsider
):
    document = publish(session, "privacy_policy", "1", days_ago=2)
    session.commit()
    first = consent(client, outsider, document.id, **{"X-Forwarded-For": "198.51.100.23"})
    before = snapshot(session)
    clock.set(NOW + timedelta(seconds=30))
    outsider.headers = {"Authorization": f"Bearer {idp.token('user_outsider', now=clock.now())}"}

    second = consent(client, outsider, document.id, **{"X-Forwarded-For": "192.0.2.99"})

    assert (first.status_code, second.status_code) == (201, 201)
    assert second.json["acceptedAt"] == first.json["acceptedAt"] == NOW.isoformat()
    assert snapshot(session) == before  # one row, first ip kept, no second audit record


@pytest.mark.parametrize("when", ["unknown", "not_yet_published"])
def test_an_unknown_or_unpublished_document_is_404_and_records_nothing(
    client, session, outsider, when
):
    scheduled = publish(session, "terms_of_use", "9", days_ago=-1)
    session.commit()
    document_id = uuid.uuid4() if when == "unknown" else scheduled.id
    before = snapshot(session)

    response = consent(client, outsider, document_id)

    assert (response.status_code, response.json["code"]) == (404, "legal_document_not_found")
    assert snapshot(session) == before


def test_a_malformed_document_id_is_400_invalid_body_and_records_nothing(client, session, outsider):
    before = snapshot(session)

    response = client.post(
        "/legal/consents", json={"documentId": "terms"}, headers=outsider.headers
    )

    assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert snapshot(session) == before


def test_consenting_requires_a_session(client, session):
    document = publish(session, "terms_of_use", "1", days_ago=1)
    session.commit()
    before = snapshot(session)

    response = client.post("/legal/consents", json={"documentId": str(document.id)})

    assert response.status_code == 401
    assert snapshot(session) == before


# --- /users/me follows -----------------------------------------------------------------------


def test_users_me_pending_legal_consents_follows_the_consents_and_new_versions(
    client, session, outsider
):
    assert pending(client, outsider) == 3  # no document at all: every type is owed
    documents = [publish(session, doc_type, "1", days_ago=5) for doc_type in TYPES]
    session.commit()
    assert pending(client, outsider) == 3

    for document in documents[:2]:
        assert consent(client, outsider, document.id).status_code == 201
    assert pending(client, outsider) == 1

    assert consent(client, outsider, documents[2].id).status_code == 201
    assert pending(client, outsider) == 0

    publish(session, "privacy_policy", "2", days_ago=1)
    publish(session, "terms_of_use", "2", days_ago=-1)  # not yet published: still settled
    session.commit()
    assert pending(client, outsider) == 1
    assert [t for t, e in status(client, outsider).items() if e["owed"]] == ["privacy_policy"]
