"""Compliance PDFs (spec A 2.1): a national id is "released only inside compliance PDFs to
staff-authorized endpoints", never in JSON. The PDF is read back with pypdf."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader
from sqlalchemy import select

from gymctl.models import AuditLog, OutboxEvent, Role
from tests.access import test_national_id as national
from tests.access.conftest import snapshot
from tests.access.test_national_id import NATIONAL_ID, put

keyed_settings = national.keyed_settings  # fixtures: settings with NATIONAL_ID_ENCRYPTION_KEY
keyed_client = national.keyed_client


def pdf_url(gym, user_id):
    return f"/organizations/{gym.id}/members/{user_id}/compliance.pdf"


def text_of(data: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


@pytest.mark.parametrize("by", [Role.owner, Role.admin])
def test_staff_who_manage_members_get_the_national_id_inside_a_pdf(
    keyed_client,
    session,
    gym,
    by,
):
    member = gym[Role.member].user
    assert put(keyed_client, gym, Role.owner, member.id).status_code == 200
    response = keyed_client.get(pdf_url(gym, member.id), headers=gym[by].headers)
    assert response.status_code == 200
    assert response.mimetype == "application/pdf"
    assert response.headers["Cache-Control"] == "no-store"
    text = text_of(response.data)
    assert NATIONAL_ID in text
    assert "member@iron.example" in text
    assert "Iron Temple" in text
    [issued] = session.scalars(
        select(AuditLog).where(AuditLog.action == "user.compliance_pdf_issued")
    ).all()
    assert issued.actor_user_id == gym[by].user.id
    events = session.scalars(select(OutboxEvent)).all()
    assert all(NATIONAL_ID not in str(e.payload) for e in events)
    assert all(NATIONAL_ID not in str(a.data) for a in session.scalars(select(AuditLog)))


def test_a_member_without_a_national_id_gets_a_pdf_that_says_so(keyed_client, gym):
    response = keyed_client.get(
        pdf_url(gym, gym[Role.coach].user.id), headers=gym[Role.owner].headers
    )
    assert response.status_code == 200
    assert "not collected" in text_of(response.data)


@pytest.mark.parametrize("by", [Role.coach, Role.member])
def test_the_pdf_is_refused_to_anyone_who_does_not_manage_members(
    keyed_client,
    session,
    gym,
    by,
):
    member = gym[Role.member].user
    put(keyed_client, gym, Role.owner, member.id)
    before = snapshot(session)
    response = keyed_client.get(pdf_url(gym, member.id), headers=gym[by].headers)
    assert (response.status_code, response.json["code"]) == (403, "permission_denied")
    assert NATIONAL_ID not in response.get_data(as_text=True)
    assert snapshot(session) == before


def test_another_gyms_member_has_no_pdf_here(keyed_client, session, gym, outsider):
    response = keyed_client.get(pdf_url(gym, outsider.user.id), headers=gym[Role.owner].headers)
    assert (response.status_code, response.json["code"]) == (404, "member_not_found")


def test_without_the_key_a_stored_id_is_503_not_a_blank(
    keyed_client, keyed_settings, session_factory, clock, session, gym
):
    from webhooks.app import create_app

    member = gym[Role.member].user
    put(keyed_client, gym, Role.owner, member.id)
    unkeyed = keyed_settings.model_copy(update={"national_id_encryption_key": None})
    client = create_app(unkeyed, session_factory=session_factory, clock=clock).test_client()
    response = client.get(pdf_url(gym, member.id), headers=gym[Role.owner].headers)
    assert (response.status_code, response.json["code"]) == (503, "national_id_not_configured")
