"""The gym's opening day as a billing setting (spec B 2.5; design: a presale's first charge
waits for its opening day): the owner sets it over PATCH /billing/settings (or the command
line), a card-plan purchase before it is then a presale, and moving it moves the presales
sold for the old day. Before this door only tests wrote the day: no gym could sell a presale.
Every refusal answers its code and changes nothing."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import checkout, opening_day, org_settings
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import Checkout, PaymentTransaction, Role, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention.presales import withdraw_presale
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixtures)
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, Sandbox
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (the card provider's app)
    app,
    count,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.billing_ops.helpers import audit_rows
from tests.conftest import NOW, wait_for_a_lock_wait

pytestmark = pytest.mark.embedded  # the demo gym sells presales: both engines

D = timedelta(days=1)


def _z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _settings(gym) -> str:  # noqa: F811
    return f"/organizations/{gym.id}/billing/settings"


def _patch(client, gym, body):  # noqa: F811
    return client.patch(_settings(gym), json=body, headers=gym[Role.owner].headers)


def test_the_owner_sets_and_clears_the_opening_day_and_finance_reads_it(
    client,
    session,
    gym,  # noqa: F811
):
    shown = client.get(_settings(gym), headers=gym[Role.admin].headers)
    assert shown.json["data"]["openingDay"] is None

    # A date is the gym's local midnight, in the zone the same change leaves it with
    # (Jerusalem is UTC+2 in December).
    by_date = _patch(client, gym, {"openingDay": "2026-12-01", "timezone": "Asia/Jerusalem"})

    assert by_date.status_code == 200, by_date.json
    assert by_date.json["data"]["openingDay"] == "2026-11-30T22:00:00+00:00"
    assert "presales" not in by_date.json["data"]  # no day before: nothing sold for one
    read = client.get(_settings(gym), headers=gym[Role.admin].headers).json["data"]
    assert read == by_date.json["data"]
    [audit] = audit_rows(session, "billing.settings_changed")
    assert (audit.data["before"]["openingDay"], audit.data["after"]["openingDay"]) == (
        None,
        "2026-11-30T22:00:00+00:00",
    )
    # An instant with its offset, kept as UTC; another setting alone keeps the day.
    by_instant = _patch(client, gym, {"openingDay": "2026-12-10T09:30:00+02:00"})
    assert by_instant.json["data"]["openingDay"] == "2026-12-10T07:30:00+00:00"
    kept = _patch(client, gym, {"billingGraceDays": 3})
    assert kept.json["data"]["openingDay"] == "2026-12-10T07:30:00+00:00"

    cleared = _patch(client, gym, {"openingDay": None})

    assert cleared.status_code == 200, cleared.json
    assert cleared.json["data"]["openingDay"] is None
    read = client.get(_settings(gym), headers=gym[Role.admin].headers).json["data"]
    assert read["openingDay"] is None
    assert len(audit_rows(session, "billing.settings_changed")) == 4


def test_a_date_is_read_in_the_gyms_own_zone(client, gym):  # noqa: F811
    """Nov 22 starts at 10:00 UTC on Nov 21 in Kiritimati (UTC+14), after NOW (09:00)."""
    for day in ("2026-11-22", "20261122"):  # ISO 8601's basic format too, as the CLI reads it
        answer = _patch(client, gym, {"timezone": "Pacific/Kiritimati", "openingDay": day})
        assert answer.status_code == 200, answer.json
        assert answer.json["data"]["openingDay"] == "2026-11-21T10:00:00+00:00"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"openingDay": _z(NOW - D)}, 422, "billing_opening_day_invalid"),
        ({"openingDay": _z(NOW)}, 422, "billing_opening_day_invalid"),  # now is not ahead
        ({"openingDay": "2026-11-21"}, 422, "billing_opening_day_invalid"),  # today began
        ({"openingDay": "2026-11-21", "timezone": "Pacific/Kiritimati"}, 422,
         "billing_opening_day_invalid"),  # Nov 21 in Kiritimati began on Nov 20 UTC
        ({"openingDay": "0001-01-01", "timezone": "Asia/Jerusalem"}, 422,
         "billing_opening_day_invalid"),  # its midnight is in year 0 UTC: was a 500
        ({"openingDay": _z(NOW + 10 * D), "billingGraceDays": 61}, 422,
         "billing_grace_days_invalid"),  # nothing of a refused change is written
        ({"openingDay": (NOW + 10 * D).replace(tzinfo=None).isoformat()}, 422,
         "timestamp_not_utc"),
        ({"openingDay": "9999-12-31T23:00:00-05:00"}, 400, "invalid_body"),  # year 10000 UTC
        ({"openingDay": "next week"}, 400, "invalid_body"),
        ({"openingDay": "2026-02-30"}, 400, "invalid_body"),
        ({"openingDay": 1796000000}, 400, "invalid_body"),
        ({"openingDay": "1796000000"}, 400, "invalid_body"),  # not seconds since 1970
        ({"openingDay": True}, 400, "invalid_body"),
    ],
)  # fmt: skip
def test_a_bad_opening_day_is_refused_and_changes_nothing(
    client,
    session,
    gym,  # noqa: F811
    body,
    status,
    code,
):
    day = NOW + 20 * D
    bf.make_billing_settings(session, gym.organization, opening_day=day)
    presale = bf.make_subscription(session, gym, PlanType.card, presale_opening=day)
    session.commit()
    before = snapshot(session)

    answer = _patch(client, gym, body)

    assert (answer.status_code, answer.json["code"]) == (status, code), answer.json
    assert snapshot(session) == before
    assert session.get(Subscription, presale.id).opening_day == day


def test_the_domain_refuses_an_opening_day_that_is_no_day(session, gym):  # noqa: F811
    """The doors parse the day; a caller of the domain function with text or a naive time is
    refused alike, nothing written."""
    before = snapshot(session)
    for value in ("2026-12-01", datetime(2026, 12, 1), NOW - D):
        with pytest.raises(DomainError) as refused:
            org_settings.update_settings(
                session, gym.id, opening_day=value, actor_user_id=None, now=NOW
            )
        assert (refused.value.code, refused.value.status) == ("billing_opening_day_invalid", 422)
    assert snapshot(session) == before


def test_a_purchase_after_the_owner_sets_the_day_is_a_presale(
    client,
    session,
    org,  # noqa: F811
    card_server,
):
    """The door and checkout together, over HTTP: the day the owner sets is the day the
    purchase waits for; once cleared, a purchase is charged at once."""
    opening = NOW + 10 * D
    assert _patch(client, org, {"openingDay": _z(opening)}).status_code == 200

    answer = purchase(client, org, create_plan(client, org))

    assert answer.status_code == 201, answer.json
    assert answer.json["data"]["subscription"]["openingDay"] == opening.isoformat()
    page_id = answer.json["data"]["checkout"]["pageId"]
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    session.expire_all()
    subscription = session.get(Subscription, uuid.UUID(answer.json["data"]["subscription"]["id"]))
    assert subscription.status == SubscriptionStatus.scheduled
    assert (subscription.opening_day, subscription.next_charge_date) == (opening, opening)
    assert subscription.current_period_end is None  # a presale holds no period
    assert count(session, PaymentTransaction) == 0
    page = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
    assert page.operation == "CreateTokenOnly"

    assert _patch(client, org, {"openingDay": None}).json["data"]["openingDay"] is None
    after = purchase(client, org, create_plan(client, org, name="Evenings"))
    assert after.status_code == 201, after.json
    assert after.json["data"]["subscription"]["openingDay"] is None
    charged = session.scalar(
        select(Checkout).where(Checkout.page_id == after.json["data"]["checkout"]["pageId"])
    )
    assert charged.operation != "CreateTokenOnly"  # charged at once: no presale
    # the presale sold before keeps its day: clearing the gym's day moves no presale
    session.expire_all()
    assert session.get(Subscription, subscription.id).opening_day == opening


def test_moving_the_day_moves_the_presales_sold_for_it_but_not_one_in_flight(
    client,
    session,
    org,  # noqa: F811
):
    old, new = NOW + 10 * D, NOW + 24 * D
    assert _patch(client, org, {"openingDay": _z(old)}).status_code == 200
    # the member's page is still open: a presale in flight
    bought = purchase(client, org, create_plan(client, org))
    in_flight = uuid.UUID(bought.json["data"]["subscription"]["id"])
    admin = org[Role.admin].membership
    settled = bf.make_subscription(
        session, org, PlanType.card, membership=admin, presale_opening=old
    )
    own_day = bf.make_subscription(
        session, org, PlanType.card, membership=admin, presale_opening=old + 5 * D
    )
    other = bf.make_gym(session)
    theirs = bf.make_subscription(session, other, PlanType.card, presale_opening=old)
    session.commit()

    moved = _patch(client, org, {"openingDay": _z(new)})

    assert moved.status_code == 200, moved.json
    assert moved.json["data"]["openingDay"] == new.isoformat()
    assert moved.json["data"]["presales"] == {
        "moved": 1,
        "stayed": [{"subscriptionId": str(in_flight), "code": "presale_charge_in_flight"}],
    }
    session.expire_all()
    days = {
        row.id: (row.opening_day, row.next_charge_date, row.status)
        for row in session.scalars(select(Subscription))
    }
    assert days[settled.id] == (new, new, SubscriptionStatus.scheduled)
    assert days[in_flight] == (old, old, SubscriptionStatus.scheduled)
    assert days[own_day.id][:2] == (old + 5 * D, old + 5 * D)  # staff gave it its own day
    assert days[theirs.id][:2] == (old, old)  # another gym's
    [audit] = audit_rows(session, "subscription.opening_day_changed")
    assert (audit.target_id, audit.actor_user_id) == (str(settled.id), org[Role.owner].user.id)
    assert audit.data == {"before": old.isoformat(), "after": new.isoformat()}


def test_a_day_already_come_moves_no_presale(client, session, gym):  # noqa: F811
    """Once the gym's day has come it has opened: what is due is the collector's."""
    came = NOW - timedelta(hours=1)
    bf.make_billing_settings(session, gym.organization, opening_day=came)
    due = bf.make_subscription(session, gym, PlanType.card, presale_opening=came)
    session.commit()

    answer = _patch(client, gym, {"openingDay": _z(NOW + 30 * D)})

    assert answer.status_code == 200, answer.json
    assert "presales" not in answer.json["data"]
    session.expire_all()
    assert session.get(Subscription, due.id).opening_day == came


URLS = checkout.Urls("https://a.example/ok", "https://a.example/no", "https://a.example/wh")


def _buy(factory, sandbox, organization_id, plan_id, user_id, out):
    """A member's purchase in a session of its own, committed; its subscription id or error."""
    with factory() as session:
        try:
            subscription, _ = checkout.purchase_card_plan(
                session,
                sandbox.provider,
                organization_id=organization_id,
                plan_id=plan_id,
                user_id=user_id,
                urls=URLS,
                now=NOW,
                cipher=TEST_CIPHER,
            )
            session.commit()
            out["subscription"] = subscription.id
        except Exception as error:  # reported by the test's assertion
            out["error"] = error


def test_a_purchase_during_the_owners_move_waits_and_takes_the_new_day(committed_pg, tmp_path):
    """PostgreSQL: the purchase's rows were written on the day it read unlocked while the
    owner's move (its settings row locked FOR UPDATE) had not committed: a presale on the old
    day the move never saw, neither moved nor listed as stayed. Its write phase now reads the
    row FOR SHARE: it waits for the move and writes the new day."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    old, new = NOW + 10 * D, NOW + 24 * D
    with factory() as session:
        shop = bf.make_gym(session, card_provider_since=NOW - 400 * D)
        plan = bf.make_plan(session, shop.organization)
        bf.make_billing_settings(session, shop.organization, opening_day=old)
        session.commit()
        organization_id, plan_id, member_id = shop.id, plan.id, shop.member.id
    owner = factory()
    org_settings.update_settings(
        owner, organization_id, opening_day=new, actor_user_id=None, now=NOW
    )  # flushed, not committed
    out: dict = {}
    buyer = threading.Thread(
        target=_buy, args=(factory, Sandbox(tmp_path), organization_id, plan_id, member_id, out)
    )
    buyer.start()
    wait_for_a_lock_wait(engine, rival=buyer)
    owner.commit()
    owner.close()
    buyer.join(timeout=30)

    assert "error" not in out, out
    with factory() as session:
        bought = session.get(Subscription, out["subscription"])
        assert (bought.opening_day, bought.next_charge_date) == (new, new)


def test_purchases_share_the_settings_row(committed_pg, tmp_path):
    """PostgreSQL: a purchase's share lock on the settings row holds back no other purchase
    (another plan: the plan's own row queues buyers of the same plan)."""
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        shop = bf.make_gym(
            session, roles=(Role.owner, Role.member, Role.admin), card_provider_since=NOW - 400 * D
        )
        plans = [bf.make_plan(session, shop.organization, name=n) for n in ("Day", "Night")]
        bf.make_billing_settings(session, shop.organization, opening_day=NOW + 10 * D)
        session.commit()
    sandbox = Sandbox(tmp_path)
    first = factory()
    checkout.purchase_card_plan(
        first,
        sandbox.provider,
        organization_id=shop.id,
        plan_id=plans[0].id,
        user_id=shop.member.id,
        urls=URLS,
        now=NOW,
        cipher=TEST_CIPHER,
    )  # written, not committed: it holds the share lock
    out: dict = {}
    rival = threading.Thread(
        target=_buy, args=(factory, sandbox, shop.id, plans[1].id, shop[Role.admin].user.id, out)
    )
    rival.start()
    rival.join(timeout=10)
    alive = rival.is_alive()
    first.commit()
    first.close()
    rival.join(timeout=30)

    assert not alive, "the second purchase waited for the first"
    assert "subscription" in out, out


@pytest.mark.parametrize("rival", ["staff_give_a_day_of_its_own", "member_withdraws"])
def test_the_gyms_move_leaves_a_presale_changed_under_it(committed_pg, rival):
    """PostgreSQL: the move chooses the presales on the old day unlocked, then locks each. A
    staff edit committed in between was overwritten with the gym's day; a withdrawal in
    between refused the owner's whole change (409 not_a_presale). Neither is the gym's
    presale any more: it is left as it is, neither moved nor listed."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    old, new, own = NOW + 10 * D, NOW + 24 * D, NOW + 40 * D
    with factory() as session:
        shop = bf.make_gym(session)
        bf.make_billing_settings(session, shop.organization, opening_day=old)
        presale = bf.make_subscription(session, shop, PlanType.card, presale_opening=old)
        session.commit()
        organization_id, member_id = shop.id, shop.member.id
    staff = factory()
    if rival == "staff_give_a_day_of_its_own":
        opening_day.edit_opening_day(
            staff,
            organization_id=organization_id,
            subscription_id=presale.id,
            opening_day=own,
            actor_user_id=None,
            now=NOW,
        )
    else:
        withdraw_presale(
            staff,
            organization_id,
            presale.id,
            actor_user_id=member_id,
            by_member=True,
            locale="en",
            now=NOW,
        )
    out: dict = {}

    def move() -> None:
        with factory() as session:
            try:
                out["answer"] = org_settings.update_settings(
                    session, organization_id, opening_day=new, actor_user_id=None, now=NOW
                )
                session.commit()
            except Exception as error:  # reported by the assertion below
                out["error"] = error

    owner = threading.Thread(target=move)
    owner.start()
    wait_for_a_lock_wait(engine, rival=owner)  # the move waits on the presale's lock
    staff.commit()
    staff.close()
    owner.join(timeout=30)

    assert "error" not in out, out
    assert out["answer"]["openingDay"] == new.isoformat()
    assert out["answer"]["presales"] == {"moved": 0, "stayed": []}
    with factory() as session:
        row = session.get(Subscription, presale.id)
        if rival == "staff_give_a_day_of_its_own":
            assert (row.opening_day, row.next_charge_date, row.status) == (
                own,
                own,
                SubscriptionStatus.scheduled,
            )
        else:
            assert (row.opening_day, row.status) == (old, SubscriptionStatus.cancelled)
