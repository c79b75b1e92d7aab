"""A late page completion reviving an abandoned checkout while the member's new purchase of
the same plan commits. s55 noted, and left alone, that the revival reads "not held" outside the
plan's hold-once savepoint, so a purchase committing in between would make the webhook answer
500. It cannot: the revival locks the member's row FOR UPDATE first (attempts.lock_subscription,
billing's order), and the purchase's insert holds a key-share lock on that row until it commits,
so the revival waits for it and reads the plan as held: its money recorded on the page's own
subscription (notRevived), the staff alerted, in the same delivery. (A purchase that comes
second waits for the revival and is refused plan_already_held by the unique index.)"""

from __future__ import annotations

import threading
from datetime import date, timedelta

from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.billing.checkout import ABANDONED, CHARGE_AND_SAVE_CARD
from gymctl.db import get_engine, session_factory
from gymctl.models import Checkout, PaymentTransaction, Plan, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus
from gymctl.providers.card import CardToken, PageResult, PageState
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_revival_racing_a_new_purchase_is_a_plan_already_held_not_an_error(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=60))
        plan = bf.make_plan(session, gym.organization, max_purchases=10)
        abandoned = bf.make_subscription(
            session, gym, plan=plan, status=SubscriptionStatus.cancelled,
            cancellation_reason=ABANDONED, cancelled_at=NOW, ended_at=NOW,
        )  # fmt: skip
        page = bf.make_checkout(
            session, abandoned, operation=CHARGE_AND_SAVE_CARD, amount_in_cents=9900,
            status=CheckoutStatus.abandoned, page_id="page-late",
        )  # fmt: skip
        session.commit()
        ids = (gym, plan.id, abandoned.id, page.id)
    gym, plan_id, abandoned_id, checkout_id = ids
    paid = PageResult(
        PageState.succeeded, "page-late", response_code=0, operation=CHARGE_AND_SAVE_CARD,
        transaction_id="deal-1", amount_in_cents=9900, currency="ILS",
        token=CardToken("tok_late", date(2030, 12, 31), last4="0000"),
    )  # fmt: skip
    answers: list[str] = []

    with factory() as purchase:  # the new purchase: written, not committed yet
        bf.make_subscription(
            purchase, gym, plan=purchase.get(Plan, plan_id), status=SubscriptionStatus.active
        )
        purchase.flush()

        def late_webhook() -> None:
            at = NOW + timedelta(hours=2)
            with factory() as session:
                try:
                    answered = checkout.apply_page(
                        session, checkout_id, paid, now=at, cipher=TEST_CIPHER
                    )
                    session.commit()
                    answers.append(answered)
                except Exception as error:  # what the webhook would have answered 500 for
                    answers.append(repr(error))

        thread = threading.Thread(target=late_webhook)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        purchase.commit()
    thread.join(timeout=30)

    assert answers == ["completed"]
    with factory() as session:
        live = session.scalars(
            select(Subscription.id).where(
                Subscription.plan_id == plan_id,
                Subscription.status.in_((SubscriptionStatus.active, SubscriptionStatus.scheduled)),
            )
        ).all()
        assert len(live) == 1
        assert abandoned_id not in live
        assert session.get(Subscription, abandoned_id).status == SubscriptionStatus.cancelled
        (taken,) = session.scalars(select(PaymentTransaction)).all()
        assert taken.subscription_id == abandoned_id
        assert taken.metadata_["notRevived"] == "late_completion_of_a_plan_already_held"
        assert session.get(Checkout, checkout_id).status == CheckoutStatus.completed
        assert session.get(Plan, plan_id).purchases_count == 0  # the revival's slot not kept
