"""Publishing legal documents (spec A 2.6): the platform-admin route and the operator command
over gymctl.access.legal.publish_document. A new version makes everyone who consented only to an
older one owe consent again; a scheduled one waits for its time; each refusal changes nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, LegalDocumentType, Role
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

ROUTE = "/admin/legal-documents"
TYPES = list(LegalDocumentType)


def status(client, person) -> dict[str, dict]:
    response = client.get("/legal/consents/status", headers=person.headers)
    assert response.status_code == 200
    return {entry["type"]: entry for entry in response.json["consents"]}


def pending(client, person) -> int:
    response = client.get("/users/me", headers=person.headers)
    assert response.status_code == 200
    return response.json["pendingLegalConsents"]


def publish(client, admin, **body):
    return client.post(ROUTE, json=body, headers=admin.headers)


@pytest.fixture
def settled(session, gym):
    """Version 1 of every type, published 30 days ago, accepted by the gym's member."""
    member = gym[Role.member]
    documents = {}
    for doc_type in TYPES:
        documents[doc_type] = factories.legal_document(
            session, type=doc_type, published_at=NOW - timedelta(days=30)
        )
        factories.consent(
            session,
            user=member.user,
            document=documents[doc_type],
            accepted_at=NOW - timedelta(days=29),
        )
    session.commit()
    return documents


# --- the join: publish, owe, consent ---------------------------------------------------------


def test_a_new_terms_version_is_owed_by_a_member_who_consented_to_the_old_one_until_accepted(
    client, session, gym, platform_admin, settled
):
    member = gym[Role.member]
    assert pending(client, member) == 0

    response = publish(
        client,
        platform_admin,
        type="terms_of_use",
        version="2",
        url="https://legal.example.test/terms/2",
    )

    assert response.status_code == 201, response.json
    published = response.json
    assert (published["type"], published["version"], published["locale"]) == (
        "terms_of_use",
        "2",
        "en",
    )
    assert (published["publishedAt"], published["state"]) == (NOW.isoformat(), "current")
    assert pending(client, member) == 1
    entries = status(client, member)
    assert entries["terms_of_use"]["owed"] is True
    assert entries["terms_of_use"]["document"]["id"] == published["id"]
    assert not entries["privacy_policy"]["owed"]
    assert not entries["fitness_waiver"]["owed"]
    [audit] = session.scalars(select(AuditLog).where(AuditLog.action == "legal.document_published"))
    assert audit.actor_user_id == platform_admin.user.id
    assert (audit.data["version"], audit.data["platformAdmin"]) == ("2", True)

    consented = client.post(
        "/legal/consents", json={"documentId": published["id"]}, headers=member.headers
    )

    assert consented.status_code == 201
    assert pending(client, member) == 0
    assert status(client, member)["terms_of_use"]["owed"] is False


def test_a_scheduled_version_keeps_the_current_one_until_its_time(
    client, session, clock, idp, gym, platform_admin, settled
):
    member = gym[Role.member]
    at = NOW + timedelta(days=7)

    response = publish(
        client,
        platform_admin,
        type="privacy_policy",
        version="2",
        url="https://legal.example.test/privacy/2",
        publishedAt=at.isoformat(),
    )

    assert (response.status_code, response.json["state"]) == (201, "scheduled")
    assert pending(client, member) == 0
    assert status(client, member)["privacy_policy"]["document"]["version"] == "1"
    early = client.post(
        "/legal/consents", json={"documentId": response.json["id"]}, headers=member.headers
    )
    assert (early.status_code, early.json["code"]) == (404, "legal_document_not_found")
    listed = client.get(ROUTE, headers=platform_admin.headers).json["documents"]
    assert [(d["type"], d["version"], d["state"]) for d in listed][:2] == [
        ("privacy_policy", "2", "scheduled"),
        ("fitness_waiver", "1", "current"),
    ]

    clock.set(at)
    member.headers = {"Authorization": f"Bearer {idp.token(member.user.identity_id, now=at)}"}

    assert pending(client, member) == 1
    assert status(client, member)["privacy_policy"]["document"]["version"] == "2"


def test_a_version_in_another_locale_is_new_and_becomes_the_current_one_of_its_type(
    client, gym, platform_admin, settled
):
    """The status picks per type, not per locale (spec A 2.6): version 1 in Spanish is new."""
    response = publish(
        client,
        platform_admin,
        type="fitness_waiver",
        version="1",
        locale="ES-es",
        url="https://legal.example.test/waiver/1-es",
    )

    assert (response.status_code, response.json["locale"]) == (201, "es-ES")
    assert status(client, gym[Role.member])["fitness_waiver"]["document"]["locale"] == "es-ES"


def test_the_list_shows_every_document_newest_first_with_its_state(client, session, platform_admin):
    factories.legal_document(
        session, type=LegalDocumentType.terms_of_use, published_at=NOW - timedelta(days=9)
    )
    factories.legal_document(
        session,
        type=LegalDocumentType.terms_of_use,
        version="2",
        published_at=NOW - timedelta(days=1),
    )
    session.commit()

    response = client.get(ROUTE, headers=platform_admin.headers)

    assert response.status_code == 200
    assert [(d["version"], d["state"]) for d in response.json["documents"]] == [
        ("2", "current"),
        ("1", "superseded"),
    ]


# --- refusals: code, status, nothing changed ---------------------------------------------------

GOOD = {"type": "terms_of_use", "version": "2", "url": "https://legal.example.test/terms/2"}
REFUSALS = [
    pytest.param({"type": "house_rules"}, 422, "legal_document_type_invalid", id="type"),
    pytest.param({"version": "1"}, 409, "legal_document_version_taken", id="version-taken"),
    pytest.param({"version": "v\t2"}, 422, "legal_document_version_invalid", id="version"),
    pytest.param({"locale": "english!"}, 422, "legal_document_locale_invalid", id="locale"),
    pytest.param(
        {"url": "http://legal.example.test/t"}, 422, "legal_document_url_invalid", id="http"
    ),
    pytest.param({"url": "https://"}, 422, "legal_document_url_invalid", id="no-host"),
    pytest.param(
        {"url": "https://u:p@legal.example.test/"}, 422, "legal_document_url_invalid", id="creds"
    ),
    pytest.param({"url": "javascript:alert(1)"}, 422, "legal_document_url_invalid", id="scheme"),
    pytest.param(
        {"publishedAt": (NOW - timedelta(seconds=1)).isoformat()},
        422,
        "legal_document_backdated",
        id="backdated",
    ),
    pytest.param(
        {"publishedAt": (NOW - timedelta(days=60)).isoformat()},
        422,
        "legal_document_backdated",
        id="before-the-current-one",
    ),
    pytest.param(
        {"publishedAt": (NOW + timedelta(days=3)).isoformat()},
        409,
        "legal_document_published_at_taken",
        id="instant-taken",
    ),
    pytest.param({"publishedAt": "2026-12-01T00:00:00"}, 422, "timestamp_not_utc", id="naive"),
    pytest.param(  # year 10000 in UTC: the body's own refusal, never explicit_utc's overflow
        {"publishedAt": "9999-12-31T23:00:00-05:00"}, 400, "invalid_body", id="past-9999"
    ),
]


@pytest.mark.parametrize(("change", "code_status", "code"), REFUSALS)
def test_each_refusal_has_its_code_and_status_and_changes_nothing(
    client, session, gym, platform_admin, settled, change, code_status, code
):
    factories.legal_document(
        session,
        type=LegalDocumentType.terms_of_use,
        version="3",
        published_at=NOW + timedelta(days=3),
    )
    session.commit()
    before = snapshot(session)

    response = publish(client, platform_admin, **{**GOOD, **change})

    assert (response.status_code, response.json["code"]) == (code_status, code)
    assert snapshot(session) == before


def test_a_non_admin_may_neither_publish_nor_list(client, session, gym, idp):
    idp.add_account("user_owner", "owner@iron.example", private_metadata={"platformRole": "x"})
    before = snapshot(session)

    for person in (gym[Role.owner], gym[Role.member]):
        posted = client.post(ROUTE, json=GOOD, headers=person.headers)
        listed = client.get(ROUTE, headers=person.headers)
        for response in (posted, listed):
            assert (response.status_code, response.json["code"]) == (403, "platform_admin_required")
    assert client.post(ROUTE, json=GOOD).status_code == 401
    assert snapshot(session) == before


def _raw(body: object) -> str:
    return json.dumps(body)


DEEP = _raw(GOOD)[:-1] + ', "nested": ' + '{"a": ' * 5000 + '"x"' + "}" * 5000 + "}"


HOSTILE = [
    pytest.param({**GOOD, "type": 1}, id="type-number"),
    pytest.param({**GOOD, "version": 2}, id="version-number"),
    pytest.param({**GOOD, "version": ["2"]}, id="version-list"),
    pytest.param({**GOOD, "url": None}, id="url-null"),
    pytest.param({**GOOD, "publishedAt": 1764000000}, id="published-at-number"),
    pytest.param({**GOOD, "publishedAt": "tomorrow"}, id="published-at-text"),
    pytest.param({**GOOD, "publishedAt": "9999-12-31T23:59:59-14:00"}, id="published-at-edge"),
    pytest.param({**GOOD, "version": "9" * 100_000}, id="huge-version"),
    pytest.param({**GOOD, "url": "https://x.test/" + "a" * 5000}, id="huge-url"),
    pytest.param({**GOOD, "locale": "e" * 1000}, id="huge-locale"),
    pytest.param({**GOOD, "type": "t" * 10_000}, id="huge-type"),
    pytest.param({**GOOD, "extra": True}, id="unknown-field"),
    pytest.param({**GOOD, "version": "2\u0000"}, id="nul"),
    pytest.param(DEEP, id="deep-json"),
    pytest.param([GOOD], id="array"),
    pytest.param(_raw("terms"), id="string"),
    pytest.param("null", id="null"),
]


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_input_is_a_400_class_json_refusal_and_changes_nothing(
    client, session, platform_admin, body
):
    before = snapshot(session)

    response = client.post(
        ROUTE,
        data=body if isinstance(body, str) else _raw(body),
        content_type="application/json",
        headers=platform_admin.headers,
    )

    assert 400 <= response.status_code < 500, response.data[:300]
    assert response.is_json
    assert response.json["code"]
    assert snapshot(session) == before


def test_a_body_that_is_not_json_is_400(client, session, platform_admin):
    before = snapshot(session)
    for data, content_type in ((b"\xff\xfe", "application/json"), (b"type=x", "text/plain")):
        response = client.post(
            ROUTE, data=data, content_type=content_type, headers=platform_admin.headers
        )
        assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert snapshot(session) == before
