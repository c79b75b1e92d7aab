"""A member's whole life through the API and the sweeps, on a fixed clock, on PostgreSQL and on
the embedded default: join and buy, renew, decline into debt, a booking refused with billingDebt,
the debt paid, booking again, notice given, withdrawn and given again, the period-end settlement;
a desk charge and its refund beside it. Each area writes what the next one reads, so after every
step the ledger, the subscription, the booking eligibility and the events must agree (spec B 2,
3, 4.3, 6, 7, 8)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector, lifecycle
from gymctl.models import OutboxEvent, PaymentTransaction, Role, Subscription
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailboxMailer
from gymctl.retention.settlement import Doors, period_end_sweep
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, DECLINE
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches every step: both engines


class Life:
    """The member, the owner and the sweeps, on one clock."""

    def __init__(self, client, gym_, card_server, session, session_factory, clock, idp, box):
        self.client, self.org, self.card_server, self.idp = client, gym_, card_server, idp
        self.session, self.factory, self.clock = session, session_factory, clock
        self.member, self.owner = gym_[Role.member], gym_[Role.owner]
        self.doors = Doors(
            provider=card_server.provider(),
            cipher=TEST_CIPHER,
            documents=LocalDocumentProvider(),
            mailer=MailboxMailer(box, "gym@example.test", clock=clock),
        )

    def headers(self, who) -> dict[str, str]:
        """A token of this moment: the life spans months, a session token minutes."""
        token = self.idp.token(who.user.identity_id, now=self.clock.now())
        return {"Authorization": f"Bearer {token}"}

    def call(self, method, path, who, expected, **kwargs):
        url, headers = f"/organizations/{self.org.id}{path}", self.headers(who)
        response = self.client.open(url, method=method, headers=headers, **kwargs)
        assert response.status_code == expected, (method, path, response.json)
        return response.json

    def subscription(self, subscription_id) -> Subscription:
        self.session.expire_all()
        return self.session.get(Subscription, uuid.UUID(str(subscription_id)))

    def ledger(self, subscription_id) -> list[tuple[str, str, int]]:
        self.session.expire_all()
        rows = self.session.scalars(
            select(PaymentTransaction)
            .where(PaymentTransaction.subscription_id == uuid.UUID(str(subscription_id)))
            .order_by(PaymentTransaction.created_at, PaymentTransaction.id)
        )
        return [(t.type.value, t.status.value, t.amount_in_cents) for t in rows]

    def events(self) -> list[str]:
        self.session.expire_all()
        return [e.name for e in self.session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))]

    def at(self, moment) -> None:
        self.clock.set(moment)

    def collect(self) -> dict:
        summary = collector.daily_sweep(
            self.factory, self.card_server.provider(), now=self.clock.now(), cipher=TEST_CIPHER
        )
        return summary.as_dict()

    def lifecycle(self) -> dict:
        with self.factory() as session:
            result = lifecycle.run_lifecycle(session, now=self.clock.now())
            session.commit()
        return result

    def save_card(self, subscription_id, card: str) -> None:
        """The member replaces the card through a token-only hosted page (spec B 2.2)."""
        path = f"/subscriptions/{subscription_id}/card-replacement"
        page = self.call("POST", path, self.member, 201, json={})["data"]["checkout"]["pageId"]
        self.card_server.complete_page(page, card)
        assert webhook(self.client, self.org, page).status_code == 200

    def book(self, session_id, expected):
        return self.call("POST", f"/sessions/{session_id}/book", self.member, expected, json={})


@pytest.fixture
def life(client, org, card_server, session, session_factory, clock, idp, mailbox):  # noqa: F811
    return Life(client, org, card_server, session, session_factory, clock, idp, mailbox)


def test_a_members_life_keeps_ledger_subscription_bookings_and_events_in_agreement(life):
    # The owner's billing settings: two days of grace, the gym's own time zone.
    grace = {"billingGraceDays": 2, "timezone": "Asia/Jerusalem"}
    life.call("PATCH", "/billing/settings", life.owner, 200, json=grace)

    # Join and buy: the page is read back, the first month is charged once.
    plan = create_plan(life.client, life.org)
    bought = purchase(life.client, life.org, plan)
    assert bought.status_code == 201, bought.json
    sub_id = bought.json["data"]["subscription"]["id"]
    page = bought.json["data"]["checkout"]["pageId"]
    life.card_server.complete_page(page, APPROVE)
    assert webhook(life.client, life.org, page).json["outcome"] == "processed"
    assert life.subscription(sub_id).status is SubscriptionStatus.active
    assert life.ledger(sub_id) == [("charge", "completed", 25000)]

    # A class far enough ahead for every step below.
    strength = {"name": "Strength", "defaultCapacity": 5, "durationMinutes": 60}
    kind = life.call("POST", "/class-types", life.owner, 201, json=strength)["data"]["id"]
    starts = (NOW + timedelta(days=75)).isoformat()
    when = {"classTypeId": kind, "startsAt": starts}
    klass = life.call("POST", "/sessions", life.owner, 201, json=when)["data"]["id"]

    # Renew: the daily sweep charges the second month once; a second run charges nothing.
    life.at(life.subscription(sub_id).next_charge_date + timedelta(minutes=1))
    assert life.collect()["charged"] == 1
    assert life.collect()["charged"] == 0
    first, renewal = ("charge", "completed", 25000), ("recurring", "completed", 25000)
    assert life.ledger(sub_id) == [first, renewal]

    # Decline: a card that declines, then the renewal fails into debt.
    life.save_card(sub_id, DECLINE)
    life.at(life.subscription(sub_id).next_charge_date + timedelta(minutes=1))
    assert life.collect()["declined"] == 1
    owing = life.subscription(sub_id)
    assert owing.debt_amount_in_cents == 25000
    assert life.ledger(sub_id)[-1][1:] == ("failed", 25000)

    # Within the grace days the member still books; past them, a booking is refused and says
    # what is owed (spec B 3, 4.3: "in debt beyond the grace period").
    early = life.book(klass, 201)["data"]["id"]
    life.call("POST", f"/bookings/{early}/cancel", life.member, 200, json={})
    life.at(life.clock.now() + timedelta(days=3))
    life.lifecycle()
    refused = life.client.post(
        f"/organizations/{life.org.id}/sessions/{klass}/book", json={},
        headers=life.headers(life.member),
    )  # fmt: skip
    assert refused.status_code == 409, refused.json
    assert refused.json["code"] == "booking_blocked_debt"
    assert refused.json["billingDebt"]["amountInCents"] == 25000

    # Pay the debt with a good card: one completed charge, the debt columns cleared.
    life.save_card(sub_id, APPROVE)
    paid = life.call("POST", f"/subscriptions/{sub_id}/pay-debt", life.member, 200)
    assert paid["data"]["outcome"] in {"paid", "charged"}
    cleared = life.subscription(sub_id)
    assert (cleared.debt_amount_in_cents, cleared.debt_since) in {(0, None), (None, None)}
    assert life.ledger(sub_id)[-1][1:] == ("completed", 25000)

    # Book again.
    booked = life.book(klass, 201)
    assert booked["data"]["status"] == "confirmed"

    # Past the grace days the plan was cancelled for non-payment; paid up, the member buys it
    # again (the cancelled one does not hold the plan) and the new month is charged once.
    assert cleared.status is SubscriptionStatus.cancelled
    again = life.call("POST", f"/plans/{plan['id']}/purchase", life.member, 201, json={})
    sub_id = again["data"]["subscription"]["id"]
    page = again["data"]["checkout"]["pageId"]
    life.card_server.complete_page(page, APPROVE)
    assert webhook(life.client, life.org, page).json["outcome"] == "processed"
    assert life.ledger(sub_id) == [first]

    # Notice, withdrawn, given again: one case, the subscription ends at its period's end.
    notice = f"/subscriptions/{sub_id}/notice"
    life.call("POST", notice, life.member, 200, json={"reasonCode": "moving_away"})
    life.call("DELETE", notice, life.member, 200)
    assert life.subscription(sub_id).cancellation_effective_at is None
    life.call("POST", notice, life.member, 200, json={"reasonCode": "moving_away"})
    ending = life.subscription(sub_id)
    assert ending.cancellation_effective_at is not None

    # The period-end settlement when the notice matures; nothing is charged after it.
    life.at(ending.cancellation_effective_at + timedelta(hours=1))
    period_end_sweep(life.factory, life.doors, now=life.clock.now())
    life.lifecycle()
    ended = life.subscription(sub_id)
    assert ended.status in {SubscriptionStatus.cancelled, SubscriptionStatus.expired}
    charges_before = len(life.ledger(sub_id))
    life.at(life.clock.now() + timedelta(days=40))
    life.collect()
    assert len(life.ledger(sub_id)) == charges_before

    # The events tell the same story, in its order (first occurrence of each).
    names = life.events()
    story = [
        "subscription.renewed",
        "payment_method.replaced",
        "subscription.debt_opened",
        "payment.charge_failed",
        "subscription.cancelled",
        "subscription.notice_given",
        "subscription.notice_withdrawn",
        "subscription.cancellation_settled",
    ]
    told = [name for name in names if name in story]
    assert sorted(set(told), key=told.index) == story, told
