"""plan_already_held (spec B 4.3: "Plan purchase refuses active and scheduled holders of a
recurring plan with 409 plan_already_held") holds in the database: under concurrent purchases
and when a late completion would revive an abandoned checkout."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import checkout
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Plan, Role, Subscription, Task
from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, DECLINE, buy_card_plan, connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

LIVE = (SubscriptionStatus.active, SubscriptionStatus.scheduled)


def test_six_concurrent_purchases_of_one_recurring_plan_leave_one_live_subscription(
    committed_pg, card_server
):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        plan = bf.make_plan(session, gym.organization, interval_months=1)
        session.commit()
    start = threading.Barrier(6)
    answers: list[str] = []

    def buy() -> None:
        with factory() as session:
            start.wait()
            try:
                buy_card_plan(session, card_server.provider(), gym, plan)
                session.commit()
                answers.append("bought")
            except DomainError as error:
                session.rollback()
                answers.append(error.code)

    threads = [threading.Thread(target=buy) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answers) == ["bought"] + ["plan_already_held"] * 5
    with factory() as session:
        live = session.scalar(
            select(func.count())
            .select_from(Subscription)
            .where(Subscription.plan_id == plan.id, Subscription.status.in_(LIVE))
        )
        assert live == 1


@pytest.mark.embedded
def test_the_database_refuses_a_second_live_holder_even_past_the_check(session):
    """The check can be passed by two writers at once; the partial unique index cannot."""
    from sqlalchemy.exc import IntegrityError

    place = bf.make_gym(session)
    plan = bf.make_plan(session, place.organization, interval_months=1)
    bf.make_subscription(session, place, plan=plan, status=SubscriptionStatus.active)
    with pytest.raises(IntegrityError), session.begin_nested():
        bf.make_subscription(session, place, plan=plan, status=SubscriptionStatus.scheduled)
    pack = bf.make_plan(session, place.organization, interval_months=None)
    bf.make_subscription(session, place, plan=pack, status=SubscriptionStatus.active)
    bf.make_subscription(
        session, place, plan=pack, status=SubscriptionStatus.active
    )  # not recurring


def test_a_late_completion_after_a_repurchase_does_not_revive_a_second_holder(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
    caplog,
):
    plan = create_plan(client, org)
    first = purchase(client, org, plan).json["data"]
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    checkout.abandoned_sweep(session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER)
    second = purchase(client, org, plan)
    assert second.status_code == 201, second.json
    card_server.complete_page(first["checkout"]["pageId"], APPROVE)  # the member paid after all

    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        assert webhook(client, org, first["checkout"]["pageId"]).status_code == 200

    session.expire_all()
    statuses = session.scalars(
        select(Subscription.status).where(Subscription.plan_id == plan["id"])
    ).all()
    assert sorted(statuses) == [SubscriptionStatus.cancelled, SubscriptionStatus.scheduled]
    [taken] = session.scalars(select(PaymentTransaction)).all()  # the money is on the ledger
    assert str(taken.subscription_id) == first["subscription"]["id"]
    assert taken.metadata_["notRevived"] == "late_completion_of_a_plan_already_held"
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert (task.subject_id, task.data["reason"]) == (
        str(taken.id),
        "late_completion_of_a_plan_already_held",
    )
    alerts = [r.args["reason"] for r in caplog.records if r.name == "gymctl.billing.alerts"]
    assert "billing_contradiction" in alerts


def test_an_abandoned_checkout_gives_its_max_purchases_slot_back(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
    caplog,
):
    """max_purchases caps sales, not pages opened; a late completion after the slot was sold
    again is not sold twice (the money is recorded, the contradiction alerted)."""
    plan = create_plan(client, org, maxPurchases=1)
    first = purchase(client, org, plan).json["data"]
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    checkout.abandoned_sweep(session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER)
    session.expire_all()
    assert session.get(Plan, plan["id"]).purchases_count == 0

    second = purchase(client, org, plan, role=Role.coach)
    assert second.status_code == 201, second.json
    card_server.complete_page(first["checkout"]["pageId"], APPROVE)
    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        assert webhook(client, org, first["checkout"]["pageId"]).status_code == 200
    session.expire_all()
    assert session.get(Plan, plan["id"]).purchases_count == 1
    revived = session.get(Subscription, first["subscription"]["id"])
    assert revived.status == SubscriptionStatus.cancelled
    [taken] = session.scalars(select(PaymentTransaction)).all()
    assert taken.metadata_["notRevived"] == "late_completion_of_a_sold_out_plan"
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert (task.subject_id, task.data["reason"]) == (
        str(taken.id),
        "late_completion_of_a_sold_out_plan",
    )
    alerts = [r.args["reason"] for r in caplog.records if r.name == "gymctl.billing.alerts"]
    assert "billing_contradiction" in alerts


def test_a_failed_checkout_gives_its_max_purchases_slot_back(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    plan = create_plan(client, org, maxPurchases=1)
    page_id = purchase(client, org, plan).json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, DECLINE)
    assert webhook(client, org, page_id).json["outcome"] == "payment.failed"
    assert webhook(client, org, page_id).status_code == 200  # a redelivery gives nothing back
    session.expire_all()
    assert session.get(Plan, plan["id"]).purchases_count == 0
    assert purchase(client, org, plan, role=Role.coach).status_code == 201
