"""One address rule at every door (`same_address`: the database folds letter case on both
sides; surrounding whitespace is no part of an address). Erasure's lists, the roster's
duplicate rows and a login's changed address compared with Python's str.lower(), which folds
otherwise than either engine's lower(): erasure missed a person's address in a bulk invite, or
scrubbed another person's, a roster let two rows of one address through (or refused two
different ones), and user.updated kept an address proven that the lookups call another.

What counts as one address (the spec does not say; what users expect, decisions s48): the
domain's and the local part's ASCII letter case and surrounding whitespace never make two
addresses. A letter beyond ASCII folds as the database folds it: PostgreSQL folds its case
('Änna' is 'änna', 'İpek' is 'ipek', 'STRAẞE' is 'straße'), SQLite's lower() folds ASCII only
(each is two addresses there). Never one address on either engine: 'ß' and 'ss', and 'İ' and
'i' followed by a combining dot (Python's lower() of 'İ')."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.identity.webhook_signature import sign
from gymctl.models import Invitation, InvitationBatch, Role, User
from tests import factories
from tests.conftest import NOW, WEBHOOK_SECRET

pytestmark = pytest.mark.embedded  # the demo gym reaches each door: both engines

# (the person's address, another form of it, one address on PostgreSQL, on SQLite)
FORMS = [
    pytest.param("anna@example.test", "anna@EXAMPLE.Test", True, True, id="domain-case"),
    pytest.param("anna@example.test", "ANNA@example.test", True, True, id="local-case"),
    pytest.param("Änna@x.test", "änna@x.test", True, False, id="a-umlaut"),
    pytest.param("strasse@x.test", "straße@x.test", False, False, id="sharp-s-is-not-ss"),
    pytest.param("STRAẞE@x.test", "straße@x.test", True, False, id="capital-sharp-s"),
    pytest.param("İpek@x.test", "ipek@x.test", True, False, id="dotted-capital-i"),
    pytest.param("İpek@x.test", "i\u0307pek@x.test", False, False, id="i-combining-dot"),
]


def one_address(engine, on_pg: bool, on_sqlite: bool) -> bool:
    return on_pg if engine.dialect.name == "postgresql" else on_sqlite


def erase(client, gym, user_id):
    return client.post(
        f"/organizations/{gym.id}/members/{user_id}/erasure", headers=gym[Role.owner].headers
    )


def desk_person(session, gym, email):
    person = factories.user(session, identity_id=None, email=email, name="Person")
    factories.membership(session, user=person, organization=gym.organization, role=Role.member)
    return person


@pytest.mark.parametrize(("given", "other", "on_pg", "on_sqlite"), FORMS)
def test_erasure_scrubs_a_bulk_invites_address_exactly_when_it_scrubs_its_invitation(
    engine, client, session, gym, given, other, on_pg, on_sqlite
):
    person = desk_person(session, gym, given)
    session.commit()
    queued = client.post(
        f"/organizations/{gym.id}/invitations/bulk",
        json={"emails": [f" {other} ", "bystander@x.test"]},  # the body strips it
        headers=gym[Role.owner].headers,
    )
    assert queued.status_code == 202, queued.json
    batch_id = uuid.UUID(queued.json["id"])
    # The invitation the worker makes of that address (stored as normalize_email gives it).
    invitation = Invitation(
        organization_id=gym.id,
        email=other,
        role=Role.member,
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(invitation)
    session.commit()

    assert erase(client, gym, person.id).status_code == 200

    session.expire_all()
    expected = one_address(engine, on_pg, on_sqlite)
    listed = session.get(InvitationBatch, batch_id).emails
    assert (other not in listed) is expected
    assert "bystander@x.test" in listed
    assert (session.get(Invitation, invitation.id).email != other) is expected


def upload(client, gym, *emails):
    return client.post(
        f"/organizations/{gym.id}/members/import",
        data="email,name\n" + "".join(f"{email},Someone\n" for email in emails),
        headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
    )


@pytest.mark.parametrize(("given", "other", "on_pg", "on_sqlite"), FORMS)
def test_a_roster_refuses_a_second_row_exactly_when_it_is_the_same_address(
    engine, client, session, gym, given, other, on_pg, on_sqlite
):
    answer = upload(client, gym, given, f" {other} ")

    assert answer.status_code == 202, answer.json
    expected = one_address(engine, on_pg, on_sqlite)
    invalid = answer.json["results"]["members"]["invalid"]
    assert invalid == ([{"row": 3, "reason": "duplicate"}] if expected else [])
    assert answer.json["total"] == (1 if expected else 2)


_delivery = iter(range(1, 10_000))


def deliver_updated(client, identity_id, email):
    """user.updated with `email` as the primary address, not (yet) verified at the provider."""
    body = json.dumps(
        {
            "type": "user.updated",
            "data": {
                "id": identity_id,
                "email_addresses": [
                    {
                        "id": "idn_primary",
                        "email_address": email,
                        "verification": {"status": "unverified"},
                    }
                ],
                "primary_email_address_id": "idn_primary",
            },
        }
    ).encode()
    delivery_id = f"msg_forms_{next(_delivery)}"
    timestamp = int(NOW.timestamp())
    headers = {
        "svix-id": delivery_id,
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, delivery_id, timestamp, body),
    }
    return client.post(
        "/webhooks/identity", data=body, headers=headers, content_type="application/json"
    )


@pytest.mark.parametrize(("given", "other", "on_pg", "on_sqlite"), FORMS)
def test_a_login_keeps_its_proof_exactly_when_its_new_address_is_the_same(
    engine, client, session, given, other, on_pg, on_sqlite
):
    login = factories.user(session, identity_id="user_forms", email=given, email_verified_at=NOW)
    session.commit()

    answer = deliver_updated(client, "user_forms", other)

    assert answer.status_code == 200, answer.json
    session.expire_all()
    row = session.get(User, login.id)
    assert row.email == other
    assert (row.email_verified_at is not None) is one_address(engine, on_pg, on_sqlite)


def test_a_providers_address_is_kept_without_its_surrounding_whitespace(engine, client, session):
    """A login whose provider address came padded is found by its address as any other."""
    login = factories.user(
        session, identity_id="user_padded", email="pad@x.test", email_verified_at=NOW
    )
    session.commit()

    assert deliver_updated(client, "user_padded", "  Pad@X.test \t").status_code == 200

    session.expire_all()
    row = session.get(User, login.id)
    assert (row.email, row.email_verified_at) == ("Pad@X.test", NOW)
    found = session.scalar(select(User.id).where(User.email == "Pad@X.test"))
    assert found == login.id
