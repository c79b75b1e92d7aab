"""A member's whole life through the API and the sweeps, on a fixed clock, on PostgreSQL and on
the embedded default: join and buy, renew, decline into debt, a booking refused with billingDebt,
the debt paid, booking again, notice given, withdrawn and given again, the period-end settlement;
and a member who joins before the opening: a presale bought, swapped in its group, withdrawn,
bought again and charged on the opening day, then a desk charge, its refund and a credit note;
and a presale declined on the opening day, mailed once, paid from the app with a new card.
Each area writes what the next one reads, so after every step the ledger, the subscription, the
booking eligibility, the events and the emails (the mailbox the app and the sweeps write to)
must agree (spec B 2, 3, 4.3, 6, 7, 8). A crash and a concurrent duplicate at each money step:
tests/billing/test_member_life_money.py."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import collector, lifecycle
from gymctl.models import (
    BillingSettings,
    OutboxEvent,
    PaymentTransaction,
    Plan,
    Role,
    Subscription,
)
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.card_http import CHARGE, REFUND
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailboxMailer, read_mailbox
from gymctl.retention.billing_emails import send_billing_emails
from gymctl.retention.presales import presale_cases_pass
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

MEMBER, OWNER = "member@iron.example", "owner@iron.example"
JERUSALEM = ZoneInfo("Asia/Jerusalem")

pytestmark = pytest.mark.embedded  # the demo gym reaches every step: both engines


class Life:
    """The member, the owner and the sweeps, on one clock."""

    def __init__(self, client, gym_, card_server, session, session_factory, clock, idp, box):
        self.client, self.org, self.card_server, self.idp = client, gym_, card_server, idp
        self.session, self.factory, self.clock = session, session_factory, clock
        self.member, self.owner = gym_[Role.member], gym_[Role.owner]
        self.box, self.read = box, Counter()
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

    def ledger(self, subscription_id=None) -> list[tuple[str, str, int]]:
        """The subscription's payment rows, or (without one) every row of the member's."""
        self.session.expire_all()
        which = (
            PaymentTransaction.user_id == self.member.user.id
            if subscription_id is None
            else PaymentTransaction.subscription_id == uuid.UUID(str(subscription_id))
        )
        rows = self.session.scalars(
            select(PaymentTransaction)
            .where(which)
            .order_by(PaymentTransaction.created_at, PaymentTransaction.id)
        )
        return [(t.type.value, t.status.value, t.amount_in_cents) for t in rows]

    def events(self) -> list[str]:
        self.session.expire_all()
        return [e.name for e in self.session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))]

    def told(self, story: list[str]) -> list[str]:
        """The events of `story`'s names, in the order they were written."""
        return [name for name in self.events() if name in story]

    def klass(self, starts) -> str:
        """The owner schedules a Strength class at `starts`; its session id."""
        strength = {"name": "Strength", "defaultCapacity": 5, "durationMinutes": 60}
        kind = self.call("POST", "/class-types", self.owner, 201, json=strength)["data"]["id"]
        when = {"classTypeId": kind, "startsAt": starts.isoformat()}
        return self.call("POST", "/sessions", self.owner, 201, json=when)["data"]["id"]

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

    def mail(self) -> None:
        """The mailing sweeps as the daemon runs them: the member's billing emails
        (billing_member_emails) and the presale cases' emails to staff (retention_presale_cases)."""
        send_billing_emails(self.factory, self.doors.mailer, now=self.clock.now())
        presale_cases_pass(self.factory, self.doors.mailer, now=self.clock.now())

    def new_mail(self) -> list[tuple[str, str, str]]:
        """After the email sweep: (to, subject, body) of every email delivered since the last
        look (a multiset difference: the same email twice shows twice)."""
        self.mail()
        every = Counter((m["To"], m["Subject"], m.get_content()) for m in read_mailbox(self.box))
        fresh, self.read = every - self.read, every
        return sorted(fresh.elements())

    def buy(self, plan, card: str = APPROVE) -> str:
        """The member buys `plan` through its hosted page with `card`; the subscription's id."""
        bought = self.call("POST", f"/plans/{plan['id']}/purchase", self.member, 201, json={})
        page = bought["data"]["checkout"]["pageId"]
        self.card_server.complete_page(page, card)
        assert webhook(self.client, self.org, page).json["outcome"] == "processed"
        return bought["data"]["subscription"]["id"]

    def transaction_ids(self, subscription_id) -> list[str]:
        self.session.expire_all()
        rows = self.session.scalars(
            select(PaymentTransaction.id)
            .where(PaymentTransaction.subscription_id == uuid.UUID(str(subscription_id)))
            .order_by(PaymentTransaction.created_at, PaymentTransaction.id)
        )
        return [str(row) for row in rows]

    def taken(self) -> dict[str, int]:
        """Places taken per plan (max_purchases), by plan name."""
        self.session.expire_all()
        plans = self.session.scalars(select(Plan).where(Plan.organization_id == self.org.id))
        return {plan.name: plan.purchases_count for plan in plans}

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
    assert life.new_mail() == []  # a purchase is not a billing notice

    # A class far enough ahead for every step below.
    klass = life.klass(NOW + timedelta(days=75))

    # Renew: the daily sweep charges the second month once; a second run charges nothing.
    life.at(life.subscription(sub_id).next_charge_date + timedelta(minutes=1))
    assert life.collect()["charged"] == 1
    assert life.collect()["charged"] == 0
    first, renewal = ("charge", "completed", 25000), ("recurring", "completed", 25000)
    assert life.ledger(sub_id) == [first, renewal]
    assert life.new_mail() == []

    # Decline: a card that declines, then the renewal fails into debt.
    life.save_card(sub_id, DECLINE)
    life.at(life.subscription(sub_id).next_charge_date + timedelta(minutes=1))
    assert life.collect()["declined"] == 1
    owing = life.subscription(sub_id)
    assert owing.debt_amount_in_cents == 25000
    assert life.ledger(sub_id)[-1][1:] == ("failed", 25000)
    # The member hears of it once, for what the debt columns hold, with the last day to pay
    # in the gym's calendar: day 0 is the decline's local day, day 2 the last one.
    [(to, subject, body)] = life.new_mail()
    assert (to, subject) == (MEMBER, "A payment to Iron Temple is outstanding")
    assert "We could not charge your card for Monthly" in body
    pay_by = owing.debt_since.astimezone(JERUSALEM).date() + timedelta(days=2)
    assert f"You owe 250.00 ILS. Please pay it by {pay_by.isoformat()}" in body

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
    # The refusal and the debt email name the same last day: payBy is the midnight ending it.
    ends = datetime.fromisoformat(refused.json["billingDebt"]["payBy"]).astimezone(JERUSALEM)
    assert (ends.time(), (ends - timedelta(days=1)).date()) == (time(0), pay_by)
    [(to, subject, body)] = life.new_mail()
    assert (to, subject) == (MEMBER, "Your membership at Iron Temple was cancelled for non-payment")
    assert "because 250.00 ILS remained unpaid" in body
    cancelled_on = life.subscription(sub_id).cancelled_at.astimezone(JERUSALEM).date().isoformat()
    assert f"was cancelled on {cancelled_on} because" in body

    # Pay the debt with a good card: one completed charge, the debt columns cleared.
    life.save_card(sub_id, APPROVE)
    paid = life.call("POST", f"/subscriptions/{sub_id}/pay-debt", life.member, 200)
    assert paid["data"]["outcome"] in {"paid", "charged"}
    cleared = life.subscription(sub_id)
    assert (cleared.debt_amount_in_cents, cleared.debt_since) in {(0, None), (None, None)}
    assert life.ledger(sub_id)[-1][1:] == ("completed", 25000)
    assert life.new_mail() == []  # paying is not a notice; the debt email is not repeated

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
    assert life.new_mail() == []

    # Notice, withdrawn, given again: one case, the subscription ends at its period's end.
    notice = f"/subscriptions/{sub_id}/notice"
    life.call("POST", notice, life.member, 200, json={"reasonCode": "moving_away"})
    life.call("DELETE", notice, life.member, 200)
    assert life.subscription(sub_id).cancellation_effective_at is None
    life.call("POST", notice, life.member, 200, json={"reasonCode": "moving_away"})
    ending = life.subscription(sub_id)
    assert ending.cancellation_effective_at is not None
    assert life.new_mail() == []  # the notice itself is answered on screen, not by email

    # The period-end settlement when the notice matures; nothing is charged after it.
    life.at(ending.cancellation_effective_at + timedelta(hours=1))
    period_end_sweep(life.factory, life.doors, now=life.clock.now())
    life.lifecycle()
    ended = life.subscription(sub_id)
    assert ended.status in {SubscriptionStatus.cancelled, SubscriptionStatus.expired}
    [(to, subject, body)] = life.new_mail()
    assert (to, subject) == (MEMBER, "Your membership at Iron Temple has ended")
    assert "as you gave notice" in body
    assert "Nothing is owed for the unused part of your paid period" in body
    assert life.ledger(sub_id) == [first]  # notice at the period's end: no refund row
    charges_before = len(life.ledger(sub_id))
    life.at(life.clock.now() + timedelta(days=40))
    life.collect()
    assert len(life.ledger(sub_id)) == charges_before
    assert life.new_mail() == []

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


def test_a_presale_members_life_then_the_desk_a_refund_and_a_credit_note(life):
    """Joining before the gym opens: a presale bought, swapped in its group, withdrawn, bought
    again and charged on the opening day; then a desk charge, its refund and a credit note."""
    opening = NOW + timedelta(days=10)
    life.session.add(BillingSettings(organization_id=life.org.id, opening_day=opening))
    life.session.commit()
    group = {"planGroup": "founders", "maxPurchases": 2}
    founders = create_plan(life.client, life.org, name="Founders", **group)
    plus = create_plan(life.client, life.org, name="Founders plus", priceInCents=30000, **group)

    # Bought a day after the gym connected its terminal (a card saved in the first 45 minutes
    # is never charged for a presale, spec B 8): a token-only page; scheduled, nothing charged,
    # nothing mailed.
    life.at(NOW + timedelta(days=1))
    sub_id = life.buy(founders)
    presale = life.subscription(sub_id)
    assert (presale.status, presale.next_charge_date) == (SubscriptionStatus.scheduled, opening)
    assert life.ledger() == []
    assert life.taken() == {"Founders": 1, "Founders plus": 0}
    mine = f"/subscriptions/{sub_id}"
    targets = life.call("GET", f"{mine}/plan-change-targets", life.member, 200)["data"]
    assert [plan["name"] for plan in targets] == ["Founders plus"]
    assert life.new_mail() == []

    # Swapped in its group: the price follows the plan, the place moves with it.
    life.call("POST", f"{mine}/change-plan", life.member, 200, json={"planId": plus["id"]})
    swapped = life.subscription(sub_id)
    assert (swapped.price_in_cents, str(swapped.plan_id)) == (30000, plus["id"])
    assert life.taken() == {"Founders": 0, "Founders plus": 1}
    assert life.ledger() == []
    assert life.new_mail() == []

    # Withdrawn: the owner hears of it (the member withdrew it themselves), the place is given
    # back, and the opening day charges nothing.
    life.call("POST", f"{mine}/withdraw-presale", life.member, 200, json={})
    assert life.subscription(sub_id).status is SubscriptionStatus.cancelled
    assert life.taken() == {"Founders": 0, "Founders plus": 0}
    [(to, subject, body)] = life.new_mail()
    assert (to, subject) == (OWNER, "Presale withdrawn: member (Founders plus)")
    assert "(by the member)" in body

    # Bought again before the opening; the opening day charges it once, and it opens.
    sub_id = life.buy(plus)
    assert life.subscription(sub_id).status is SubscriptionStatus.scheduled
    life.at(opening + timedelta(minutes=1))
    assert life.collect()["charged"] == 1
    assert life.collect()["charged"] == 0
    opened = life.subscription(sub_id)
    assert opened.status is SubscriptionStatus.active
    opening_charge = ("recurring", "completed", 30000)
    assert life.ledger(sub_id) == [opening_charge]
    assert life.new_mail() == []  # a charge that went through is not a notice

    # A class after the opening: the member books.
    klass = life.klass(opening + timedelta(days=3))
    assert life.book(klass, 201)["data"]["status"] == "confirmed"

    # A desk charge on the saved card: charged once, a replay of its key charges nothing.
    life.at(life.clock.now() + timedelta(hours=1))
    towel = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": str(life.member.user.id),
        "amountInCents": 5000,
        "currency": "ILS",
        "description": "towel",
    }
    sale = life.call("POST", "/payments/desk-charges", life.owner, 201, json=towel)["data"]
    replay = life.call("POST", "/payments/desk-charges", life.owner, 200, json=towel)["data"]
    assert (sale["outcome"], replay["replayed"]) == ("charged", True)
    assert replay["transaction"]["id"] == sale["transaction"]["id"]
    desk = ("charge", "completed", 5000)
    assert life.ledger() == [opening_charge, desk]
    assert life.card_server.requests(CHARGE) == 2  # the opening day's and the desk's
    assert life.new_mail() == []
    sale_id = sale["transaction"]["id"]

    # Its refund, in part: the provider refunds once, the sale stays completed.
    life.at(life.clock.now() + timedelta(hours=1))
    refund = {"amountInCents": 2000, "reason": "one towel too many"}
    path = f"/payments/transactions/{sale_id}/refund"
    refunded = life.call("POST", path, life.owner, 201, json=refund)["data"]
    assert (refunded["status"], refunded["refundedTransactionId"]) == ("refunded", sale_id)
    assert [r.amount_in_cents for r in life.card_server.simulator.refunds()] == [2000]
    assert life.ledger() == [opening_charge, desk, ("refund", "refunded", 2000)]
    assert life.new_mail() == []

    # A credit note on the opening-day charge, cash handed back at the desk: no provider call.
    life.at(life.clock.now() + timedelta(hours=1))
    charge_id = life.transaction_ids(sub_id)[0]
    note = {"idempotencyKey": str(uuid.uuid4()), "amountInCents": 1000, "cashReturned": True}
    path = f"/payments/transactions/{charge_id}/credit-notes"
    filed = life.call("POST", path, life.owner, 201, json=note)["data"]
    again = life.call("POST", path, life.owner, 200, json=note)["data"]
    assert (filed["replayed"], again["replayed"]) == (False, True)
    assert again["creditNote"]["id"] == filed["creditNote"]["id"]
    assert (filed["remainingInCents"], filed["creditNote"]["cashReturned"]) == (29000, True)
    credit = ("refund", "refunded", 1000)
    assert life.ledger() == [opening_charge, desk, ("refund", "refunded", 2000), credit]
    assert life.card_server.requests(REFUND) == 1  # the credit note moved no card money
    assert life.new_mail() == []

    # Money given back is not a debt: the plan stays active and the member still books.
    assert life.subscription(sub_id).status is SubscriptionStatus.active
    booked_again = life.book(klass, 409)  # refused for being booked, not for a debt
    assert booked_again["code"] == "already_booked", booked_again
    story = [
        "subscription.plan_changed",
        "subscription.presale_withdrawn",
        "subscription.renewed",
        "booking.created",
        "payment.desk_charge",
        "payment.refunded",
        "payment.credit_note_filed",
    ]
    told = life.told(story)
    assert told == story, told


def test_a_presale_declined_on_the_opening_day_is_mailed_once_and_paid_from_the_app(life):
    """The opening day's charge declines: the member is told once (the presale email covers the
    debt notice), the owner gets the case, and the unpaid presale books nothing; a new card and
    pay-debt open the membership, which then books."""
    opening = NOW + timedelta(days=10)
    life.session.add(BillingSettings(organization_id=life.org.id, opening_day=opening))
    life.session.commit()
    plan = create_plan(life.client, life.org, name="Founders")
    life.at(NOW + timedelta(days=1))
    sub_id = life.buy(plan, DECLINE)  # the page only saves the card: it declines later
    assert life.subscription(sub_id).status is SubscriptionStatus.scheduled

    life.at(opening + timedelta(minutes=1))
    assert life.collect()["declined"] == 1
    owing = life.subscription(sub_id)
    assert (owing.status, owing.debt_amount_in_cents) == (SubscriptionStatus.debt, 25000)
    assert life.ledger(sub_id) == [("recurring", "failed", 25000)]
    # Day 0 is the opening day (Dec 1, UTC), day 7 the last one to pay.
    sent = life.new_mail()
    assert [(to, subject) for to, subject, _ in sent] == [
        (MEMBER, "Your opening-day payment to Iron Temple did not go through"),
        (OWNER, "Opening-day charge failed: member (Founders)"),
    ]
    assert "charge your card 250.00 ILS for Founders" in sent[0][2]
    assert "by 2026-12-08" in sent[0][2]
    assert life.new_mail() == []  # once: the debt notice is the presale email
    klass = life.klass(opening + timedelta(days=20))
    # Inside the grace days a debt does not block booking (spec B 3, 4.3), but this plan was
    # never paid: a presale "holds no period, quota or credits before it is paid" (spec B 2.1),
    # so the member, whose only live plan it is, is refused plan_not_started (spec B 7).
    assert life.book(klass, 409)["code"] == "plan_not_started"

    # The next day, a new card and the debt paid from the app: charged once, the membership
    # opens, no email.
    life.at(life.clock.now() + timedelta(days=1))
    life.save_card(sub_id, APPROVE)
    paid = life.call("POST", f"/subscriptions/{sub_id}/pay-debt", life.member, 200)
    assert paid["data"]["outcome"] == "charged"
    opened = life.subscription(sub_id)
    assert (opened.status, opened.debt_amount_in_cents) == (SubscriptionStatus.active, 0)
    assert life.ledger(sub_id) == [
        ("recurring", "failed", 25000),
        ("recurring", "completed", 25000),
    ]
    assert life.new_mail() == []
    assert life.book(klass, 201)["data"]["status"] == "confirmed"
    story = [
        "subscription.debt_opened",
        "payment.charge_failed",
        "payment_method.replaced",
        "subscription.renewed",
    ]
    told = life.told(story)
    assert told == story, told


def test_a_free_presale_opens_on_its_opening_day_books_and_rolls_on_uncharged(life):
    """A presale is opened by its opening day's charge (spec B 8); a free one has none, so the
    lifecycle pass opens it on its opening day, with the period and activation a paid opening
    is granted. Before, it was left scheduled forever: the member could never book."""
    opening = NOW + timedelta(days=10)
    life.session.add(BillingSettings(organization_id=life.org.id, opening_day=opening))
    life.session.commit()
    free = create_plan(life.client, life.org, name="Founders free", priceInCents=0)

    life.at(NOW + timedelta(days=1))
    sub_id = life.buy(free)  # a token-only page: the card is saved, nothing charged
    assert life.subscription(sub_id).status is SubscriptionStatus.scheduled
    klass = life.klass(opening + timedelta(hours=2))

    # Before the opening day: nothing opens, and the member is told when they can book.
    life.at(opening - timedelta(seconds=1))
    assert life.lifecycle()["opened"] == 0
    refused = life.book(klass, 409)
    assert (refused["code"], refused["startsAt"]) == ("plan_not_started", opening.isoformat())

    # On it: opened once, its first period from the opening day; the member books.
    life.at(opening)
    assert life.lifecycle()["opened"] == 1
    assert life.lifecycle()["opened"] == 0
    opened = life.subscription(sub_id)
    assert opened.status is SubscriptionStatus.active
    assert (opened.current_period_start, opened.current_period_end) == (
        opening,
        opening + relativedelta(months=1),
    )
    assert life.book(klass, 201)["data"]["status"] == "confirmed"

    # A month on: the collector charges nothing, the pass rolls the period on.
    life.at(opening + relativedelta(months=1))
    assert life.collect()["charged"] == 0
    assert life.lifecycle()["rolled"] == 1
    rolled = life.subscription(sub_id)
    assert rolled.status is SubscriptionStatus.active
    assert rolled.current_period_end == opening + relativedelta(months=2)
    assert life.ledger() == []
    assert life.card_server.requests(CHARGE) == 0
    story = ["membership.activated", "booking.created", "subscription.renewed"]
    assert life.told(story) == story
