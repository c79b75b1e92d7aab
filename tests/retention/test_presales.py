"""Presale withdrawal and presale charge-failure cases (spec B 3, 6): the case owner is
emailed, falling back to the organization's active owner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

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


def test_a_member_withdraws_a_presale_the_owner_is_emailed(
    session, session_factory, gym, mailer, mailbox
):
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
    session.commit()
    assert presales.notify_pending(session_factory, mailer, now=NOW) == 0  # sent once


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


def test_each_case_is_emailed_in_a_transaction_of_its_own(
    session, session_factory, gym, mailer, mailbox
):
    """The pass held every case it was emailing locked (and, on the embedded default, the
    database's write lock) until its last email: at a presale's opening day, with hundreds of
    declines, staff acknowledging a case waited for all of them. Each email now commits before
    the next is sent."""
    plan = make_plan(session, gym.organization, name="Founders")
    for _ in range(2):
        membership = factories.membership(
            session, user=factories.user(session), organization=gym.organization
        )
        subscription = make_subscription(
            session, gym, plan=plan, membership=membership, presale_opening=OPENING
        )
        subscription.status = SubscriptionStatus.debt
        subscription.debt_since = OPENING
        subscription.retention_case_kind = "presale_charge_failed"
    session.commit()
    steps: list[str] = []
    real_send = type(mailer).send

    def send(self, email):
        steps.append("mail")
        return real_send(self, email)

    def committed(_session):
        steps.append("commit")

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(type(mailer), "send", send)
    event.listen(Session, "after_commit", committed)
    try:
        done = presales.presale_cases_pass(
            session_factory, mailer, now=OPENING + timedelta(hours=1)
        )
    finally:
        event.remove(Session, "after_commit", committed)
        monkeypatch.undo()
    assert done == {"opened": 2, "notified": 2}
    assert steps == ["commit", "mail", "commit", "mail", "commit"]  # the cases opened, then each
    assert len(read_mailbox(mailbox)) == 2


def test_a_declined_presale_gets_one_case_per_episode_and_the_owner_is_emailed(
    session, session_factory, gym, mailer, mailbox
):
    subscription = _presale(session, gym)
    subscription.status = SubscriptionStatus.debt  # as the collector's decline leaves it
    subscription.debt_since = OPENING
    subscription.debt_amount_in_cents = 9900
    subscription.retention_case_kind = "presale_charge_failed"
    at = OPENING + timedelta(hours=1)
    session.commit()
    passes = (presales.presale_cases_pass(session_factory, mailer, now=at) for _ in range(2))
    assert list(passes) == [{"opened": 1, "notified": 1}, {"opened": 0, "notified": 0}]
    case = session.scalar(select(RetentionCase))
    assert (case.kind, case.episode) == ("presale_charge_failed", OPENING.isoformat())
    [email] = read_mailbox(mailbox)
    assert email["To"] == gym.owner.email
    assert "99.00 ILS" in email.get_content()
    # Paid, then declined again later: a new episode, a new case.
    subscription.debt_since = OPENING + timedelta(days=30)
    later = OPENING + timedelta(days=30, hours=1)
    session.commit()
    assert presales.presale_cases_pass(session_factory, mailer, now=later)["opened"] == 1


def test_a_decline_committed_after_the_pass_began_opens_one_case_not_one_a_pass(
    session, session_factory, gym, mailer, mailbox
):
    """A pass's `now` is its tick; a collector pass stamps a charge with when it began, which
    can be later (a daily sweep minutes in). The case opened for it is never dated before its
    episode: dated at the tick, the next pass did not see it and opened the episode again
    (the episode key refused that: the pass failed every five minutes)."""
    subscription = _presale(session, gym)
    subscription.status = SubscriptionStatus.debt
    subscription.debt_since = OPENING + timedelta(minutes=7)  # declined seven minutes in
    subscription.debt_amount_in_cents = 9900
    subscription.retention_case_kind = "presale_charge_failed"
    session.commit()
    passes = [
        presales.presale_cases_pass(session_factory, mailer, now=OPENING + timedelta(minutes=m))
        for m in (5, 10)
    ]
    assert passes == [{"opened": 1, "notified": 1}, {"opened": 0, "notified": 0}]
    (case,) = session.scalars(select(RetentionCase)).all()
    assert case.opened_at == subscription.debt_since
