"""The ownership trail (spec A 4, 8): each section's content and order, its bounds, the lookup
by database id or identity subject, and the CLI door."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from gymctl.access.trail import (
    OWNERSHIP_EVENTS_LIMIT,
    describe_user_agent,
    ownership_trail,
    resolve_user,
)
from gymctl.cli.users import app as users_app
from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models import (
    AuditLog,
    JoinLink,
    JoinSubmission,
    LegalDocumentType,
    Organization,
    User,
    UserSession,
)
from tests import factories
from tests.conftest import NOW

UA_MAC = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36"
)
UA_IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
)
UA_ANDROID = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/121.0.0.0 Mobile Safari/537.36"
)
CIPHERTEXT = "gcm:v1:do-not-show-this-ciphertext"


def _minutes(n: int) -> datetime:
    return NOW - timedelta(minutes=n)


def _join_link(session: Session, organization: Organization, label: str = "Spring") -> JoinLink:
    row = JoinLink(organization_id=organization.id, token=uuid.uuid4().hex, label=label)
    session.add(row)
    session.flush()
    return row


def _user_session(session: Session, user: User, n: int, **fields: Any) -> UserSession:
    row = UserSession(
        user_id=user.id,
        session_id=f"sess_{n}",
        first_seen_at=fields.pop("first_seen_at", _minutes(n + 60)),
        last_seen_at=fields.pop("last_seen_at", _minutes(n)),
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def _submission(session: Session, link: JoinLink, at: datetime, **fields: Any) -> JoinSubmission:
    row = JoinSubmission(
        join_link_id=link.id,
        organization_id=link.organization_id,
        outcome=fields.pop("outcome", "submitted"),
        created_at=at,
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def _audit(session: Session, action: str, at: datetime, **fields: Any) -> AuditLog:
    row = AuditLog(action=action, at=at, **fields)
    session.add(row)
    session.flush()
    return row


def _about(user: User) -> dict[str, Any]:
    return {"target_type": "user", "target_id": str(user.id)}


def _build(session: Session) -> dict[str, Any]:
    """A person who joined through a gym's link, with rows for every section of the trail."""
    gym = factories.organization(session, name="Iron Temple")
    link = _join_link(session, gym, label="Spring flyer")
    operator = factories.user(session, email="ops@platform.test")
    person = factories.user(
        session,
        identity_id="user_trail",
        email="Ana.Silva@Example.test",
        name="Ana Silva",
        signup_origin="join_link",
        signup_organization_id=gym.id,
        signup_join_link_id=link.id,
        created_by_user_id=operator.id,
        email_verified_at=_minutes(30),
        email_verified_by=str(operator.id),
        created_at=_minutes(600),
    )
    factories.membership(session, user=person, organization=gym, national_id_ciphertext=CIPHERTEXT)
    other = factories.user(session, email="someone.else@example.test")

    _user_session(
        session, person, 5, ip="203.0.113.5", city="Lisbon", country="PT", user_agent=UA_MAC
    )
    _user_session(
        session, person, 1, ip="198.51.100.1", user_agent=UA_IPHONE, impersonated_by="user_operator"
    )
    _user_session(session, person, 3, user_agent=UA_ANDROID)
    _user_session(session, other, 0)

    _submission(session, link, _minutes(50), user_id=person.id, ip="203.0.113.5")
    _submission(
        session,
        link,
        _minutes(20),
        email="ana.silva@example.TEST",
        outcome="blocked",
        user_agent=UA_MAC,
    )
    _submission(session, link, _minutes(10), email="someone.else@example.test")

    terms = factories.legal_document(
        session, type=LegalDocumentType.terms_of_use, published_at=_minutes(9000), version="3"
    )
    privacy = factories.legal_document(
        session, type=LegalDocumentType.privacy_policy, published_at=_minutes(9000), version="7"
    )
    factories.consent(session, user=person, document=terms, accepted_at=_minutes(500))
    late = factories.consent(session, user=person, document=privacy, accepted_at=_minutes(400))
    late.ip, late.user_agent = "203.0.113.5", UA_MAC
    factories.consent(session, user=other, document=terms, accepted_at=_minutes(300))

    held = _audit(
        session,
        "membership.invitation_held",
        _minutes(40),
        organization_id=gym.id,
        data={"invitationId": "inv_1", "reason": "email_unproven"},
        **_about(person),
    )
    blocked = _audit(
        session,
        "join.blocked",
        _minutes(45),
        target_type="join_link",
        target_id=str(link.id),
        data={"reason": "account_exists", "email": "ANA.SILVA@example.test"},
    )
    verified = _audit(
        session,
        "user.email_verified",
        _minutes(30),
        actor_user_id=operator.id,
        data={"platformAdmin": True, "via": "admin", "ticketToken": "never-shown"},
        **_about(person),
    )
    _audit(session, "join.blocked", _minutes(2), data={"email": "someone.else@example.test"})
    _audit(
        session,
        "membership.role_changed",
        _minutes(2),
        data={"email": person.email},
        target_type="user",
        target_id=str(other.id),
    )  # neither the target nor a listed action
    _audit(session, "user.linked", _minutes(2), data={"platformAdmin": True}, **_about(other))
    return {
        "person": person,
        "operator": operator,
        "gym": gym,
        "link": link,
        "held": held,
        "blocked": blocked,
        "verified": verified,
    }


@pytest.mark.embedded
def test_trail_shows_every_section_newest_first(session):
    built = _build(session)
    person, operator, gym, link = built["person"], built["operator"], built["gym"], built["link"]

    trail = ownership_trail(session, person)

    assert trail["user"] == {
        "id": str(person.id),
        "identityId": "user_trail",
        "loginState": "linked",
        "email": "Ana.Silva@Example.test",
        "name": "Ana Silva",
        "createdAt": _minutes(600).isoformat(),
        "deletedAt": None,
    }
    assert trail["signUpOrigin"] == {
        "origin": "join_link",
        "organization": {"id": str(gym.id), "name": "Iron Temple"},
        "joinLink": {"id": str(link.id), "label": "Spring flyer"},
        "createdAt": _minutes(600).isoformat(),
        "createdByUserId": str(operator.id),
        "emailVerification": {
            "verifiedAt": _minutes(30).isoformat(),
            "verifiedBy": str(operator.id),
        },
    }

    sessions = trail["sessions"]
    assert [s["sessionId"] for s in sessions] == ["sess_1", "sess_3", "sess_5"]
    assert sessions[0] == {
        "sessionId": "sess_1",
        "ip": "198.51.100.1",
        "city": None,
        "country": None,
        "userAgent": UA_IPHONE,
        "browser": "Safari 17",
        "device": "iPhone",
        "impersonated": True,
        "impersonatedBy": "user_operator",
        "firstSeenAt": _minutes(61).isoformat(),
        "lastSeenAt": _minutes(1).isoformat(),
    }
    assert (sessions[2]["city"], sessions[2]["country"], sessions[2]["impersonated"]) == (
        "Lisbon",
        "PT",
        False,
    )
    assert [(s["browser"], s["device"]) for s in sessions[1:]] == [
        ("Chrome 121", "Android phone"),
        ("Chrome 120", "Mac"),
    ]

    submissions = trail["joinSubmissions"]
    assert [(s["outcome"], s["createdAt"]) for s in submissions] == [
        ("blocked", _minutes(20).isoformat()),  # matched by address, whatever its case
        ("submitted", _minutes(50).isoformat()),  # matched by user id
    ]
    assert submissions[0]["joinLinkId"] == str(link.id)
    assert submissions[0]["organizationId"] == str(gym.id)
    assert (submissions[1]["ip"], submissions[0]["userAgent"]) == ("203.0.113.5", UA_MAC)

    assert trail["consents"] == [
        {
            "documentType": "privacy_policy",
            "documentVersion": "7",
            "locale": "en",
            "acceptedAt": _minutes(400).isoformat(),
            "ip": "203.0.113.5",
            "userAgent": UA_MAC,
        },
        {
            "documentType": "terms_of_use",
            "documentVersion": "3",
            "locale": "en",
            "acceptedAt": _minutes(500).isoformat(),
            "ip": None,
            "userAgent": None,
        },
    ]

    events = trail["ownershipEvents"]
    assert events["truncated"] is False
    assert [e["id"] for e in events["events"]] == [
        str(built["verified"].id),
        str(built["held"].id),
        str(built["blocked"].id),
    ]
    assert events["events"][0] == {
        "id": str(built["verified"].id),
        "at": _minutes(30).isoformat(),
        "action": "user.email_verified",
        "organizationId": None,
        "actorUserId": str(operator.id),
        "targetType": "user",
        "targetId": str(person.id),
        "data": {"platformAdmin": True, "via": "admin"},  # the secret-looking key is dropped
    }
    assert events["events"][2]["data"]["reason"] == "account_exists"

    actions = trail["platformAdminActions"]
    assert actions["truncated"] is False
    assert [a["action"] for a in actions["actions"]] == ["user.email_verified"]


@pytest.mark.embedded
def test_trail_never_carries_the_national_id_or_secrets(session):
    built = _build(session)

    dumped = json.dumps(ownership_trail(session, built["person"]))

    assert CIPHERTEXT not in dumped
    assert "never-shown" not in dumped
    assert "national" not in dumped.lower()


@pytest.mark.embedded
def test_a_gym_created_row_without_login_is_unproven_and_origin_unknowns_are_null(session):
    person = factories.user(session, identity_id=None, signup_origin="desk")

    trail = ownership_trail(session, person)

    assert (trail["user"]["identityId"], trail["user"]["loginState"]) == (None, "unproven")
    origin = trail["signUpOrigin"]
    assert (origin["origin"], origin["organization"], origin["joinLink"]) == ("desk", None, None)
    assert origin["emailVerification"] == {"verifiedAt": None, "verifiedBy": None}
    assert trail["sessions"] == trail["joinSubmissions"] == trail["consents"] == []
    assert trail["ownershipEvents"] == {"events": [], "truncated": False}
    assert trail["platformAdminActions"] == {"actions": [], "truncated": False}


@pytest.mark.embedded
def test_origin_keeps_the_ids_of_a_gym_and_link_that_are_gone(session):
    gone_gym, gone_link = uuid.uuid4(), uuid.uuid4()
    person = factories.user(
        session,
        signup_origin="join_link",
        signup_organization_id=gone_gym,
        signup_join_link_id=gone_link,
    )

    origin = ownership_trail(session, person)["signUpOrigin"]

    assert origin["organization"] == {"id": str(gone_gym), "name": None}
    assert origin["joinLink"] == {"id": str(gone_link), "label": None}


@pytest.mark.embedded
def test_only_the_last_ten_sessions_are_shown(session):
    person = factories.user(session)
    for n in range(12):
        _user_session(session, person, n)

    sessions = ownership_trail(session, person)["sessions"]

    assert [s["sessionId"] for s in sessions] == [f"sess_{n}" for n in range(10)]


@pytest.mark.embedded
def test_ownership_events_are_bounded_at_100_rows_with_a_truncated_flag(session):
    person = factories.user(session)
    for n in range(OWNERSHIP_EVENTS_LIMIT):
        _audit(session, "membership.role_changed", _minutes(n), data={}, **_about(person))

    exactly = ownership_trail(session, person)["ownershipEvents"]
    assert (len(exactly["events"]), exactly["truncated"]) == (100, False)

    # One older refusal found by address tips it over: the newest 100 of both kinds are shown.
    _audit(
        session,
        "membership.registration_refused",
        _minutes(500),
        data={"email": person.email.upper()},
    )
    over = ownership_trail(session, person)["ownershipEvents"]
    assert (len(over["events"]), over["truncated"]) == (100, True)
    assert over["events"][0]["at"] == NOW.isoformat()
    assert over["events"][-1]["at"] == _minutes(99).isoformat()

    newer = _audit(
        session,
        "membership.registration_refused",
        NOW + timedelta(seconds=1),
        data={"email": person.email},
    )
    newest = ownership_trail(session, person)["ownershipEvents"]
    assert newest["events"][0]["id"] == str(newer.id)
    assert (len(newest["events"]), newest["truncated"]) == (100, True)


@pytest.mark.embedded
def test_platform_admin_actions_are_bounded_at_100_rows(session):
    person = factories.user(session)
    for n in range(101):
        _audit(
            session,
            "user.email_verified",
            _minutes(n),
            data={"platformAdmin": True},
            **_about(person),
        )
    _audit(session, "membership.removed", NOW, data={"platformAdmin": False}, **_about(person))

    actions = ownership_trail(session, person)["platformAdminActions"]

    assert (len(actions["actions"]), actions["truncated"]) == (100, True)
    assert {a["action"] for a in actions["actions"]} == {"user.email_verified"}


@pytest.mark.embedded
def test_a_user_is_found_by_database_id_or_identity_subject(session):
    person = factories.user(session, identity_id="user_lookup")

    assert resolve_user(session, str(person.id)) is person
    assert resolve_user(session, f" {person.id} ".upper()) is person
    assert resolve_user(session, "user_lookup") is person


@pytest.mark.embedded
def test_a_deleted_user_is_still_found(session):
    person = factories.user(session, identity_id="user_gone", deleted_at=_minutes(5))

    assert resolve_user(session, "user_gone") is person
    assert ownership_trail(session, person)["user"]["deletedAt"] == _minutes(5).isoformat()


@pytest.mark.embedded
@pytest.mark.parametrize("ref", ["user_nobody", "00000000-0000-4000-8000-000000000000", " "])
def test_an_unknown_user_is_404_user_not_found(session, ref):
    factories.user(session)

    with pytest.raises(DomainError) as raised:
        resolve_user(session, ref)

    assert (raised.value.code, raised.value.status) == ("user_not_found", 404)


@pytest.mark.parametrize(
    ("user_agent", "expected"),
    [
        (UA_MAC, ("Chrome 120", "Mac")),
        (UA_IPHONE, ("Safari 17", "iPhone")),
        (UA_ANDROID, ("Chrome 121", "Android phone")),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91",
            ("Edge 120", "Windows"),
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
            ("Firefox 121", "Linux"),
        ),
        (
            "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
            "Gecko) CriOS/120.0.6099.119 Mobile/15E148 Safari/604.1",
            ("Chrome 120", "iPad"),
        ),
        ("okhttp/4.12.0", ("Android app (okhttp) 4", "Other")),
        ("GymApp/1.0.6 CFNetwork/1485 Darwin/23.1.0", ("iOS app (CFNetwork) 1485", "iOS")),
        ("Googlebot/2.1 (+http://www.google.com/bot.html)", ("Bot", "Automated")),
        ("something odd", ("Other", "Other")),
        (None, (None, None)),
        ("", (None, None)),
    ],
)
def test_browser_and_device_are_a_short_guess_from_the_user_agent(user_agent, expected):
    assert describe_user_agent(user_agent) == expected


def _committed_person(url: str) -> dict[str, str]:
    factory = session_factory(get_engine(url))
    with factory() as session:
        built = _build(session)
        ids = {"id": str(built["person"].id), "blocked": str(built["blocked"].id)}
        session.commit()
    return ids


def test_cli_prints_the_trail_as_json(committed_pg, monkeypatch):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    ids = _committed_person(committed_pg)

    by_subject = CliRunner().invoke(users_app, ["ownership-trail", "user_trail", "--json"])

    assert by_subject.exit_code == 0, by_subject.output
    trail = json.loads(by_subject.stdout)
    assert trail["user"]["id"] == ids["id"]
    assert [s["sessionId"] for s in trail["sessions"]] == ["sess_1", "sess_3", "sess_5"]
    assert str(ids["blocked"]) in [e["id"] for e in trail["ownershipEvents"]["events"]]
    assert CIPHERTEXT not in by_subject.stdout

    by_id = CliRunner().invoke(users_app, ["ownership-trail", ids["id"], "--json"])
    assert by_id.exit_code == 0, by_id.output
    assert json.loads(by_id.stdout) == trail


def test_cli_renders_tables_without_json(committed_pg, monkeypatch):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("COLUMNS", "250")
    _committed_person(committed_pg)

    shown = CliRunner().invoke(users_app, ["ownership-trail", "user_trail"])

    assert shown.exit_code == 0, shown.output
    for heading in (
        "User and sign-up origin",
        "Last sessions",
        "Join-form submissions",
        "Consents",
        "Ownership and refusal events",
        "Platform admin actions",
    ):
        assert heading in shown.stdout
    assert "Iron Temple" in shown.stdout
    assert "user_operator" in shown.stdout


def test_cli_lets_an_unknown_user_reach_the_top_level_handler(committed_pg, monkeypatch):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)

    result = CliRunner().invoke(users_app, ["ownership-trail", "user_nobody", "--json"])

    assert result.exit_code != 0
    assert isinstance(result.exception, DomainError)
    assert result.exception.code == "user_not_found"
