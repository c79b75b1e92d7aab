"""Seeded walks through a member's billing life: the member, the owner and the daemons' sweeps
act in an order drawn from a seed (buy, a card that approves or declines, time passing with
the sweeps, pay a debt, give and withdraw notice, book and cancel; the owner gives money back
by a refund or a credit note), on PostgreSQL and on the embedded default. The scripted lives
(test_member_life.py) check one story's every value; these check, after every step of many
stories, what must hold in all of them:

- no answer is a 500, and every refusal is JSON with a code (DESIGN: a 400-class answer);
- no sweep fails: its summary counts no error and nothing is logged at ERROR (a sweep that
  isolates a failing row logs it and goes on, which a scripted test does not see);
- no attempt is left pending (the test provider answers every call at once: a pending attempt
  is one a crash would have left, and nothing here crashes);
- an obligation (a period's renewal, a debt) is settled at most once, unless a follow-up task
  tells staff to refund the second payment (spec B 8: never charge the member twice);
- no payment is given back beyond its amount (refunds and credit notes together, spec B 4.3);
- a subscription's debt columns agree with its status: in debt it owes an amount since a day,
  and only a plan in debt or ended owes one (spec B 3).

A failing seed names the steps it took, so it replays as a scripted test."""

from __future__ import annotations

import logging
import random
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import lifecycle
from gymctl.clock import ensure_utc
from gymctl.models import PaymentTransaction, Subscription, Task
from gymctl.models.billing import SubscriptionStatus, TransactionStatus, TransactionType
from gymctl.retention.settlement import period_end_sweep
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, DECLINE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    webhook,
)
from tests.billing.test_member_life import Life
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches every step: both engines

STEPS = 28
# Hours the clock moves in a "time" step: within a day, a grace period, past a renewal.
WAITS = (1, 20, 26, 24 * 3, 24 * 10, 24 * 31)
GRACE_DAYS = 7  # spec B 2.5: billing_grace_days' default (the walk leaves it)
DEBT_REFUSAL = "booking_blocked_debt"
GIVEN_BACK = {TransactionStatus.refunded, TransactionStatus.refund_pending}
OWING_STATUSES = {SubscriptionStatus.debt, SubscriptionStatus.past_due}


class Walk(Life):
    """Life with a record of its steps, and no step that expects one answer: a step's answer
    depends on what the earlier ones did, so it is checked against the invariants instead."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.steps: list[str] = []
        self.plan = create_plan(self.client, self.org)
        self.subscriptions: list[str] = []
        self.bookings: list[str] = []
        self.klass = self.klass(NOW + timedelta(days=400))  # ahead of every walk's clock

    def answer(self, method: str, path: str, who, **kwargs):
        url, headers = f"/organizations/{self.org.id}{path}", self.headers(who)
        response = self.client.open(url, method=method, headers=headers, **kwargs)
        assert response.status_code < 500, (self.steps, response.json)
        if response.status_code >= 400:
            assert response.is_json, (self.steps, response.data)
            assert response.json.get("code"), (self.steps, response.json)
        code = f" {response.json['code']}" if response.status_code >= 400 else ""
        self.steps[-1] += f" -> {response.status_code}{code}"
        return response

    def latest(self) -> str | None:
        return self.subscriptions[-1] if self.subscriptions else None

    # --- the steps ---------------------------------------------------------------------------

    def buy(self, rng: random.Random) -> None:
        card = rng.choice((APPROVE, APPROVE, DECLINE))
        self.steps.append(f"buy({'approve' if card == APPROVE else 'decline'})")
        bought = self.answer("POST", f"/plans/{self.plan['id']}/purchase", self.member, json={})
        if bought.status_code != 201:
            return
        page = bought.json["data"]["checkout"]["pageId"]
        self.card_server.complete_page(page, card)
        delivered = webhook(self.client, self.org, page)
        assert delivered.status_code < 500, (self.steps, delivered.json)
        self.subscriptions.append(bought.json["data"]["subscription"]["id"])

    def card(self, rng: random.Random) -> None:
        card = rng.choice((APPROVE, DECLINE))
        self.steps.append(f"card({'approve' if card == APPROVE else 'decline'})")
        if (sub := self.latest()) is None:
            return
        path = f"/subscriptions/{sub}/card-replacement"
        opened = self.answer("POST", path, self.member, json={})
        if opened.status_code == 201:
            self.card_server.complete_page(opened.json["data"]["checkout"]["pageId"], card)
            page = opened.json["data"]["checkout"]["pageId"]
            delivered = webhook(self.client, self.org, page)
            assert delivered.status_code < 500, (self.steps, delivered.json)

    def wait(self, rng: random.Random) -> None:
        hours = rng.choice(WAITS)
        self.steps.append(f"wait({hours}h)")
        self.at(self.clock.now() + timedelta(hours=hours))
        swept = self.collect()
        assert swept["errors"] == 0, (self.steps, swept)
        with self.factory() as session:
            lifecycle.run_lifecycle(session, now=self.clock.now())
            session.commit()
        settled = period_end_sweep(self.factory, self.doors, now=self.clock.now())
        assert not settled.errors, (self.steps, settled)
        self.mail()

    def pay(self, rng: random.Random) -> None:
        self.steps.append("pay-debt")
        if (sub := self.latest()) is not None:
            self.answer("POST", f"/subscriptions/{sub}/pay-debt", self.member)

    def notice(self, rng: random.Random) -> None:
        give = rng.random() < 0.6
        self.steps.append("notice" if give else "withdraw-notice")
        if (sub := self.latest()) is None:
            return
        path = f"/subscriptions/{sub}/notice"
        if give:
            self.answer("POST", path, self.member, json={"reasonCode": "moving_away"})
        else:
            self.answer("DELETE", path, self.member)

    def booking(self, rng: random.Random) -> None:
        if self.bookings and rng.random() < 0.5:
            self.steps.append("cancel-booking")
            booking = self.bookings.pop()
            self.answer("POST", f"/bookings/{booking}/cancel", self.member, json={})
            return
        self.steps.append("book")
        owing = self.owing()
        booked = self.answer("POST", f"/sessions/{self.klass}/book", self.member, json={})
        if booked.status_code == 201:
            self.bookings.append(booked.json["data"]["id"])
        refused_for_debt = booked.status_code == 409 and booked.json["code"] == DEBT_REFUSAL
        # Spec B 3, 4.3: refused when the member is "in debt beyond the grace period"; a
        # member who owes nothing is never refused for a debt. (A day either side of the
        # grace's last day is left out: it ends at the gym's midnight.)
        if not owing:
            assert not refused_for_debt, (self.steps, "refused for a debt owing nothing")
        elif min(owing) < self.clock.now() - timedelta(days=GRACE_DAYS + 1):
            assert refused_for_debt or booked.json.get("code") == "already_booked", (
                self.steps,
                "in debt past the grace days and not refused",
            )

    def owing(self) -> list:
        """When each of the member's debts began."""
        self.session.expire_all()
        rows = [self.session.get(Subscription, uuid.UUID(s)) for s in self.subscriptions]
        return [ensure_utc(r.debt_since) for r in rows if r.debt_amount_in_cents and r.debt_since]

    def give_back(self, rng: random.Random) -> None:
        """The owner gives money back on one of the member's payments: a card refund or a
        credit note, of an amount that may exceed what is left (which must be refused)."""
        how = rng.choice(("refund", "credit-note"))
        self.session.expire_all()
        paid = self.session.scalars(
            select(PaymentTransaction.id, PaymentTransaction.amount_in_cents).where(
                PaymentTransaction.organization_id == self.org.id,
                PaymentTransaction.status == TransactionStatus.completed,
                PaymentTransaction.type != TransactionType.refund,
            )
        ).all()
        amount = rng.choice((1000, 12500, 25000, 26000))
        self.steps.append(f"{how}({amount})")
        if not paid:
            return
        sale = rng.choice(sorted(paid))
        path = f"/payments/transactions/{sale}"
        if how == "refund":
            body = {"amountInCents": amount, "reason": "walk"}
            self.answer("POST", f"{path}/refund", self.owner, json=body)
        else:
            body = {"idempotencyKey": str(uuid.uuid4()), "amountInCents": amount}
            self.answer(
                "POST", f"{path}/credit-notes", self.owner, json=body | {"cashReturned": True}
            )

    # --- what holds after every step -----------------------------------------------------------

    def check(self) -> None:
        self.session.expire_all()
        rows = self.session.scalars(
            select(PaymentTransaction).where(PaymentTransaction.organization_id == self.org.id)
        ).all()
        pending = [t.id for t in rows if t.status == TransactionStatus.pending]
        given_back = Counter()
        for t in rows:
            if t.type == TransactionType.refund and t.status in GIVEN_BACK:
                given_back[(t.metadata_ or {}).get("refundedTransactionId")] += t.amount_in_cents
        for t in rows:
            assert given_back[str(t.id)] <= t.amount_in_cents, (
                self.steps,
                f"{given_back[str(t.id)]} given back on a payment of {t.amount_in_cents}",
            )
        assert not pending, (self.steps, "attempts left pending", pending)
        settled = Counter(
            t.obligation_key
            for t in rows
            if t.obligation_key and t.status == TransactionStatus.completed
        )
        refunds_filed = {
            task.data.get("subscriptionId")
            for task in self.session.scalars(
                select(Task).where(
                    Task.organization_id == self.org.id, Task.kind == "payment_follow_up"
                )
            )
        }
        for obligation, times in settled.items():
            if times > 1:
                assert obligation.split(":")[0] in refunds_filed, (
                    self.steps,
                    f"{obligation} settled {times} times and no follow-up says refund one",
                )
        for sub_id in self.subscriptions:
            sub = self.session.get(Subscription, uuid.UUID(sub_id))
            owes = bool(sub.debt_amount_in_cents)
            if sub.status == SubscriptionStatus.debt:
                assert owes, (self.steps, sub_id, "in debt owing nothing")
                assert sub.debt_since is not None, (self.steps, sub_id, "in debt since no day")
            if owes:
                assert sub.status in OWING_STATUSES | set(lifecycle.ENDED), (
                    self.steps,
                    sub_id,
                    f"{sub.status.value} owes {sub.debt_amount_in_cents}",
                )


@pytest.fixture
def walk(client, org, card_server, session, session_factory, clock, idp, mailbox):  # noqa: F811
    return Walk(client, org, card_server, session, session_factory, clock, idp, mailbox)


@pytest.mark.parametrize("seed", range(6))
def test_a_seeded_members_walk_keeps_the_money_rules(walk, seed, caplog):
    rng = random.Random(seed)
    moves = (
        (walk.buy, 3),
        (walk.card, 2),
        (walk.wait, 6),
        (walk.pay, 2),
        (walk.notice, 2),
        (walk.booking, 2),
        (walk.give_back, 2),
    )
    steps = [step for step, weight in moves for _ in range(weight)]
    walk.steps.append("start")
    walk.buy(rng)
    with caplog.at_level(logging.ERROR):
        for _ in range(STEPS):
            rng.choice(steps)(rng)
            walk.check()
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert not errors, (walk.steps, errors)
