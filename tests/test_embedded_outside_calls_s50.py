"""The retention and billing emails, each sent with the outside-call detector on
(tests/embedded_outside_calls.py), on the embedded default as the quick start makes it (a SQLite
file of its own, with its real write lock): no thread holds SQLite's one write lock while the
mail server answers (decisions s42). The demo gym walks of tests/test_embedded_outside_calls.py
reach none of them (no presale, no matured notice, no debt): each is set up here. The presale
case emails (the pass and the withdrawal's own), the membership-ended email, the member billing
emails and the retention digest were sent inside the transaction that read (or claimed) them.
"""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)

from __future__ import annotations

from datetime import timedelta

import httpx

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.config import Settings
from gymctl.identity import users
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.identity_admin import HttpIdentityAdmin
from gymctl.providers.mail import read_mailbox
from gymctl.retention import digest, presales, settlement
from gymctl.retention.billing_emails import send_billing_emails
from tests import factories
from tests.billing import factories as bf
from tests.conftest import NOW
from tests.embedded_outside_calls import factory, mailer, watching  # noqa: F401 (fixtures)
from tests.retention.conftest import give_notice

D = timedelta(days=1)
OPENING = NOW + 14 * D
MAILBOX = "mailbox (SMTP stand-in)"


def _declined_presale(session, gym) -> None:
    plan = bf.make_plan(session, gym.organization, name="Founders")
    subscription = bf.make_subscription(session, gym, plan=plan, presale_opening=OPENING)
    subscription.status = SubscriptionStatus.debt
    subscription.debt_since = OPENING
    subscription.retention_case_kind = "presale_charge_failed"


def test_the_presale_case_email_holds_no_write_lock(factory, mailer, tmp_path):
    at = OPENING + timedelta(hours=1)
    with factory() as session:
        _declined_presale(session, bf.make_gym(session))
        assert presales.open_charge_failed_cases(session, now=at) == 1
        session.commit()
    with watching() as seen:
        assert presales.notify_pending(factory, mailer, now=at) == 1
    assert MAILBOX in seen.doors()
    assert not seen.calls, seen.report()
    assert len(read_mailbox(tmp_path / "mailbox")) == 1
    with factory() as session:
        assert not presales.cases_waiting(session)  # recorded as sent


def test_a_presale_withdrawals_email_holds_no_write_lock(factory, mailer, tmp_path):
    """The route commits the withdrawal, then sends its email (`notify_withdrawal`)."""
    with factory() as session:
        gym = bf.make_gym(session)
        plan = bf.make_plan(session, gym.organization, name="Founders")
        subscription = bf.make_subscription(session, gym, plan=plan, presale_opening=OPENING)
        session.commit()
        _row, case = presales.withdraw_presale(
            session,
            gym.organization.id,
            subscription.id,
            actor_user_id=gym.member.id,
            by_member=True,
            locale="en",
            now=NOW,
        )
        session.commit()
        with watching() as seen:
            presales.notify_withdrawal(session, mailer, case.id, now=NOW)
    assert MAILBOX in seen.doors()
    assert not seen.calls, seen.report()
    assert len(read_mailbox(tmp_path / "mailbox")) == 1
    with factory() as session:
        assert not presales.cases_waiting(session)


def test_the_membership_ended_email_holds_no_write_lock(factory, mailer, tmp_path):
    with factory() as session:
        gym = bf.make_gym(session)
        subscription = bf.make_subscription(
            session, gym, PlanType.cash, current_period_end=NOW + 30 * D
        )
        give_notice(
            session,
            gym,
            subscription,
            initiator="staff",
            actor_user_id=gym.owner.id,
            reason_code="price",
            effective_at=NOW + D,
        )
        session.commit()
    doors = settlement.Doors(provider=None, cipher=None, documents=None, mailer=mailer)
    with watching() as seen:
        swept = settlement.period_end_sweep(factory, doors, now=NOW + D)
    assert (len(swept.cancelled), swept.emailed) == (1, 1)
    assert MAILBOX in seen.doors()
    assert not seen.calls, seen.report()
    assert settlement.send_pending_emails(factory, mailer, now=NOW + 2 * D) == 0  # recorded


def test_the_member_billing_emails_hold_no_write_lock(factory, mailer, tmp_path):
    with factory() as session:
        gym = bf.make_gym(session)
        member = factories.membership(
            session, user=factories.user(session), organization=gym.organization
        )
        bf.make_subscription(
            session, gym, PlanType.cash, membership=member, cash_prepaid_through=NOW
        )
        run_lifecycle(session, now=NOW)
        session.commit()
    with watching() as seen:
        sent = send_billing_emails(factory, mailer, now=NOW)
    assert sent == {"sent": 1, "failed": 0, "skipped": 0, "givenUp": 0}
    assert MAILBOX in seen.doors()
    assert not seen.calls, seen.report()
    assert send_billing_emails(factory, mailer, now=NOW + timedelta(minutes=5))["sent"] == 0


def test_the_retention_digest_holds_no_write_lock(factory, mailer, tmp_path):
    with factory() as session:
        gym = bf.make_gym(session)
        give_notice(session, gym, bf.make_subscription(session, gym))
        session.commit()
    at = NOW + timedelta(hours=3)
    with watching() as seen:
        assert digest.send_digests(factory, mailer, now=at) == {"orgsChecked": 1, "sent": 1}
    assert MAILBOX in seen.doors()
    assert not seen.calls, seen.report()
    assert digest.send_digests(factory, mailer, now=at + timedelta(hours=1))["sent"] == 0


def test_a_first_users_me_asks_the_identity_provider_with_no_write_lock(factory, clock):
    """GET /users/me before user.created arrived reads the provider's user object
    (`users.first_request`): its lookup of the row began SQLite's write transaction, held
    through the provider's round trip."""
    known = {
        "id": "user_first",
        "email_addresses": [
            {"id": "idn_1", "email_address": "first@example.test", "verification": None}
        ],
        "primary_email_address_id": "idn_1",
    }
    client = httpx.Client(transport=httpx.MockTransport(lambda _r: httpx.Response(200, json=known)))
    admin = HttpIdentityAdmin("https://idp.example.test", "sk_test_x", client=client, clock=clock)
    with factory() as session, watching() as seen:
        user = users.first_request(
            session, "user_first", identity_admin=admin, settings=Settings(), now=NOW
        )
        session.commit()
    assert user.email == "first@example.test"
    assert "httpx" in seen.doors()
    assert not seen.calls, seen.report()
