"""Tenant isolation on the routes that write a shared row (issue 20, spec A 2.1, 3, 5.3).

A gym may not attach an existing person without their consent (an invitation they accept), may
not learn whether an address has an account elsewhere, and may not change personal data another
organization holds. Gym A is the `gym` fixture; Pat is a proven login and an active member of
gym B, whose national id B stored.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from gymctl.access.invitations import expire_invitations
from gymctl.crypto import generate_key_setting, national_id_cipher
from gymctl.models import Invitation, Membership, MembershipStatus, Organization, Role, User
from gymctl.providers.mail import MailboxMailer, read_mailbox
from tests import factories
from tests.access.conftest import Person, imported, links_sent, signed_in
from tests.access.test_invitations import link_in
from webhooks.app import create_app

PAT = "pat@example.test"
FRESH = "nobody.yet@example.test"
B_NATIONAL_ID = "PT-19850317-7734"


@dataclass
class OtherGym:
    organization_id: object
    membership_id: object
    pat: Person


@pytest.fixture
def keyed_settings(settings):
    settings.national_id_encryption_key = SecretStr(generate_key_setting())
    return settings


@pytest.fixture
def client(keyed_settings, session_factory, clock, mailbox):
    mailer = MailboxMailer(mailbox, keyed_settings.mail_from, clock=clock)
    app = create_app(keyed_settings, session_factory=session_factory, clock=clock, mailer=mailer)
    return app.test_client()


@pytest.fixture
def mail_down(keyed_settings, session_factory, clock):
    """The app with a mail server that refuses every connection."""
    from gymctl.providers.mail import SmtpMailer

    mailer = SmtpMailer("smtp://127.0.0.1:1", keyed_settings.mail_from)
    return create_app(keyed_settings, session_factory=session_factory, clock=clock, mailer=mailer)


@pytest.fixture
def gym_b(session, idp, keyed_settings) -> OtherGym:
    organization = factories.organization(session, name="Steel Barn")
    pat = signed_in(idp, session, identity_id="user_pat", email=PAT)
    membership = factories.membership(session, user=pat.user, organization=organization)
    session.flush()
    membership.national_id_ciphertext = national_id_cipher(keyed_settings).encrypt(
        B_NATIONAL_ID, table="memberships", column="national_id", row_id=str(membership.id)
    )
    session.commit()
    idp.add_account("user_pat", PAT, verified=True)
    return OtherGym(organization.id, membership.id, pat)


def pat_rows(session, gym_b: OtherGym) -> tuple:
    """Everything gym B relies on about Pat: the shared user row and B's membership."""
    session.expire_all()
    user = session.get(User, gym_b.pat.user.id)
    membership = session.get(Membership, gym_b.membership_id)
    return (
        tuple(getattr(user, c.key) for c in User.__table__.columns),
        tuple(getattr(membership, c.key) for c in Membership.__table__.columns),
    )


def memberships_of(session, user_id) -> dict:
    session.expire_all()
    rows = session.scalars(select(Membership).where(Membership.user_id == user_id))
    return {m.organization_id: m.status for m in rows}


def desk(client, gym, email):
    return client.post(
        f"/organizations/{gym.id}/members",
        json={"email": email, "name": "Walk-in"},
        headers=gym[Role.owner].headers,
    )


def convert(client, gym, email):
    headers = gym[Role.owner].headers
    lead = client.post(
        f"/organizations/{gym.id}/leads", json={"name": "Walk-in", "email": email}, headers=headers
    ).json
    return client.post(f"/organizations/{gym.id}/leads/{lead['id']}/convert", headers=headers)


def import_csv(client, gym, email):
    queued = client.post(
        f"/organizations/{gym.id}/members/import",
        data={"file": (io.BytesIO(f"email,name\n{email},Walk-in\n".encode()), "m.csv")},
        headers=gym[Role.owner].headers,
        content_type="multipart/form-data",
    )
    return imported(client, queued, gym[Role.owner].headers)


def national_id(client, gym, user_id, value="ES-00000000-T"):
    return client.put(
        f"/organizations/{gym.id}/members/{user_id}/national-id",
        json={"nationalId": value},
        headers=gym[Role.owner].headers,
    )


def invite(client, gym, email):
    return client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": email, "role": "member"},
        headers=gym[Role.owner].headers,
    )


def shape(response) -> tuple:
    """What the gym sees of an answer, ids and addresses left out."""
    body = response.json
    if "results" in body:
        members = body["results"]["members"]
        return response.status_code, {key: len(value) for key, value in members.items()}
    return response.status_code, {k: v for k, v in body.items() if k not in ("userId", "email")}


@pytest.mark.parametrize("route", [desk, convert, import_csv])
def test_registering_another_gyms_member_answers_exactly_as_for_an_unknown_address(
    client, session, gym, gym_b, route
):
    """A gym may not learn whether an address has an account elsewhere: no user id of the
    other gym's person, no "login linked", the same answer as for an address nobody uses."""
    fresh = route(client, gym, FRESH)
    known = route(client, gym, PAT)

    assert shape(known) == shape(fresh)
    assert str(gym_b.pat.user.id) not in known.get_data(as_text=True)
    assert "linked" not in known.get_data(as_text=True)
    roster = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers)
    assert str(gym_b.pat.user.id) not in roster.get_data(as_text=True)
    assert {m["login"] for m in roster.json["members"] if m["email"] in (PAT, FRESH)} == {
        "unproven"
    }
    listed = client.get(f"/organizations/{gym.id}/invitations", headers=gym[Role.owner].headers)
    assert listed.json == {"invitations": []}


@pytest.mark.parametrize("route", [desk, convert, import_csv])
def test_registering_another_gyms_member_makes_them_no_member_without_consent(
    client, session, gym, gym_b, route, mailbox
):
    """Spec A 3: the person is asked (an invitation to accept), never attached; signing in
    does not link the gym's profile either."""
    before = pat_rows(session, gym_b)

    assert route(client, gym, PAT).status_code in (200, 201)

    assert pat_rows(session, gym_b) == before
    assert memberships_of(session, gym_b.pat.user.id) == {
        gym_b.organization_id: MembershipStatus.active
    }
    [request] = session.scalars(select(Invitation).where(Invitation.user_id == gym_b.pat.user.id))
    assert (request.organization_id, request.profile_user_id is not None) == (gym.id, True)
    assert links_sent(client) == {"sent": 1, "failed": 0}  # the daemons' sweep
    [message] = read_mailbox(mailbox)
    assert message["To"] == PAT
    me = gym_b.pat
    answer = client.get("/users/me", headers=me.headers)
    assert answer.json["user"]["id"] == str(me.user.id)
    assert [m["organizationId"] for m in answer.json["memberships"]] == [str(gym_b.organization_id)]
    assert link_in(message, "token")  # the link is there to accept; not accepted, nothing moved
    assert pat_rows(session, gym_b) == before


@pytest.mark.parametrize("route", [desk, convert, import_csv])
def test_a_mail_server_down_answers_for_a_login_exactly_as_for_an_unknown_address(
    client, mail_down, mailbox, session, gym, gym_b, route
):
    """The email asking Pat to link went out inside the registration: a mail server down
    answered 502 mail_failed (an import: the row held, then listed as failed) for a login's
    address alone, which told the gym the address has an account. The request is now stored
    with the registration and emailed after it commits; what the mail server answers reaches
    no answer, and the daemon's sweep sends it once the server is back."""
    down = mail_down.test_client()

    fresh = route(down, gym, FRESH)
    known = route(down, gym, PAT)

    assert shape(known) == shape(fresh)
    assert shape(known)[0] in (200, 201)
    [request] = session.scalars(select(Invitation).where(Invitation.user_id == gym_b.pat.user.id))
    assert (request.send_count, read_mailbox(mailbox)) == (0, [])
    assert links_sent(client) == {"sent": 1, "failed": 0}
    [message] = read_mailbox(mailbox)
    assert (message["To"], link_in(message, "token") is not None) == (PAT, True)


def test_a_staff_invite_answers_for_a_login_with_a_link_request_as_for_an_unknown_address(
    client, session, gym, gym_b
):
    """A link request is none of the gym's invitations: the pending check counted it, so
    inviting Pat after registering Pat answered 409 invitation_pending (201 for an address
    nobody uses), for an invitation the gym can neither see nor resend."""
    desk(client, gym, FRESH)
    desk(client, gym, PAT)

    answers = [invite(client, gym, email) for email in (FRESH, PAT)]

    assert [a.status_code for a in answers] == [201, 201]


def test_a_refused_link_request_is_tried_again_behind_the_newer_ones_and_once_at_a_time(
    client, mail_down, session_factory, clock, mailbox, session, gym, gym_b, idp
):
    """The sweep claims a request before its email (a second sweep meanwhile leaves it); a
    request the mail server refused waits LINK_REQUEST_RETRY, then goes after the requests
    never tried, so refused addresses cannot hold newer ones back."""
    from gymctl.access.invitations import LINK_REQUEST_RETRY, deliver_link_requests

    down = mail_down
    desk(down.test_client(), gym, PAT)
    refused = deliver_link_requests(
        session_factory, down.extensions["gymctl"].outreach, now=clock.now()
    )
    assert refused == {"sent": 0, "failed": 1}
    later = signed_in(idp, session, identity_id="user_lee", email="lee@example.test")
    later.user.email_verified_at = clock.now()
    session.commit()
    desk(down.test_client(), gym, "lee@example.test")
    up = client.application.extensions["gymctl"].outreach

    assert deliver_link_requests(session_factory, up, now=clock.now(), limit=1) == {
        "sent": 1,
        "failed": 0,
    }
    assert [m["To"] for m in read_mailbox(mailbox)] == ["lee@example.test"]  # Pat waits
    assert deliver_link_requests(session_factory, up, now=clock.now()) == {"sent": 0, "failed": 0}
    again = clock.now() + LINK_REQUEST_RETRY
    assert deliver_link_requests(session_factory, up, now=again) == {"sent": 1, "failed": 0}
    assert sorted(m["To"] for m in read_mailbox(mailbox)) == ["lee@example.test", PAT]


def test_a_link_request_the_gym_erased_before_its_email_is_never_sent(
    client, mail_down, clock, mailbox, session, gym, gym_b
):
    """Erasure puts an erased address in the gym's invitations that name the person: a link
    request still unsent then reaches no one, and the sweep stops looking at it."""
    from gymctl.access.erasure import erase_personal_data

    profile_id = uuid.UUID(desk(mail_down.test_client(), gym, PAT).json["userId"])
    erase_personal_data(
        session,
        session.get(Organization, gym.id),
        profile_id,
        actor_user_id=gym[Role.owner].user.id,
        now=clock.now(),
    )
    session.commit()

    assert links_sent(client) == {"sent": 0, "failed": 0}
    assert read_mailbox(mailbox) == []


def test_accepting_the_request_links_the_gyms_profile_and_keeps_what_each_gym_holds(
    client, session, gym, gym_b, mailbox, keyed_settings
):
    registered = desk(client, gym, PAT)
    profile_id = registered.json["userId"]
    assert national_id(client, gym, profile_id, "ES-12345678-Z").status_code == 200
    links_sent(client)
    token, _url = link_in(read_mailbox(mailbox)[0], "token")

    accepted = client.post("/invitations/accept", json={"token": token}, headers=gym_b.pat.headers)

    assert accepted.status_code == 200
    assert memberships_of(session, gym_b.pat.user.id) == {
        gym_b.organization_id: MembershipStatus.active,
        gym.id: MembershipStatus.active,
    }
    assert session.get(User, profile_id).deleted_at is not None
    cipher = national_id_cipher(keyed_settings)
    mine = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == gym_b.pat.user.id
        )
    )
    theirs = session.get(Membership, gym_b.membership_id)
    assert [
        cipher.decrypt(
            m.national_id_ciphertext, table="memberships", column="national_id", row_id=str(m.id)
        )
        for m in (mine, theirs)
    ] == ["ES-12345678-Z", B_NATIONAL_ID]
    roster = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers)
    assert {m["userId"]: m["login"] for m in roster.json["members"]}[str(gym_b.pat.user.id)] == (
        "linked"
    )


def test_a_gym_cannot_write_the_national_id_another_organization_holds(client, session, gym, gym_b):
    """The national id lives on each organization's membership: the shared user row has none,
    and a gym reaches only its own membership rows."""
    before = pat_rows(session, gym_b)
    profile_id = desk(client, gym, PAT).json["userId"]

    refused = national_id(client, gym, gym_b.pat.user.id)
    stored = national_id(client, gym, profile_id)

    assert (refused.status_code, refused.json["code"]) == (404, "member_not_found")
    assert stored.status_code == 200
    assert pat_rows(session, gym_b) == before
    assert "national_id_ciphertext" not in User.__table__.columns


@pytest.mark.parametrize(
    "write",
    [
        lambda client, gym, pat: desk(client, gym, PAT),
        lambda client, gym, pat: convert(client, gym, PAT),
        lambda client, gym, pat: import_csv(client, gym, PAT),
        lambda client, gym, pat: national_id(client, gym, pat.user.id),
        lambda client, gym, pat: invite(client, gym, PAT),
        lambda client, gym, pat: client.patch(
            f"/organizations/{gym.id}/members/{pat.user.id}",
            json={"role": "coach"},
            headers=gym[Role.owner].headers,
        ),
        lambda client, gym, pat: client.delete(
            f"/organizations/{gym.id}/members/{pat.user.id}", headers=gym[Role.owner].headers
        ),
    ],
    ids=["desk", "lead", "import", "national_id", "invitation", "role", "removal"],
)
def test_no_write_route_of_a_gym_changes_what_another_organization_relies_on(
    client, session, gym, gym_b, write
):
    before = pat_rows(session, gym_b)

    response = write(client, gym, gym_b.pat)

    assert response.status_code < 500
    assert pat_rows(session, gym_b) == before
    assert memberships_of(session, gym_b.pat.user.id).get(gym.id) in (
        None,
        MembershipStatus.pending_invitation,  # spec A 3: an invitation to an existing account
    )


def test_an_expiring_link_request_leaves_the_gyms_own_invitation_to_the_person_alone(
    client, session, gym, gym_b, clock
):
    invite(client, gym, PAT)  # spec A 3: a pending_invitation membership at once
    desk(client, gym, PAT)  # and a link request for the gym's desk profile
    [staff, link] = sorted(
        session.scalars(select(Invitation).where(Invitation.organization_id == gym.id)),
        key=lambda invitation: invitation.profile_user_id is not None,
    )
    link.expires_at = staff.expires_at.replace(year=2000)
    session.commit()

    assert expire_invitations(session, now=clock.now()) == {"expired": 1}

    assert memberships_of(session, gym_b.pat.user.id)[gym.id] is MembershipStatus.pending_invitation
