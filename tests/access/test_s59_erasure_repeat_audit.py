"""A second erasure that finds nothing left to erase writes no second `personal_data.erased`
row (s59). Spec A 2.8 keeps "personal-data erasure" owner-only, and the gym's audit records
what its owner did to the person's data: a repeat that erased nothing did nothing to record
(decisions s55 listed "repeated erasure writes a second audit row" as a defect left open). A
repeat that does find something (a lead made under the address since) erases it and is
audited as the first was (decisions s52: a repeat is a full erasure again)."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import func, select

from gymctl.access.erased import ERASURE_ACTION
from gymctl.models import AuditLog, Invitation, InvitationStatus, Lead, Role
from gymctl.models.releases import PushRegistration
from tests.access.conftest import snapshot
from tests.access.test_erasure import desk_member, erase  # noqa: F401 (a fixture)
from tests.conftest import NOW


def _erasure_rows(session, gym, person) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count())
        .select_from(AuditLog)
        .where(
            AuditLog.action == ERASURE_ACTION,
            AuditLog.organization_id == gym.id,
            AuditLog.target_id == str(person.id),
        )
    )


def _held_rows(session, gym, person) -> None:
    """Rows a repeat finds again by the person's id (not by address): a lead converted to
    them, an invitation they accepted, a device registered for the gym's pushes."""
    session.add(
        Lead(organization_id=gym.id, name="Converted", email="x@lead.example",
             converted_user_id=person.id, created_at=NOW)
    )  # fmt: skip
    session.add(
        Invitation(organization_id=gym.id, email=person.email or "y@desk.example",
                   role=Role.member, status=InvitationStatus.accepted, user_id=person.id,
                   expires_at=NOW, created_at=NOW, accepted_at=NOW)
    )  # fmt: skip
    session.add(
        PushRegistration(organization_id=gym.id, user_id=person.id, app_id="app.test",
                         platform="ios", token="device-token",
                         token_sha256=hashlib.sha256(b"device-token").hexdigest(),
                         registered_at=NOW)
    )  # fmt: skip
    session.commit()


@pytest.mark.embedded  # the demo gym reaches erasure: both engines
@pytest.mark.parametrize("who", ["desk profile", "member with a login"])
def test_a_repeat_that_erases_nothing_writes_no_second_audit_row(
    engine,
    client,
    session,
    gym,
    desk_member,  # noqa: F811
    who,
):
    person = desk_member if who == "desk profile" else gym[Role.member].user
    _held_rows(session, gym, person)
    first = erase(client, gym, person.id)
    assert first.status_code == 200, first.json
    assert _erasure_rows(session, gym, person) == 1
    before = snapshot(session)

    again = erase(client, gym, person.id)

    assert again.status_code == 200, again.json
    assert again.json["userId"] == str(person.id)
    assert set(again.json["erased"]) == set(first.json["erased"])
    assert again.json["erased"]["userRowErased"] is first.json["erased"]["userRowErased"]
    assert _erasure_rows(session, gym, person) == 1
    assert snapshot(session) == before  # nothing at all was written


@pytest.mark.embedded
def test_a_repeat_that_finds_a_new_lead_erases_it_and_is_audited(engine, client, session, gym):
    person = gym[Role.member].user  # their login keeps the user row and its address
    assert erase(client, gym, person.id).status_code == 200
    session.add(Lead(organization_id=gym.id, name="Dana Again", email=person.email))
    session.commit()

    again = erase(client, gym, person.id)

    assert again.status_code == 200, again.json
    assert again.json["erased"]["leads"] == 1
    assert _erasure_rows(session, gym, person) == 2
