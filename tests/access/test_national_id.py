"""National ids (spec A 2.1): encrypted before storage, bound to their row, never logged, never in
a normal response or event; set only by staff who manage members. Each organization's value lives
on its own membership (docs/decisions.md, issue 20): no gym reads or overwrites another's."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.crypto import DecryptionError, generate_key_setting, national_id_cipher
from gymctl.logs import JsonFormatter
from gymctl.models import AuditLog, Membership, OutboxEvent, Role
from gymctl.providers.mail import MailboxMailer
from tests.access.conftest import snapshot
from webhooks.app import create_app

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

NATIONAL_ID = "PT-19850317-7734"


@pytest.fixture
def keyed_settings(settings):
    settings.national_id_encryption_key = SecretStr(generate_key_setting())
    return settings


@pytest.fixture
def keyed_client(keyed_settings, session_factory, clock, mailbox):
    mailer = MailboxMailer(mailbox, keyed_settings.mail_from, clock=clock)
    app = create_app(keyed_settings, session_factory=session_factory, clock=clock, mailer=mailer)
    return app.test_client()


def put(client, gym, by: Role, user_id, national_id=NATIONAL_ID):
    return client.put(
        f"/organizations/{gym.id}/members/{user_id}/national-id",
        json={"nationalId": national_id},
        headers=gym[by].headers,
    )


def held(session: Session, gym, user_id) -> Membership:
    session.expire_all()
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == user_id
        )
    )


def stored(session: Session, user_id, gym) -> str | None:
    return held(session, gym, user_id).national_id_ciphertext


@pytest.mark.parametrize("by", [Role.owner, Role.admin])
def test_staff_who_manage_members_store_the_id_encrypted_and_bound_to_the_row(
    keyed_client, session, keyed_settings, gym, by
):
    member = gym[Role.member].user

    response = put(keyed_client, gym, by, member.id)

    assert response.status_code == 200
    assert response.json == {"userId": str(member.id), "nationalIdStored": True}
    assert NATIONAL_ID not in response.get_data(as_text=True)
    ciphertext = stored(session, member.id, gym)
    assert NATIONAL_ID not in ciphertext
    assert "19850317" not in ciphertext
    cipher = national_id_cipher(keyed_settings)
    row = held(session, gym, member.id)
    assert (
        cipher.decrypt(ciphertext, table="memberships", column="national_id", row_id=str(row.id))
        == NATIONAL_ID
    )
    with pytest.raises(DecryptionError):  # copied to another row, it does not decrypt
        cipher.decrypt(
            ciphertext,
            table="memberships",
            column="national_id",
            row_id=str(gym[Role.coach].membership.id),
        )


def test_setting_the_same_id_again_encrypts_afresh(keyed_client, session, gym):
    member = gym[Role.member].user
    put(keyed_client, gym, Role.owner, member.id)
    first = stored(session, member.id, gym)

    put(keyed_client, gym, Role.owner, member.id)

    assert stored(session, member.id, gym) != first  # a fresh nonce: equal ids do not show as equal


def test_no_log_line_event_or_audit_row_of_the_request_carries_the_id(
    keyed_client, session, gym, caplog
):
    member = gym[Role.member].user
    events_before = session.scalar(select(OutboxEvent.id).order_by(OutboxEvent.id.desc()).limit(1))
    formatter = JsonFormatter()

    with caplog.at_level(logging.DEBUG):
        stored_response = put(keyed_client, gym, Role.owner, member.id)
        refused = put(keyed_client, gym, Role.coach, member.id)
        invalid = put(keyed_client, gym, Role.owner, member.id, national_id=NATIONAL_ID + " !")

    assert (stored_response.status_code, refused.status_code, invalid.status_code) == (
        200,
        403,
        400,
    )
    assert caplog.records, "the requests were logged"
    logged = "\n".join(
        formatter.format(record) + json.dumps(vars(record), default=str)
        for record in caplog.records
    )
    session.expire_all()
    events = session.scalars(select(OutboxEvent).where(OutboxEvent.id > (events_before or 0))).all()
    audits = session.scalars(
        select(AuditLog).where(AuditLog.action == "user.national_id_set")
    ).all()
    assert [e.name for e in events] == ["user.national_id_set"]
    assert len(audits) == 1
    recorded = json.dumps(
        [{"name": e.name, "aggregate": e.aggregate_id, "payload": e.payload} for e in events]
        + [{"target": a.target_id, "data": a.data} for a in audits]
    )
    answered = "".join(
        r.get_data(as_text=True) + str(r.headers) for r in (stored_response, refused, invalid)
    )
    for trace in (NATIONAL_ID, "19850317"):
        assert trace not in logged
        assert trace not in recorded
        assert trace not in answered


def test_the_roster_and_users_me_never_show_the_id(keyed_client, session, gym):
    member = gym[Role.member]
    put(keyed_client, gym, Role.owner, member.user.id)
    ciphertext = stored(session, member.user.id, gym)

    roster = keyed_client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers)
    me = keyed_client.get("/users/me", headers=member.headers)

    assert (roster.status_code, me.status_code) == (200, 200)
    for response in (roster, me):
        text = response.get_data(as_text=True)
        assert NATIONAL_ID not in text
        assert ciphertext not in text
        assert "national" not in text.lower()


@pytest.mark.parametrize("by", [Role.coach, Role.member])
def test_a_role_without_member_management_cannot_set_an_id(keyed_client, session, gym, by):
    before = snapshot(session)

    response = put(keyed_client, gym, by, gym[Role.member].user.id)

    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert snapshot(session) == before


@pytest.mark.parametrize("bad", ["12", "PT 1985 0317", "PT-1985/0317", "x" * 33, ""])
def test_an_invalid_id_is_400_invalid_body_and_not_echoed(keyed_client, session, gym, bad):
    before = snapshot(session)

    response = put(keyed_client, gym, Role.owner, gym[Role.member].user.id, national_id=bad)

    assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert response.json["fields"][0]["field"] == "nationalId"
    if bad:
        assert bad not in response.get_data(as_text=True)
    assert snapshot(session) == before


def test_a_person_outside_the_organization_is_404(keyed_client, session, gym, outsider):
    before = snapshot(session)

    response = put(keyed_client, gym, Role.owner, outsider.user.id)

    assert (response.status_code, response.json["code"]) == (404, "member_not_found")
    assert snapshot(session) == before


# --- without NATIONAL_ID_ENCRYPTION_KEY ------------------------------------------------------


def test_without_the_key_setting_nothing_is_stored_and_the_id_is_not_logged(
    client, session, settings, gym, caplog
):
    assert settings.national_id_encryption_key is None
    before = snapshot(session)

    with caplog.at_level(logging.DEBUG):
        response = put(client, gym, Role.owner, gym[Role.member].user.id)

    assert response.status_code >= 500
    assert NATIONAL_ID not in response.get_data(as_text=True)
    formatter = JsonFormatter()
    logged = "\n".join(
        formatter.format(record) + json.dumps(vars(record), default=str)
        for record in caplog.records
    )
    assert NATIONAL_ID not in logged
    assert snapshot(session) == before


def test_without_the_key_setting_the_refusal_names_the_missing_configuration(client, gym):
    response = put(client, gym, Role.owner, gym[Role.member].user.id)

    assert (response.status_code, response.json["code"]) == (503, "national_id_not_configured")
