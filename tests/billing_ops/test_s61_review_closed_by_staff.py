"""A settled payment's open effects close when staff mark its follow-up task done (s60
noticed: nothing closed them, so every side-effect recovery pass counted such a payment for
good, and its dry run listed it).

Spec B 8 runs "side-effect recovery every 5 minutes" over settled payments whose effects were
left open: a settlement review filed an urgent payment follow-up for staff (spec B 2.3's
tasks). What the review asked (a period to grant by hand, one of two payments to refund) is
done by a person, who marks the task done (POST .../tasks/:taskId/done): the payment is then
closed for the pass. Filed again (a new question on the same payment), it is counted again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.billing import attempts
from gymctl.billing.collector import side_effect_recovery
from gymctl.billing.dry_runs import side_effects
from gymctl.models import Role, Task
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.conftest import NOW
from tests.retention.test_s59_side_effects_pending_alerted_once import PASS, review_waiting

pytestmark = pytest.mark.embedded  # the demo gym's members pay by card; its staff read tasks


def _follow_up(session, subscription, transaction, reason: str) -> str:
    attempts.follow_up(
        session, transaction, subscription, reason=reason, title=f"review ({reason})", now=NOW
    )
    session.commit()
    return str(
        session.scalar(
            select(Task.id).where(
                Task.kind == attempts.FOLLOW_UP, Task.subject_id == str(transaction.id)
            )
        )
    )


def test_staff_marking_the_follow_up_done_close_the_payments_open_effects(
    client,
    session,
    session_factory,
    gym,  # noqa: F811
):
    subscription, transaction = review_waiting(session, gym)
    task = _follow_up(session, subscription, transaction, "debt_changed")
    _, other = review_waiting(session, gym)  # another payment, still waiting
    first = side_effect_recovery(session_factory, now=NOW)
    assert (first.selected, len(first.alerts)) == (2, 2)

    done = client.post(
        f"/organizations/{gym.id}/tasks/{task}/done", headers=gym[Role.owner].headers
    )
    assert done.status_code == 200, done.json

    later = side_effect_recovery(session_factory, now=NOW + PASS)
    assert (later.selected, later.alerts) == (1, [])  # the other one only, told already
    assert side_effects(session, NOW + PASS) == {"wouldAlert": [str(other.id)]}

    _follow_up(session, subscription, transaction, "paid_twice")  # a new question: open again
    again = side_effect_recovery(session_factory, now=NOW + 2 * PASS)
    assert again.selected == 2
    wanted = {str(transaction.id), str(other.id)}
    assert set(side_effects(session, NOW + 2 * PASS)["wouldAlert"]) == wanted
