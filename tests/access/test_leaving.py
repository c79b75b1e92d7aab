"""What a membership holds ends with it (gymctl.access.leaving): a member removed, erased, in a
gym deleted, or whose login the identity provider deleted is charged nothing more, made active
by no settlement, and holds no seat to come; the waitlist moves up. Through the HTTP routes,
the identity webhook and the collector."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select

from gymctl.access.invitations import _links
from gymctl.billing import collector
from gymctl.bookings import schedule
from gymctl.models import (
    Booking,
    BookingStatus,
    Invitation,
    InvitationStatus,
    Membership,
    MembershipStatus,
    OutboxEvent,
    PaymentTransaction,
    Role,
    Subscription,
)
from gymctl.models.billing import SubscriptionStatus
from tests import factories
from tests.api.test_identity_webhook import deliver, provider_user
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import card_subscription
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def gym(session, idp):
    """A person per role with a real token, on a live card terminal."""
    made = factories.make_gym(
        session,
        name="Iron Temple",
        roles=Role,
        idp=idp,
        card_provider_since=NOW - timedelta(days=400),
    )
    session.commit()
    return made


@pytest.fixture
def full_session(session, gym):
    """A session to come with one seat: the member holds it, the admin waits for it."""
    kind = schedule.create_class_type(
        session, gym.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=1), now=NOW)
    session.commit()
    return row


def _book(client, gym, row, role):
    return client.post(
        f"/organizations/{gym.id}/sessions/{row.id}/book", json={}, headers=gym[role].headers
    )


def _charged(session, session_factory, card_server):  # noqa: F811
    summary = collector.daily_sweep(
        session_factory, card_server.provider(), now=NOW, cipher=TEST_CIPHER
    )
    session.expire_all()
    return summary.charged


def _ended(session, subscription) -> Subscription:
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.cancellation_reason) == (
        SubscriptionStatus.cancelled,
        "membership_ended",
    )
    assert row.next_charge_date is None
    return row


def test_a_removed_member_is_charged_nothing_and_gives_up_their_seat_to_the_waitlist(
    client,
    session,
    session_factory,
    gym,
    card_server,  # noqa: F811
    full_session,
):
    """The removal left the plan active: the collector charged it, and the charge's settlement
    made the removed membership active again; the seat stayed taken while the admin waited."""
    member = gym[Role.member]
    subscription = card_subscription(session, gym, card_server)
    session.commit()
    assert _book(client, gym, full_session, Role.member).json["data"]["status"] == "confirmed"
    assert _book(client, gym, full_session, Role.admin).json["data"]["status"] == "waitlisted"

    removed = client.delete(
        f"/organizations/{gym.id}/members/{member.user.id}", headers=gym[Role.owner].headers
    )

    assert removed.status_code == 200, removed.json
    _ended(session, subscription)
    assert _charged(session, session_factory, card_server) == 0
    assert session.get(Membership, member.membership.id).status is MembershipStatus.cancelled
    seats = {
        b.user_id: b.status
        for b in session.scalars(select(Booking).where(Booking.class_session_id == full_session.id))
    }
    assert seats == {
        member.user.id: BookingStatus.cancelled,
        gym[Role.admin].user.id: BookingStatus.confirmed,
    }


def test_an_erased_member_is_charged_nothing_and_keeps_the_money_record(
    client,
    session,
    session_factory,
    gym,
    card_server,  # noqa: F811
):
    member = gym[Role.member]
    subscription = card_subscription(session, gym, card_server)
    session.commit()

    erased = client.post(
        f"/organizations/{gym.id}/members/{member.user.id}/erasure",
        json={},
        headers=gym[Role.owner].headers,
    )

    assert erased.status_code == 200, erased.json
    assert (erased.json["erased"]["plansEnded"], erased.json["erased"]["seatsGivenUp"]) == (1, 0)
    _ended(session, subscription)
    assert _charged(session, session_factory, card_server) == 0
    assert session.get(Membership, member.membership.id).status is MembershipStatus.cancelled


def test_a_deleted_gym_charges_no_one_and_its_invitations_are_not_accepted(
    client,
    session,
    session_factory,
    gym,
    card_server,  # noqa: F811
    idp,
    settings,
    full_session,
):
    """The gym's members could no longer reach it (404), nor give notice, and the collector
    charged them on; an invitation accepted after the deletion made a member of it. Its seats
    are given up and pass to no one."""
    subscription = card_subscription(session, gym, card_server)
    assert _book(client, gym, full_session, Role.member).json["data"]["status"] == "confirmed"
    assert _book(client, gym, full_session, Role.admin).json["data"]["status"] == "waitlisted"
    newcomer = factories.signed_in(
        idp, session, identity_id="user_newcomer", email="newcomer@example.test"
    )
    session.commit()
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "newcomer@example.test", "role": "coach"},
        headers=gym[Role.owner].headers,
    )
    assert invited.status_code == 201, invited.json

    deleted = client.delete(f"/organizations/{gym.id}", headers=gym[Role.owner].headers)

    assert deleted.status_code == 200, deleted.json
    _ended(session, subscription)
    assert _charged(session, session_factory, card_server) == 0
    invitation = session.scalar(
        select(Invitation).where(Invitation.email == "newcomer@example.test")
    )
    assert invitation.status is InvitationStatus.revoked
    token = parse_qs(urlparse(_links(settings, invitation, NOW)["accept"]).query)["token"][0]
    accepted = client.post("/invitations/accept", json={"token": token}, headers=newcomer.headers)
    assert (accepted.status_code, accepted.json["code"]) == (409, "invitation_not_pending")
    assert session.scalar(select(Membership).where(Membership.user_id == newcomer.user.id)) is None
    seats = session.scalars(select(Booking).where(Booking.class_session_id == full_session.id))
    assert {b.status for b in seats} == {BookingStatus.cancelled}
    promoted = session.scalars(select(OutboxEvent).where(OutboxEvent.name == "booking.promoted"))
    assert promoted.all() == []


def test_a_login_deleted_at_the_provider_ends_its_memberships_and_their_plans(
    client,
    session,
    session_factory,
    gym,
    card_server,  # noqa: F811
):
    """The person was hidden from the roster and could reach no route, yet stayed an active
    member, counted against the cap, and charged every month."""
    member = gym[Role.member]
    subscription = card_subscription(session, gym, card_server)
    session.commit()

    answer = deliver(
        client,
        {"type": "user.deleted", "data": {"id": member.user.identity_id, "deleted": True}},
    )

    assert answer.status_code == 200, answer.json
    _ended(session, subscription)
    assert session.get(Membership, member.membership.id).status is MembershipStatus.cancelled
    assert _charged(session, session_factory, card_server) == 0
    assert (
        session.scalars(
            select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription.id)
        ).all()
        == []
    )


def test_proving_another_address_releases_no_hold_on_the_invited_one(client, session, gym, idp):
    """Spec A 5.3: only an operator's Mark email verified releases a held invitation. A login
    that changed its address at the provider (verified there) proved the new one; the hold on
    the invited address was released at its next /users/me."""
    idp.add_account("user_pat", "pat@example.test", verified=False)
    pat = factories.signed_in(
        idp, session, identity_id="user_pat", email="pat@example.test", verified=False
    )
    session.commit()
    client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "pat@example.test", "role": "coach"},
        headers=gym[Role.owner].headers,
    )
    assert client.get("/users/me", headers=pat.headers).json["invitationHeld"] is True
    deliver(
        client,
        {
            "type": "user.updated",
            "data": provider_user("user_pat", "other@example.test", verified=True),
        },
    )

    client.get("/users/me", headers=pat.headers)

    session.expire_all()
    membership = session.scalar(
        select(Membership).where(
            Membership.user_id == pat.user.id, Membership.organization_id == gym.id
        )
    )
    assert membership.status is MembershipStatus.pending_invitation
    invitation = session.scalar(select(Invitation).where(Invitation.email == "pat@example.test"))
    assert invitation.status is InvitationStatus.pending


def test_an_owners_login_deleted_at_the_provider_leaves_the_gym_its_owner(client, session, gym):
    owner = gym[Role.owner]

    deliver(client, {"type": "user.deleted", "data": {"id": owner.user.identity_id}})

    session.expire_all()
    assert session.get(Membership, owner.membership.id).status is MembershipStatus.active
