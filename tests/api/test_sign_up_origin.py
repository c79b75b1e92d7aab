"""Where a login came from (spec A 5.3, 6.1): a join-ticket sign-up is unproven and names its gym
and link; GET /users/me before the webhook asks the provider for the address."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gymctl.access import tickets
from gymctl.models import User
from tests import factories
from tests.access.conftest import snapshot
from tests.access.test_join import make_link
from tests.api.test_identity_webhook import deliver, provider_user
from tests.conftest import NOW


def _join_ticket(settings, organization, link_id, email, *, expires_at=NOW + timedelta(days=2)):
    return tickets.sign(
        settings,
        tickets.JOIN,
        str(link_id),
        now=NOW,
        expires_at=expires_at,
        email=email,
        org=str(organization.id),
    )


def _row(session, identity_id):
    session.expire_all()
    return session.scalar(select(User).where(User.identity_id == identity_id))


def test_a_join_ticket_sign_up_is_unproven_and_records_its_gym_and_link(client, session, settings):
    """Spec A 5.3: "A login created from a join link handed to the browser has an unproven
    email", whatever the provider's verification flag says."""
    gym = factories.organization(session, name="Join Gym")
    link = make_link(session, gym)
    session.commit()
    data = provider_user("user_joined", "joined@example.test", verified=True)
    data["unsafe_metadata"] = {
        "joinTicket": _join_ticket(settings, gym, link.id, "joined@example.test")
    }
    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200
    user = _row(session, "user_joined")
    assert user.email_verified_at is None
    assert (user.signup_origin, user.signup_organization_id, user.signup_join_link_id) == (
        "join_link",
        gym.id,
        link.id,
    )
    # A later user.updated with the same flag does not prove it either: only an operator does.
    data.pop("unsafe_metadata")
    assert deliver(client, {"type": "user.updated", "data": data}).status_code == 200
    assert _row(session, "user_joined").email_verified_at is None


def test_a_forged_join_ticket_names_no_gym_but_still_leaves_the_address_unproven(client, session):
    data = provider_user("user_forged", "forged@example.test", verified=True)
    data["unsafe_metadata"] = {"joinTicket": "not-a-ticket"}
    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200
    user = _row(session, "user_forged")
    assert user.email_verified_at is None
    assert (user.signup_origin, user.signup_join_link_id) == ("join_link", None)


def test_an_expired_join_ticket_still_says_where_the_login_came_from(client, session, settings):
    gym = factories.organization(session, name="Late Gym")
    link = make_link(session, gym)
    session.commit()
    data = provider_user("user_late", "late@example.test")
    data["unsafe_metadata"] = {
        "joinTicket": _join_ticket(
            settings, gym, link.id, "late@example.test", expires_at=NOW - timedelta(hours=1)
        )
    }
    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200
    assert _row(session, "user_late").signup_join_link_id == link.id


def test_a_sign_up_without_a_ticket_keeps_trusting_the_provider_flag(client, session):
    data = provider_user("user_plain", "plain@example.test", verified=True)
    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200
    user = _row(session, "user_plain")
    assert user.email_verified_at is not None
    assert user.signup_origin == "self"


def _bearer(idp, sub):
    return {"Authorization": f"Bearer {idp.token(sub, now=NOW)}"}


def test_users_me_before_the_webhook_asks_the_provider_and_ownership_fires(client, session, idp):
    """Spec A 5.3: a gym-created profile under an unproven login's address is not linked and
    GET /users/me answers 403 EMAIL_OWNERSHIP_REQUIRED, also before user.created arrived."""
    factories.user(session, identity_id=None, email="desk@example.test", signup_origin="desk")
    session.commit()
    idp.add_account("user_desk", "desk@example.test", verified=False)
    before = snapshot(session)
    response = client.get("/users/me", headers=_bearer(idp, "user_desk"))
    assert response.status_code == 403
    assert response.json["code"] == "EMAIL_OWNERSHIP_REQUIRED"
    assert snapshot(session) == before  # every row whole: the profile is neither linked nor copied


def test_users_me_before_the_webhook_takes_the_address_from_the_provider(client, session, idp):
    idp.add_account("user_early", "early@example.test", verified=True)
    response = client.get("/users/me", headers=_bearer(idp, "user_early"))
    assert response.status_code == 200, response.json
    assert response.json["user"]["email"] == "early@example.test"
    assert _row(session, "user_early").email_verified_at is not None


def test_users_me_falls_back_to_the_token_alone_when_the_provider_is_down(client, session, idp):
    idp.add_account("user_down", "down@example.test")
    idp.down = True
    response = client.get("/users/me", headers=_bearer(idp, "user_down"))
    assert response.status_code == 200, response.json
    assert response.json["user"]["email"] is None
    assert _row(session, "user_down").email is None


def test_find_or_create_reads_are_rate_limited_per_process(client, session, idp, app):
    """Past the user-read window no call is made: the row starts from the token alone."""
    from gymctl.providers.identity_admin import USER_READS_PER_WINDOW

    admin = app.extensions["gymctl"].identity_admin
    for _ in range(USER_READS_PER_WINDOW):  # the window already full in this process
        assert admin._user_reads.take(admin._clock.now()) is None
    idp.add_account("user_busy", "busy@example.test")
    before = idp.admin_requests
    response = client.get("/users/me", headers=_bearer(idp, "user_busy"))
    assert response.status_code == 200
    assert response.json["user"]["email"] is None
    assert idp.admin_requests == before


def test_a_provider_429_falls_back_to_the_token_alone(client, session, idp):
    idp.add_account("user_limited", "limited@example.test")
    idp.answer_429_after = 0
    response = client.get("/users/me", headers=_bearer(idp, "user_limited"))
    assert response.status_code == 200
    assert response.json["user"]["email"] is None
