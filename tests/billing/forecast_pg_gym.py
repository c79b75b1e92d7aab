"""A gym of many kinds on PostgreSQL (committed), forecast from PostgreSQL and run for real on
PostgreSQL at hourly ticks; the comparison helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import forecast as fc
from gymctl.billing.accounts import CARD_PROVIDER
from gymctl.bookings import book, schedule
from gymctl.models import Booking, PaymentTransaction, Subscription
from gymctl.models.billing import PlanType, TransactionType
from gymctl.retention import notices
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

JERUSALEM = ZoneInfo("Asia/Jerusalem")
LEDGER = ("subscription_id", "type", "status", "amount_in_cents", "attempt_kind", "created_at")


def local(year, month, day, hour=0):
    return datetime(year, month, day, hour, tzinfo=JERUSALEM).astimezone(UTC)


def build(session, *, same_token: bool = False, base=NOW, months: int = 0, zone="Asia/Jerusalem"):
    """Every kind the issue names, in Asia/Jerusalem; committed. Ids by label. `base` stands
    for NOW, the local dates moved by `months` on the gym's calendar."""

    def shifted(*parts):
        return (datetime(*parts, tzinfo=JERUSALEM) + relativedelta(months=months)).astimezone(UTC)

    gym = bf.make_gym(session)
    org = gym.organization
    connect_card_provider(session, gym, since=base - timedelta(days=400))
    bf.make_billing_settings(
        session, org, timezone=zone, billing_grace_days=3, plan_required_to_book=True
    )
    labels = {}
    counter = [0]

    def member():
        user = factories.user(session)
        return user, factories.membership(session, user=user, organization=org)

    def card_sub(label, token=None, **fields):
        user, membership = member()
        counter[0] += 1
        tok = token or (
            "tok_4580000000000000" if same_token else f"tok_45800000000{counter[0]:05d}"
        )
        card = bf.make_card(session, gym, user=user, token=tok)
        fields.setdefault("now", base)
        sub = bf.make_subscription(
            session, gym, PlanType.card, membership=membership, payment_method_id=card.id, **fields
        )
        labels[label] = sub.id
        return sub

    # Card renewals: due tomorrow, in 9 days, and at the month's end in the gym's calendar.
    card_sub("card_tomorrow", now=base - timedelta(days=29))
    card_sub("card_9d", now=base - timedelta(days=20))
    for n, (start, end) in enumerate(
        [
            (shifted(2026, 10, 31), shifted(2026, 11, 30)),
            (shifted(2026, 10, 31, 23), shifted(2026, 11, 30, 23)),
            (shifted(2026, 11, 1), shifted(2026, 12, 1)),
            (shifted(2026, 9, 30), shifted(2026, 12, 31)),
        ]
    ):
        sub = card_sub(
            f"card_month_end_{n}",
            now=start,
            current_period_end=end,
            next_charge_date=end,
        )
        if n == 3:
            sub.interval_months = 3
    # Debts being retried.
    card_sub(
        "debt_retry", in_debt_since=base - timedelta(days=2), retry_at=base + timedelta(hours=5)
    )
    card_sub(
        "debt_retry_late",
        now=base - timedelta(days=31),
        in_debt_since=base - timedelta(days=1),
        next_charge_date=base - timedelta(days=1),
        retry_at=base + timedelta(days=1),
    )
    # Presales opening inside the horizon (local midnight of Dec 1st and of Dec 15th).
    card_sub("presale_dec1", presale_opening=shifted(2026, 12, 1))
    card_sub("presale_dec15", presale_opening=shifted(2026, 12, 15))
    # A free open-ended card plan that rolls (month ends clamp).
    free = bf.make_plan(session, org, PlanType.card, price_in_cents=0)
    _, m = member()
    labels["free_roll"] = bf.make_subscription(
        session,
        gym,
        plan=free,
        membership=m,
        now=shifted(2026, 8, 31),
        current_period_end=shifted(2026, 8, 31) + timedelta(days=30),
        next_charge_date=None,
    ).id
    # Cash lapse.
    _, m = member()
    labels["cash"] = bf.make_subscription(session, gym, PlanType.cash, membership=m, now=base).id
    _, m = member()
    labels["cash_month_end"] = bf.make_subscription(
        session,
        gym,
        PlanType.cash,
        membership=m,
        now=shifted(2026, 10, 31),
        current_period_end=shifted(2026, 11, 30),
        cash_prepaid_through=shifted(2026, 11, 30),
    ).id
    # A gift ending.
    _, m = member()
    labels["gift"] = bf.make_subscription(session, gym, PlanType.gift, membership=m, now=base).id

    # Packs with quotas, seats in classes to come, a waitlist; a pay-later pack due in 3 days
    # (debt, then cancellation after 3 days of grace) holding seats others wait for.
    user_a, member_a = member()
    pack_a = bf.make_subscription(
        session,
        gym,
        PlanType.pack,
        membership=member_a,
        pay_later_due=base + timedelta(days=3),
        now=base - timedelta(days=1),
    )
    labels["pack_pay_later"] = pack_a.id
    user_b, member_b = member()
    pack_b = bf.make_subscription(
        session, gym, PlanType.pack, membership=member_b, now=base - timedelta(days=1)
    )
    labels["pack_waiting"] = pack_b.id
    user_c, member_c = member()
    pack_c = bf.make_subscription(
        session, gym, PlanType.pack, membership=member_c, now=base - timedelta(days=80)
    )
    labels["pack_expiring"] = pack_c.id  # validity 90 days: ends in 10 days
    user_d, member_d = member()
    pack_d = bf.make_subscription(
        session, gym, PlanType.pack, membership=member_d, now=base - timedelta(days=1)
    )
    labels["pack_waiting_2"] = pack_d.id
    kind = schedule.create_class_type(
        session, org.id, name="WOD", default_capacity=1, duration_minutes=60, now=base
    )
    classes = [
        schedule.schedule_session(
            session, kind, starts_at=base + timedelta(days=d, hours=h), now=base
        )
        for d, h in ((8, 0), (12, 0), (14, 0), (20, 2), (30, 0))
    ]
    booked_at = base - timedelta(hours=6)
    for n, cls in enumerate(classes):
        first, first_user = (member_c, user_c) if n == 0 else (member_a, user_a)
        book.book(session, org.id, cls.id, first, actor_user_id=first_user.id, now=booked_at)
        book.book(
            session, org.id, cls.id, member_b, actor_user_id=user_b.id,
            now=booked_at + timedelta(hours=1),
        )  # fmt: skip
        book.book(
            session, org.id, cls.id, member_d, actor_user_id=user_d.id,
            now=booked_at + timedelta(hours=1),
        )  # fmt: skip

    # Notices maturing with a proration refund: a yearly card plan paid by card, staff notice
    # effective mid-period inside the horizon; and a monthly plan, the member's notice.
    yearly = bf.make_plan(session, org, PlanType.card, price_in_cents=36500, interval_months=12)
    user_y, member_y = member()
    card_y = bf.make_card(session, gym, user=user_y, token="tok_yearly_000001")
    sub_y = bf.make_subscription(
        session, gym, plan=yearly, membership=member_y, payment_method_id=card_y.id,
        now=base - timedelta(days=100),
    )  # fmt: skip
    bf.make_transaction(
        session,
        gym,
        user_id=user_y.id,
        subscription_id=sub_y.id,
        type=TransactionType.recurring,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=36500,
        provider_transaction_id="p-yearly",
        billing_attempt={"terminal": "1000"},
        now=base - timedelta(days=100),
    )
    labels["notice_yearly"] = sub_y.id
    session.flush()
    notices.give_notice(
        session,
        org.id,
        sub_y.id,
        initiator="staff",
        actor_user_id=gym.owner.id,
        reason_code="price",
        effective_at=shifted(2026, 12, 20),
        locale="en",
        now=base,
    )
    sub_m = card_sub("notice_monthly", now=base - timedelta(days=10))
    session.flush()
    notices.give_notice(
        session,
        org.id,
        sub_m.id,
        initiator="member",
        actor_user_id=sub_m.user_id,
        locale="en",
        now=base,
    )
    session.commit()
    return gym, labels


def run_daemons_hourly(factory, until, provider, start=NOW):
    jobs = fc.forecast_jobs(provider, TEST_CIPHER)
    at = start
    while at <= until:
        for job in jobs:
            if fc.next_tick(job, at) == at:
                job.run(factory, at)
        at += timedelta(hours=1)


def real_state(session, org_id):
    session.expire_all()
    subs = [
        dict(r._mapping)
        for r in session.execute(
            select(Subscription.__table__).where(Subscription.organization_id == org_id)
        )
    ]
    ledger = [
        dict(r._mapping)
        for r in session.execute(
            select(PaymentTransaction.__table__).where(PaymentTransaction.organization_id == org_id)
        )
    ]
    bookings = [
        dict(r._mapping)
        for r in session.execute(select(Booking.__table__).where(Booking.organization_id == org_id))
    ]
    session.rollback()
    return subs, ledger, bookings


def differences(forecast_subs, real_subs, forecast_ledger, real_ledger, labels):
    """Per subscription (by label): the columns that differ, and the ledger rows that differ."""
    names = {v: k for k, v in labels.items()}
    by_id = {r["id"]: r for r in real_subs}
    out = []
    for row in sorted(forecast_subs, key=lambda r: str(r["id"])):
        real = by_id.get(row["id"])
        if real is None:
            out.append((names.get(row["id"], row["id"]), "missing in reference"))
            continue
        cols = {k: (row[k], real[k]) for k in row if row[k] != real[k]}
        if cols:
            out.append((names.get(row["id"], row["id"]), cols))

    def ledger_of(rows):
        picked = {}
        for r in rows:
            key = names.get(r["subscription_id"], r["subscription_id"])
            picked.setdefault(key, []).append(
                tuple(str(r[c]) for c in LEDGER if c != "subscription_id")
            )
        return {k: sorted(v) for k, v in picked.items()}

    f, r = ledger_of(forecast_ledger), ledger_of(real_ledger)
    for key in sorted(set(f) | set(r), key=str):
        if f.get(key) != r.get(key):
            out.append((key, {"ledger forecast": f.get(key), "ledger reference": r.get(key)}))
    return out
