"""A retention case takes one outcome (spec B 2.1: retention_outcome; docs/decisions.md
"Outcomes"): two staff recording an outcome at once leave the first one recorded and refuse the
second (409 retention_case_closed), and a staff outcome read on a case whose notice the member
has meanwhile withdrawn and given again never withdraws the new notice.

The case was read without its row lock, so on PostgreSQL the second request waited only at its
write, then overwrote the first one's outcome (two retention.outcome_recorded audits, the case
saying lost_contacted after staff recorded saved_offer)."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select, text
from sqlalchemy.orm import sessionmaker

from gymctl.billing.attempts import lock_subscription
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import AuditLog, RetentionCase, Subscription
from gymctl.models.retention import RetentionOutcome
from gymctl.retention import cases, notices, presales
from gymctl.retention.settlement import settle_one
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.conftest import NOW, wait_for_a_lock_wait

D = timedelta(days=1)


def _record(factory, gym, case_id, outcome, results):
    try:
        with factory() as session:
            cases.record_outcome(
                session,
                gym.organization.id,
                case_id,
                outcome=outcome,
                actor_user_id=gym.owner.id,
                locale="en",
                now=NOW,
            )
            session.commit()
            results.append("recorded")
    except DomainError as error:
        results.append(error.code)


def test_two_outcomes_recorded_at_once_on_a_presale_case_keep_the_first(committed_pg):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        plan = bf.make_plan(session, gym.organization, name="Founders", purchases_count=1)
        presale = bf.make_subscription(session, gym, plan=plan, presale_opening=NOW + 14 * D)
        _, case = presales.withdraw_presale(
            session,
            gym.organization.id,
            presale.id,
            actor_user_id=gym.member.id,
            by_member=True,
            locale="en",
            now=NOW,
        )
        session.commit()
    results: list[str] = []
    with factory() as first:
        cases.record_outcome(
            first,
            gym.organization.id,
            case.id,
            outcome=RetentionOutcome.saved_offer,
            actor_user_id=gym.owner.id,
            locale="en",
            now=NOW,
        )
        first.flush()
        second = threading.Thread(
            target=_record,
            args=(factory, gym, case.id, RetentionOutcome.lost_contacted, results),
        )
        second.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        first.commit()
    second.join()

    assert results == ["retention_case_closed"]
    with factory() as session:
        assert session.get(RetentionCase, case.id).outcome == "saved_offer"
        assert (
            session.scalar(
                select(func.count())
                .select_from(AuditLog)
                .where(AuditLog.action == "retention.outcome_recorded")
            )
            == 1
        )


def test_an_outcome_read_before_the_member_withdrew_and_gave_notice_again_leaves_it(
    committed_pg,
):
    """Staff record saved_offer on the member's notice case while the member, at that moment,
    withdraws it and gives notice again (one transaction holding the subscription): the old
    case is closed by then, so the outcome is refused and the member's new notice stands (it
    withdrew the new notice, recording staff's saved_offer against the member's fresh one)."""
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    member = {"initiator": "member", "locale": "en"}
    with factory() as session:
        gym = bf.make_gym(session)
        subscription = bf.make_subscription(session, gym, current_period_end=NOW + 20 * D)
        _, old_case = notices.give_notice(
            session,
            gym.organization.id,
            subscription.id,
            actor_user_id=gym.member.id,
            now=NOW,
            **member,
        )
        session.commit()
    results: list[str] = []
    with factory() as app:  # the member's requests, one after the other on the same row
        notices.withdraw_notice(
            app,
            gym.organization.id,
            subscription.id,
            actor_user_id=gym.member.id,
            by_member=True,
            locale="en",
            now=NOW + D,
        )
        _, new_case = notices.give_notice(
            app,
            gym.organization.id,
            subscription.id,
            actor_user_id=gym.member.id,
            now=NOW + D,
            **member,
        )
        app.flush()
        staff = threading.Thread(
            target=_record,
            args=(factory, gym, old_case.id, RetentionOutcome.saved_offer, results),
        )
        staff.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        app.commit()
    staff.join()

    assert results == ["retention_case_closed"]
    with factory() as session:
        assert session.get(Subscription, subscription.id).cancel_at_period_end is True
        assert session.get(RetentionCase, new_case.id).status == "open"
        assert session.get(RetentionCase, old_case.id).outcome == "saved_member_withdrew"


def test_a_saved_outcome_waits_behind_a_settlement_without_holding_its_case(committed_pg, doors):
    """Locks in the fixed order (spec B 4.1: organization, membership, subscription; the case
    after them, as the notice's own writers take it): a staff outcome on a notice case waits
    behind the period-end settlement of its subscription holding nothing the settlement needs
    (the case it closes), and is then refused, the plan having ended."""
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        subscription = bf.make_subscription(session, gym, current_period_end=NOW + 20 * D)
        _, case = notices.give_notice(
            session,
            gym.organization.id,
            subscription.id,
            initiator="member",
            actor_user_id=gym.member.id,
            locale="en",
            now=NOW,
        )
        session.commit()
    results: list[str] = []
    at = subscription.current_period_end
    with factory() as sweep:
        locked = lock_subscription(sweep, subscription.id)
        staff = threading.Thread(
            target=_record, args=(factory, gym, case.id, RetentionOutcome.saved_offer, results)
        )
        staff.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        sweep.execute(text("SET LOCAL lock_timeout = '2s'"))  # a deadlock would stop here
        settle_one(sweep, locked, doors, now=at)
        sweep.commit()
    staff.join()
    assert results in (["retention_case_closed"], ["notice_not_given"])
    with factory() as session:
        assert session.get(RetentionCase, case.id).outcome == "lost_no_contact"
