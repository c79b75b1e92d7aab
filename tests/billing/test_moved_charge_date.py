"""A moved charge date moves the billing anchor: staff move a renewal from the 1st to the 10th
(the member's payday) through the route, and the real sweeps on a clock (collector, then
lifecycle) charge on the 10th for a period from the 10th, and again a month later; access, a
notice's date and a refund read the same period end (docs/decisions.md, billing_lifecycle_day:
"the day of the month its renewals are charged on ... it does not re-anchor existing periods by
itself": the move does). It stayed one charge: the 10th paid from the 1st, the next charge fell
back on the 1st, and a plan without a card ended on the 1st with its charge due on the 10th."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import charge_dates, collector, forecast, lifecycle
from gymctl.bridge import mirror
from gymctl.models import CancellationSettlement, PaymentTransaction, Role
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionType
from gymctl.models.bridge import SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailboxMailer
from gymctl.retention import notices
from gymctl.retention.settlement import Doors, period_end_sweep
from tests import factories
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import TIMEOUT, connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.passes import collect, confirm_non_charges, retries_sent
from tests.billing_ops.helpers import card_of, card_subscription, paid_charge
from tests.bridge import conftest as bridge
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded  # the demo gym's finance staff reach the route: both engines

gym = access.gym  # one person per role, real tokens
org, connected = bridge.org, bridge.connected  # a gym with a bridge to the external system
fake, account, bridge_settings = bridge.fake, bridge.account, bridge.bridge_settings

BOUGHT = datetime(2026, 11, 1, tzinfo=UTC)  # NOW is Nov 21: the period runs Nov 1 - Dec 1
FIRST, TENTH = datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 10, tzinfo=UTC)
JAN_1, JAN_10 = datetime(2027, 1, 1, tzinfo=UTC), datetime(2027, 1, 10, tzinfo=UTC)
FEB_10 = datetime(2027, 2, 10, tzinfo=UTC)
SWEEP = timedelta(hours=2)  # the daily sweep runs at 02:00 UTC


@pytest.fixture
def member_of_org(session, org):
    membership = factories.membership(
        session, user=factories.user(session), organization=org, role=Role.member
    )
    session.commit()
    return membership


@pytest.fixture
def billing(session, gym):
    connect_card_provider(session, gym, since=NOW - timedelta(days=400))
    return gym


def _card_plan(session, gym, **fields):
    plan = bf.make_plan(session, gym.organization, PlanType.card)
    return bf.make_subscription(session, gym, plan=plan, now=BOUGHT, **fields)


def _move(client, gym, subscription, to):
    return client.post(
        f"/organizations/{gym.id}/subscriptions/{subscription.id}/charge-date",
        json={
            "expectedNextChargeDate": subscription.next_charge_date.isoformat(),
            "nextChargeDate": to.isoformat(),
        },
        headers=gym[Role.admin].headers,
    )


def _charges(session, subscription):
    rows = session.scalars(
        select(PaymentTransaction)
        .where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.type == TransactionType.recurring,
        )
        .order_by(PaymentTransaction.created_at)
    )
    return [(t.status.value, t.amount_in_cents, t.created_at) for t in rows]


def _dates(subscription):
    return (
        subscription.current_period_start,
        subscription.current_period_end,
        subscription.next_charge_date,
    )


def test_a_renewal_moved_to_the_tenth_renews_on_the_tenth_twice(
    client, session, session_factory, billing, card_server
):
    paid = _card_plan(session, billing, payment_method_id=card_of(session, billing, card_server).id)
    cardless = _card_plan(session, billing)  # the lifecycle ends it at its period end
    session.commit()
    assert _dates(paid) == (BOUGHT, FIRST, FIRST)

    for row in (paid, cardless):
        moved = _move(client, billing, row, TENTH)
        assert moved.status_code == 200, moved.json
        assert moved.json["data"]["nextChargeDate"] == TENTH.isoformat()

    def day(at):
        summary = collector.daily_sweep(
            session_factory, card_server.provider(), now=at, cipher=TEST_CIPHER
        )
        lifecycle.run_lifecycle(session, now=at)
        session.commit()
        session.expire_all()
        return summary.charged

    assert day(FIRST + SWEEP) == 0
    assert (paid.status, cardless.status) == (SubscriptionStatus.active,) * 2
    assert _dates(paid) == (BOUGHT, TENTH, TENTH)  # the gym gave the days up to the 10th
    assert paid.cash_pauses == [
        {"reason": "charge_date_moved", "from": FIRST.isoformat(), "until": TENTH.isoformat()}
    ]

    assert day(TENTH + SWEEP) == 1
    assert _dates(paid) == (TENTH, JAN_10, JAN_10)
    assert cardless.status == SubscriptionStatus.term_ended  # access ended with its period
    assert day(JAN_1 + SWEEP) == 0
    assert day(JAN_10 + SWEEP) == 1
    assert _dates(paid) == (JAN_10, FEB_10, FEB_10)
    assert paid.status == SubscriptionStatus.active
    assert _charges(session, paid) == [
        ("completed", 9900, TENTH + SWEEP),
        ("completed", 9900, JAN_10 + SWEEP),
    ]
    assert _charges(session, cardless) == []


def test_the_forecast_renews_a_moved_date_where_the_sweeps_do(
    client, session, billing, card_server, tmp_path
):
    paid = _card_plan(session, billing, payment_method_id=card_of(session, billing, card_server).id)
    session.commit()
    assert _move(client, billing, paid, TENTH).status_code == 200
    session.commit()

    run = forecast.simulate(
        session,
        billing.organization.id,
        now=NOW,
        until=FEB_10 - timedelta(days=1),
        cipher=TEST_CIPHER,
        scratch_dir=tmp_path,
    )

    renewed = [s["at"].date() for s in run.explain(paid.id) if s["event"] == "subscription.renewed"]
    assert renewed == [TENTH.date(), JAN_10.date()]
    [row] = [r for r in run.final["subscriptions"] if str(r["id"]) == str(paid.id)]
    assert (row["current_period_end"], row["next_charge_date"]) == (FEB_10, FEB_10)


def _doors(card_server, mailbox, clock):
    return Doors(
        provider=card_server.provider(),
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=MailboxMailer(mailbox, "gym <no-reply@gym.example>", clock=clock),
    )


def _notice(session, gym, subscription, **fields):
    notices.give_notice(
        session,
        gym.organization.id,
        subscription.id,
        locale="en",
        now=NOW,
        **{"initiator": "member", "actor_user_id": gym.member.id, **fields},
    )
    session.commit()


def test_a_notice_after_a_move_ends_the_plan_on_the_new_date_uncharged(
    client, session, session_factory, billing, card_server, mailbox, clock
):
    """A member's notice takes effect at "the end of the paid period": the moved one. The
    renewal on that day is not collected (a notice effective by then ends the plan first)."""
    paid = _card_plan(session, billing, payment_method_id=card_of(session, billing, card_server).id)
    session.commit()
    assert _move(client, billing, paid, TENTH).status_code == 200
    _notice(session, billing, paid)
    assert paid.cancellation_effective_at == TENTH

    summary = collector.daily_sweep(
        session_factory, card_server.provider(), now=TENTH + SWEEP, cipher=TEST_CIPHER
    )
    period_end_sweep(session_factory, _doors(card_server, mailbox, clock), now=TENTH + SWEEP)

    assert summary.charged == 0
    session.expire_all()
    assert paid.status == SubscriptionStatus.cancelled
    assert _charges(session, paid) == []


def test_a_refund_does_not_pay_back_the_days_a_later_charge_date_gave(
    client, session, session_factory, billing, card_server, mailbox, clock
):
    """floor(charge x ceil(days from the effective date to the period end) / 365): the period
    now ends on the 10th, but the days from the 1st were nobody's money (a pause's days are not
    refunded). Staff's notice effective Nov 25 refunds Nov 25 - Dec 1: 6 days, not 15."""
    paid = _card_plan(session, billing, payment_method_id=card_of(session, billing, card_server).id)
    paid_charge(session, billing, card_server, amount=36500, subscription=paid)
    session.commit()
    assert _move(client, billing, paid, TENTH).status_code == 200
    effective = datetime(2026, 11, 25, tzinfo=UTC)
    _notice(
        session,
        billing,
        paid,
        initiator="staff",
        actor_user_id=billing.owner.id,
        reason_code="price",
        effective_at=effective,
    )

    period_end_sweep(session_factory, _doors(card_server, mailbox, clock), now=effective)

    settlement = session.scalar(
        select(CancellationSettlement).where(CancellationSettlement.subscription_id == paid.id)
    )
    assert (settlement.period_end, settlement.days) == (TENTH, 6)
    assert settlement.amount_in_cents == 600


def test_a_move_before_the_paid_period_ends_is_refused_and_nothing_changes(
    client, session, billing, card_server
):
    """No charge is prorated (spec B): a renewal moved before the end of the period the member
    paid would charge them again for days they have (the 25th would pay Nov 25 - Dec 25 on top
    of Nov 1 - Dec 1). A charge day is brought forward by moving it past the period (Dec 25)."""
    early = datetime(2026, 11, 25, tzinfo=UTC)
    paid = _card_plan(session, billing, payment_method_id=card_of(session, billing, card_server).id)
    session.commit()
    before = snapshot(session)

    refused = _move(client, billing, paid, early)

    assert (refused.status_code, refused.json["code"]) == (422, "charge_date_out_of_range")
    assert refused.json["paidThrough"] == FIRST.isoformat()
    assert snapshot(session) == before
    assert _move(client, billing, paid, early.replace(month=12)).status_code == 200


def test_a_plan_under_notice_is_not_moved_and_nothing_changes(client, session, billing):
    """A notice given for the period end would be overtaken by a renewal moved before it, or
    refund the free days of one moved after it: withdraw it, move, give it again."""
    paid = _card_plan(session, billing, payment_method_id=bf.make_card(session, billing).id)
    session.commit()
    _notice(session, billing, paid)
    before = snapshot(session)

    refused = _move(client, billing, paid, TENTH)

    assert (refused.status_code, refused.json["code"]) == (409, "charge_date_not_movable")
    assert refused.json["noticeEffectiveAt"] == FIRST.isoformat()
    assert snapshot(session) == before


def test_the_bridge_membership_of_a_fixed_term_plan_ends_on_the_moved_date(
    session, org, connected, member_of_org
):
    """The external system's free membership ends where the plan's period does (a fixed-term
    plan's end is its current period's end): it followed the renewal only at the next charge."""
    plan = bf.make_plan(session, org, PlanType.card, open_ended=False)
    subscription = bf.make_subscription(
        session, Gym.of(member_of_org), plan=plan, now=BOUGHT, renewal_end=FEB_10
    )
    mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()

    charge_dates.move_charge_date(
        session,
        org.id,
        subscription.id,
        expected=FIRST,
        to=TENTH,
        actor_user_id=None,
        now=NOW,
    )
    session.commit()

    update = session.scalars(select(SyncOp).where(SyncOp.op_type == "membership.update")).one()
    assert update.payload["endDate"] == TENTH.date().isoformat()


@pytest.mark.parametrize("non_charges", [1, 4], ids=["retry_owed", "retries_exhausted"])
def test_a_charge_owed_a_technical_retry_keeps_its_date_and_its_three_retries(
    client, session, session_factory, billing, card_server, non_charges
):
    """Technical retries count per obligation, a renewal by its due date: at most three
    (spec B 8), then only the owner's authorize-retry. Moved while one was owed (or after all
    three), the renewal became a new obligation: its count started again at none and the
    retry-terms check (retry_terms_changed) had no non-charge to compare with, so every move
    allowed three more attempts. A technical retry's schedule is the collector's, as a debt's."""
    provider = card_server.provider(timeout=0.3)  # the timeout card: never reaches it
    due = card_subscription(session, billing, card_server, TIMEOUT)
    session.commit()
    at = confirm_non_charges(session, session_factory, due, provider, non_charges)
    before = snapshot(session)

    moved = _move(client, billing, due, TENTH)
    after = snapshot(session)
    for then in (at, TENTH + SWEEP):  # the retry owed, then the date asked for
        collect(session_factory, due, provider, then)

    counts, obligations = retries_sent(session, due)
    assert counts == list(range(min(non_charges + 1, 4)))
    assert len(obligations) == 1
    assert (moved.status_code, moved.json["code"]) == (409, "charge_date_not_movable")
    assert moved.json["technicalNonCharges"] == non_charges
    assert after == before
