"""GET /users/me and the API guard (spec A 4, 5.1, 2.2)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.models import LegalDocumentType, MembershipStatus, Role, User
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def bearer(idp, sub="user_alice", **claims):
    return {"Authorization": f"Bearer {idp.token(sub, now=NOW, **claims)}"}


def users(session):
    return session.scalar(select(func.count()).select_from(User))


# --- the guard -------------------------------------------------------------------------------


def test_missing_authorization_is_401_with_a_code(client):
    response = client.get("/users/me")
    assert (response.status_code, response.json["code"]) == (401, "authorization_missing")


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer    ", "token"])
def test_malformed_authorization_is_401(client, header):
    response = client.get("/users/me", headers={"Authorization": header})
    assert (response.status_code, response.json["code"]) == (401, "authorization_malformed")


def test_invalid_token_is_401_and_creates_nothing(client, session, idp):
    expired = idp.token(now=NOW - timedelta(hours=1))
    response = client.get("/users/me", headers={"Authorization": f"Bearer {expired}"})
    assert (response.status_code, response.json["code"]) == (401, "token_expired")
    assert users(session) == 0


def test_session_cookie_is_read_when_there_is_no_authorization_header(client, idp):
    client.set_cookie("__session", idp.token(now=NOW))
    assert client.get("/users/me").status_code == 200


def test_request_id_is_echoed_or_minted(client):
    assert (
        client.get("/health", headers={"X-Request-Id": "req-42"}).headers["X-Request-Id"]
        == "req-42"
    )
    minted = client.get("/health", headers={"X-Request-Id": "bad id!"}).headers["X-Request-Id"]
    assert minted
    assert minted != "bad id!"
    # `$` of a pattern matched before a final newline: "req-42\n" passed and was echoed into a
    # header werkzeug refuses (a 500; gunicorn refuses such a header before, other servers not).
    newline = client.get("/health", environ_overrides={"HTTP_X_REQUEST_ID": "req-42\n"})
    assert newline.status_code == 200
    assert newline.headers["X-Request-Id"] not in ("req-42\n", "req-42")


def test_test_auth_bypass_headers_are_honoured_outside_production(
    settings, session_factory, clock, session
):
    from webhooks.app import create_app

    factories.user(session, identity_id="user_bypass", email="bypass@example.test")
    session.commit()
    settings.test_auth_bypass = True
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    response = client.get("/users/me", headers={"x-test-user-id": "user_bypass"})
    assert response.status_code == 200
    assert response.json["user"]["email"] == "bypass@example.test"


def test_test_auth_bypass_headers_are_ignored_when_the_switch_is_off(client):
    response = client.get("/users/me", headers={"x-test-user-id": "user_bypass"})
    assert (response.status_code, response.json["code"]) == (401, "authorization_missing")


# --- /users/me -------------------------------------------------------------------------------


def test_valid_token_without_a_row_finds_or_creates_once(client, session, idp):
    """Spec A 2.1: a session can exist before the row (webhook late); /users/me creates it."""
    first = client.get("/users/me", headers=bearer(idp))
    second = client.get("/users/me", headers=bearer(idp))
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json["user"]["id"] == second.json["user"]["id"]
    assert first.json["user"]["identityId"] == "user_alice"
    assert users(session) == 1
    assert first.json["memberships"] == []
    assert first.json["activeOrganization"] is None
    assert "branding" not in first.json


def test_memberships_and_the_earliest_active_organization(client, session, idp):
    alice = factories.user(session, identity_id="user_alice", email="alice@example.test")
    suspended_gym = factories.organization(session, name="Suspended Gym")
    first_gym = factories.organization(session, name="First Gym")
    second_gym = factories.organization(session, name="Second Gym")
    factories.membership(
        session,
        user=alice,
        organization=suspended_gym,
        status=MembershipStatus.suspended,
        created_at=NOW - timedelta(days=3),
    )
    factories.membership(
        session,
        user=alice,
        organization=first_gym,
        role=Role.coach,
        created_at=NOW - timedelta(days=2),
    )
    factories.membership(
        session, user=alice, organization=second_gym, created_at=NOW - timedelta(days=1)
    )
    session.commit()
    body = client.get("/users/me", headers=bearer(idp)).json
    assert [m["organizationName"] for m in body["memberships"]] == [
        "Suspended Gym",
        "First Gym",
        "Second Gym",
    ]
    assert body["activeOrganization"]["name"] == "First Gym"
    assert body["activeOrganization"]["role"] == "coach"
    assert body["branding"]["schema"] == 1

    picked = client.get(f"/users/me?organizationId={second_gym.id}", headers=bearer(idp)).json
    assert picked["activeOrganization"]["id"] == str(second_gym.id)


def test_active_organization_never_comes_from_a_token_claim(client, session, idp):
    alice = factories.user(session, identity_id="user_alice")
    mine, other = factories.organization(session), factories.organization(session)
    factories.membership(session, user=alice, organization=mine)
    session.commit()
    token_claim = {"o": {"id": str(other.id), "rol": "admin"}}
    body = client.get("/users/me", headers=bearer(idp, **token_claim)).json
    assert body["activeOrganization"]["id"] == str(mine.id)


@pytest.mark.parametrize("status", [MembershipStatus.suspended, MembershipStatus.cancelled, None])
def test_asking_for_an_organization_without_an_active_membership_is_404(
    client, session, idp, status
):
    alice = factories.user(session, identity_id="user_alice")
    gym = factories.organization(session)
    if status is not None:
        factories.membership(session, user=alice, organization=gym, status=status)
    session.commit()
    response = client.get(f"/users/me?organizationId={gym.id}", headers=bearer(idp))
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")


def test_organization_id_must_be_a_uuid(client, idp):
    response = client.get("/users/me?organizationId=gym-1", headers=bearer(idp))
    assert (response.status_code, response.json["code"]) == (400, "organization_id_invalid")


@pytest.mark.parametrize("schema", ["1", "2", "3", "4"])
def test_branding_schema_one_to_four_is_accepted(client, session, idp, schema):
    alice = factories.user(session, identity_id="user_alice")
    factories.membership(session, user=alice, organization=factories.organization(session))
    session.commit()
    body = client.get(f"/users/me?brandingSchema={schema}", headers=bearer(idp)).json
    assert body["branding"]["schema"] == int(schema)


@pytest.mark.parametrize("schema", ["0", "5", "x", "-1", "1.0", ""])
def test_branding_schema_outside_one_to_four_is_400_and_creates_nothing(
    client, session, idp, schema
):
    response = client.get(f"/users/me?brandingSchema={schema}", headers=bearer(idp))
    assert (response.status_code, response.json["code"]) == (400, "schema_unsupported")
    assert users(session) == 0


def test_pending_legal_consents_follow_the_latest_published_document(client, session, idp):
    alice = factories.user(session, identity_id="user_alice")
    session.commit()
    assert client.get("/users/me", headers=bearer(idp)).json["pendingLegalConsents"] == 3

    terms_v1 = factories.legal_document(
        session, type=LegalDocumentType.terms_of_use, published_at=NOW - timedelta(days=10)
    )
    factories.legal_document(
        session, type=LegalDocumentType.privacy_policy, published_at=NOW - timedelta(days=10)
    )
    factories.consent(session, user=alice, document=terms_v1, accepted_at=NOW - timedelta(days=9))
    session.commit()
    assert client.get("/users/me", headers=bearer(idp)).json["pendingLegalConsents"] == 2

    factories.legal_document(
        session,
        type=LegalDocumentType.terms_of_use,
        version="2",
        published_at=NOW - timedelta(days=1),
    )
    factories.legal_document(
        session,
        type=LegalDocumentType.terms_of_use,
        version="3",
        published_at=NOW + timedelta(days=1),
    )  # not yet published
    session.commit()
    assert client.get("/users/me", headers=bearer(idp)).json["pendingLegalConsents"] == 3


def test_invitation_held_reflects_a_held_membership(client, session, idp):
    alice = factories.user(session, identity_id="user_alice")
    gym = factories.organization(session)
    factories.membership(
        session,
        user=alice,
        organization=gym,
        status=MembershipStatus.pending_invitation,
        invitation_held=True,
    )
    session.commit()
    body = client.get("/users/me", headers=bearer(idp)).json
    assert body["invitationHeld"] is True
    assert body["activeOrganization"] is None


def test_a_deleted_account_is_refused_not_recreated(client, session, idp):
    factories.user(session, identity_id="user_alice", deleted_at=NOW - timedelta(minutes=1))
    session.commit()
    response = client.get("/users/me", headers=bearer(idp))
    assert (response.status_code, response.json["code"]) == (401, "user_deleted")
    assert users(session) == 1


def test_deleted_organizations_are_not_listed(client, session, idp):
    alice = factories.user(session, identity_id="user_alice")
    gone = factories.organization(session, deleted_at=NOW - timedelta(days=1))
    factories.membership(session, user=alice, organization=gone)
    session.commit()
    body = client.get("/users/me", headers=bearer(idp)).json
    assert body["memberships"] == []
    assert body["activeOrganization"] is None


def test_unknown_organization_uuid_is_404(client, idp):
    response = client.get(f"/users/me?organizationId={uuid.uuid4()}", headers=bearer(idp))
    assert response.status_code == 404


def test_an_authenticated_request_records_the_session_for_the_ownership_trail(client, session, idp):
    from gymctl.models import UserSession

    alice = factories.user(session, identity_id="user_alice")
    session.commit()
    headers = {
        **bearer(idp),
        "User-Agent": "Mozilla/5.0 (Macintosh) Chrome/120.0",
        "X-Forwarded-For": "198.51.100.7",
        "X-Geo-Country": "PT",
        "X-Geo-City": "Porto",
    }
    client.get("/users/me", headers=headers)
    [recorded] = session.scalars(select(UserSession).where(UserSession.user_id == alice.id))
    assert (recorded.session_id, recorded.ip, recorded.country, recorded.city) == (
        "sess_1",
        "198.51.100.7",
        "PT",
        "Porto",
    )
