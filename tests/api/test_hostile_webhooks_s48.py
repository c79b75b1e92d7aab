"""The providers' webhooks as an unreliable peer or an attacker sends them (s48): the same
identity event under a new delivery id, user objects older than one already applied, a
malformed webhook secret, and a card-provider page of one gym posted to another on the same
terminal. Each is an idempotent 200 or a 4xx/503 that changes nothing, never a 500."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.models import Invitation, InvitationStatus, OutboxEvent, PaymentTransaction, User
from tests import factories
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixtures)
from tests.api.test_identity_webhook import deliver, provider_user
from tests.billing.cards import APPROVE
from tests.billing.conftest import card_server  # noqa: F401 (fixture)

# The billing tests' app (with the fake card provider): the identity webhook is served by it too.
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

T0 = 1_700_000_000_000  # the provider's updated_at: milliseconds since the epoch


def at(data: dict, updated_at: int) -> dict:
    return {**data, "created_at": T0, "updated_at": updated_at}


def user_row(session, identity_id="user_2abc") -> User:
    session.expire_all()
    return session.scalar(select(User).where(User.identity_id == identity_id))


def state(session) -> dict[str, list[str]]:
    """Every table but the delivery log (each delivery id is kept with its outcome)."""
    rows = snapshot(session)
    del rows["identity_webhook_deliveries"]
    return rows


def signed_up(session) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count()).select_from(OutboxEvent).where(OutboxEvent.name == "user_signed_up")
    )


def test_user_created_again_under_a_new_delivery_id_changes_nothing(client, session):
    """The provider (or an operator replaying from its dashboard) sends user.created again as a
    new message: it emitted user_signed_up a second time and auto-accepted an invitation the
    gym sent since, which the person had not asked for."""
    event = {"type": "user.created", "data": at(provider_user(), T0)}
    assert deliver(client, event).json["outcome"] == "created"
    later_gym = factories.organization(session, name="Later Gym")
    later = Invitation(
        organization_id=later_gym.id,
        email="alice@example.test",
        role="coach",
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(later)
    session.commit()
    before = state(session)

    again = deliver(client, event)

    assert (again.status_code, again.json["outcome"]) == (200, "ignored")
    assert state(session) == before
    assert signed_up(session) == 1
    assert session.get(Invitation, later.id).status is InvitationStatus.pending


def test_a_late_user_created_keeps_the_newer_address_of_user_updated(client, session):
    """A user.created retried after the user.updated that followed it wrote the sign-up's
    address back over the one the person changed to (and sent it to the gyms' systems)."""
    created = at(provider_user(), T0)
    updated = at(provider_user(email="new@example.test"), T0 + 60_000)
    assert deliver(client, {"type": "user.updated", "data": updated}).status_code == 200

    late = deliver(client, {"type": "user.created", "data": created})

    assert late.status_code == 200
    user = user_row(session)
    assert user.email == "new@example.test"
    assert signed_up(session) == 1  # the sign-up itself still counts, once


def test_an_older_user_updated_after_a_newer_one_changes_nothing(client, session):
    assert deliver(client, {"type": "user.created", "data": at(provider_user(), T0)}).status_code
    newer = at(provider_user(email="newer@example.test", image_url=None), T0 + 120_000)
    older = at(provider_user(email="older@example.test"), T0 + 60_000)
    assert deliver(client, {"type": "user.updated", "data": newer}).json["outcome"] == "mirrored"
    before = state(session)

    late = deliver(client, {"type": "user.updated", "data": older})

    assert (late.status_code, late.json["outcome"]) == (200, "ignored")
    assert state(session) == before
    assert (user_row(session).email, user_row(session).image_url) == ("newer@example.test", None)


@pytest.mark.parametrize("updated_at", ["1700000000000", 1.5e12, -1, True, 2**70, None])
def test_an_odd_updated_at_is_a_400_or_read_as_absent_never_a_500(client, session, updated_at):
    """The provider's updated_at is an integer of milliseconds; anything else is not trusted
    for ordering: refused (400, nothing written), or absent (null: applied as sent)."""
    before = snapshot(session)
    reply = deliver(client, {"type": "user.updated", "data": at(provider_user(), updated_at)})
    if updated_at is None:
        assert reply.status_code == 200
        return
    assert (reply.status_code, reply.json["code"]) == (400, "webhook_payload_invalid")
    assert snapshot(session) == before


@pytest.mark.parametrize("secret", ["whsec_not*base64", "whsec_", "plain text secret"])
def test_a_malformed_webhook_secret_answers_503_not_configured_not_a_500(
    settings, session_factory, clock, session, secret
):
    """An IDENTITY_WEBHOOK_SECRET that is not whsec_ + base64 raised ValueError inside the
    signature check on every delivery: a 500 with a traceback, where an unset one is a 503."""
    from pydantic import SecretStr

    from webhooks.app import create_app

    settings.identity_webhook_secret = SecretStr(secret)
    client = create_app(settings, session_factory=session_factory, clock=clock).test_client()
    before = snapshot(session)
    response = deliver(client, {"type": "user.created", "data": provider_user()})
    assert (response.status_code, response.json["code"]) == (503, "webhook_not_configured")
    assert snapshot(session) == before


def test_user_created_under_two_delivery_ids_at_once_signs_up_once(committed_pg, settings, clock):
    """Two messages of one user.created, delivered at once on real commits (PostgreSQL): the
    login did not exist yet, so neither found a row to wait on, and both emitted user_signed_up
    (the loser of the insert read the winner's row and went on as a link)."""
    from gymctl.db import get_engine, session_factory
    from tests.api.test_identity_concurrency import _concurrently, _count
    from webhooks.app import create_app

    factory = session_factory(get_engine(committed_pg))
    served = create_app(settings, session_factory=factory, clock=clock)
    event = {"type": "user.created", "data": at(provider_user("user_twice"), T0)}
    ids = iter(f"msg_twice_{n}" for n in range(4))
    lock = __import__("threading").Lock()

    def send():
        with lock:
            delivery_id = next(ids)
        return deliver(served.test_client(), event, delivery_id=delivery_id).status_code

    assert _concurrently(4, send) == [200] * 4
    assert _count(factory, User, User.identity_id == "user_twice") == 1
    assert _count(factory, OutboxEvent, OutboxEvent.name == "user_signed_up") == 1


def test_a_page_of_another_gym_on_the_same_terminal_changes_nothing_at_either(
    client,
    org,  # noqa: F811
    card_server,  # noqa: F811
    session,
):
    """Held (s48): gym B shares gym A's merchant terminal; A's paid page posted to B's
    endpoint reads back as a real page none of B's checkouts opened (400 webhook_unverified),
    and A's checkout is still settled once, by its own endpoint."""
    other = factories.make_gym(session, name="Shared Terminal Gym", card_provider_since=NOW)
    session.commit()
    plan = create_plan(client, org)
    page_id = purchase(client, org, plan).json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    before = {k: v for k, v in snapshot(session).items() if k != "outbox_events"}

    crossed = client.post(
        f"/webhooks/card-provider/{other.organization.id}", json={"LowProfileId": page_id}
    )

    assert (crossed.status_code, crossed.json["code"]) == (400, "webhook_unverified")
    assert {k: v for k, v in snapshot(session).items() if k != "outbox_events"} == before
    assert webhook(client, org, page_id).json["outcome"] == "processed"
    assert webhook(client, org, page_id).json["outcome"] == "processed"
    session.expire_all()
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == 1
