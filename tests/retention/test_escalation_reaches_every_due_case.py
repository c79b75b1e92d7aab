"""The hourly escalation reaches every case that is due (spec B 8: "Retention SLA 48 h;
escalation stages: unacknowledged past SLA, and ending within 7 days with no contact"), however
many cases are open before it.

The pass is bounded (BATCH cases a run) and took the oldest open notice cases whether or not
they had anything left to escalate: a case escalated already, or acknowledged with its notice a
year away, stays open for months. Once BATCH such cases were open on the platform, a newer case
was never looked at: past its SLA, ending tomorrow, and never escalated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.retention import cases, escalation
from tests.billing.factories import make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice

D = timedelta(days=1)


def _case(session, gym, *, ends, at):
    subscription = make_subscription(session, gym, current_period_end=ends)
    return give_notice(session, gym, subscription, now=at)[1]


@pytest.mark.embedded
def test_a_due_case_escalates_behind_older_open_cases_with_nothing_left_to_escalate(session, gym):
    quiet = [_case(session, gym, ends=NOW + 300 * D, at=NOW - 10 * D) for _ in range(2)]
    for case in quiet:  # taken in hand: nothing to escalate for months
        cases.acknowledge(
            session, gym.organization.id, case.id, actor_user_id=gym.owner.id, now=NOW - 9 * D
        )
    due = _case(session, gym, ends=NOW + 2 * D, at=NOW - 3 * D)  # past its SLA, ending soon

    result = escalation.escalate(session, now=NOW, limit=2)

    assert result == {"checked": 3, "escalated": 2}
    assert (due.escalated_unacknowledged_at, due.escalated_ending_soon_at) == (NOW, NOW)
    assert escalation.escalate(session, now=NOW + timedelta(hours=1), limit=2) == {
        "checked": 3,
        "escalated": 0,
    }
