"""Presale withdrawal and presale charge-failure cases (spec B 3, 6): the case owner is
emailed, falling back to the organization's active owner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import MembershipStatus, Plan, RetentionCase, Role
from gymctl.models.billing import (
    AttemptKind,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.providers.mail import read_mailbox
from gymctl.retention import presales
from tests import factories
from tests.access.conftest import snapshot
from tests.billing.factories import make_plan, make_subscription, make_transaction
from tests.conftest import NOW
from tests.retention.conftest import refused

OPENING = NOW + timedelta(days=14)


def _presale(session, gym):
    plan = make_plan(session, gym.organization, name="Founders", purchases_count=1)
    return make_subscription(session, gym, plan=plan, presale_opening=OPENING)


def _withdraw(session, gym, subscription, *, by_member=True):
    return presales.withdraw_presale(
        session,
        gym.organization.id,
        subscription.id,
        actor_user_id=gym.member.id if by_member else gym.owner.id,
        by_member=by_member,
        locale="en",
        now=NOW,
    )


def test_a_member_withdraws_a_presale_the_owner_is_emailed(session, gym, mailer, mailbox):
    subscription = _presale(session, gym)
    _, case = _withdraw(session, gym, subscription)
    assert (subscription.status, subscription.next_charge_date) == (
        SubscriptionStatus.cancelled,
        None,
    )
    assert subscription.retention_case_kind == "presale_withdrawal"
    assert session.get(Plan, subscription.plan_id).purchases_count == 0  # the place is back
    assert (case.kind, case.status, case.owner_user_id) == ("presale_withdrawal", "open", None)
    assert presales.notify_case(session, mailer, case, now=NOW) is True
    [email] = read_mailbox(mailbox)
    assert email["To"] == gym.owner.email  # no case owner: the active owner
    assert email["Subject"].startswith("Presale withdrawn")
    assert "Founders" in email.get_content()
    assert "by the member" in email.get_content()
    assert presales.notify_pending(session, mailer, now=NOW) == 0  # sent once


def test_the_case_owner_gets_it_while_active_staff(session, gym, mailer, mailbox):
    coach = factories.user(session)
    factories.membership(session, user=coach, organization=gym.organization, role=Role.coach)
    subscription = _presale(session, gym)
    _, case = _withdraw(session, gym, subscription, by_member=False)
    case.owner_user_id = coach.id
    presales.notify_case(session, mailer, case, now=NOW)
    assert read_mailbox(mailbox)[-1]["To"] == coach.email


def test_a_case_owner_no_longer_active_falls_back_to_the_owner(session, gym, mailer, mailbox):
    coach = factories.user(session)
    factories.membership(
        session,
        user=coach,
        organization=gym.organization,
        role=Role.coach,
        status=MembershipStatus.cancelled,
    )
    subscription = _presale(session, gym)
    _, case = _withdraw(session, gym, subscription, by_member=False)
    case.owner_user_id = coach.id
    presales.notify_case(session, mailer, case, now=NOW)
    assert read_mailbox(mailbox)[-1]["To"] == gym.owner.email


def test_only_a_presale_can_be_withdrawn(session, gym):
    running = make_subscription(session, gym)
    before = snapshot(session)
    with pytest.raises(DomainError) as caught:
        _withdraw(session, gym, running)
    assert (caught.value.code, caught.value.status) == ("presale_not_withdrawable", 409)
    assert snapshot(session) == before


def test_a_presale_whose_opening_day_charge_is_in_flight_is_not_withdrawn(session, gym):
    """Cancelling under a pending charge would let the money settle on a cancelled presale."""
    subscription = _presale(session, gym)
    make_transaction(
        session,
        gym,
        subscription_id=subscription.id,
        type=TransactionType.recurring,
        status=TransactionStatus.pending,
        provider="card_provider",
        attempt_kind=AttemptKind.recurring,
    )
    error = refused(
        session,
        lambda: presales.withdraw_presale(
            session,
            gym.organization.id,
            subscription.id,
            actor_user_id=gym.member.id,
            by_member=True,
            locale="es",
            now=NOW,
        ),
    )
    assert (error.code, error.status) == ("presale_charge_in_flight", 409)
    assert error.message.startswith("Se está procesando")


def test_a_declined_presale_gets_one_case_per_episode_and_the_owner_is_emailed(
    session, gym, mailer, mailbox
):
    subscription = _presale(session, gym)
    subscription.status = SubscriptionStatus.debt  # as the collector's decline leaves it
    subscription.debt_since = OPENING
    subscription.debt_amount_in_cents = 9900
    subscription.retention_case_kind = "presale_charge_failed"
    at = OPENING + timedelta(hours=1)
    assert presales.presale_cases_pass(session, mailer, now=at) == {"opened": 1, "notified": 1}
    assert presales.presale_cases_pass(session, mailer, now=at) == {"opened": 0, "notified": 0}
    case = session.scalar(select(RetentionCase))
    assert (case.kind, case.episode) == ("presale_charge_failed", OPENING.isoformat())
    [email] = read_mailbox(mailbox)
    assert email["To"] == gym.owner.email
    assert "99.00 ILS" in email.get_content()
    # Paid, then declined again later: a new episode, a new case.
    subscription.debt_since = OPENING + timedelta(days=30)
    later = OPENING + timedelta(days=30, hours=1)
    assert presales.presale_cases_pass(session, mailer, now=later)["opened"] == 1
