"""The staff's tasks (spec B 2.3; a hunter's test of s55). Joins, billing and retention file
tasks for staff (spec A 4: a failed join checkout "files an urgent payment follow-up task"),
but no door read them: written, never seen. GET /organizations/:orgId/tasks lists the open
ones, the most pressing first; POST .../tasks/:taskId/done marks one done (audited)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.models import Role, Task
from gymctl.tasks import file_task
from tests.access.conftest import gym, outsider, snapshot  # noqa: F401 (fixtures)
from tests.access.test_join import make_link
from tests.billing_ops.helpers import audit_rows
from tests.conftest import NOW
from tests.factories import make_gym

pytestmark = pytest.mark.embedded  # the demo gym's staff read their tasks


def _tasks(client, gym, who) -> list[dict]:  # noqa: F811
    answer = client.get(f"/organizations/{gym.id}/tasks", headers=gym[who].headers)
    assert answer.status_code == 200, answer.json
    return answer.json["data"]


def _file(session, gym, kind, subject, priority, due):  # noqa: F811
    task = file_task(
        session, organization_id=gym.id, kind=kind, subject_type="subscription",
        subject_id=subject, title=f"{kind} {subject}", priority=priority, due_at=due, now=NOW,
    )  # fmt: skip
    session.commit()
    return str(task.id)


def test_a_failed_join_checkouts_task_reaches_the_staff_and_is_marked_done(
    client,
    session,
    gym,  # noqa: F811
):
    link = make_link(session, gym.organization)
    session.commit()
    failed = client.post(f"/join/{link.token}/checkout-failed", json={"email": "lost@x.test"})
    assert failed.status_code == 202, failed.json
    later = _file(session, gym, "general", "b", "high", NOW + timedelta(days=1))
    sooner = _file(session, gym, "general", "a", "high", NOW + timedelta(hours=1))

    listed = _tasks(client, gym, Role.admin)

    [follow_up, *rest] = listed
    assert (follow_up["kind"], follow_up["priority"], follow_up["status"]) == (
        "payment_follow_up",
        "urgent",
        "open",
    )
    assert [task["id"] for task in rest] == [sooner, later]  # urgent, then by due date
    url = f"/organizations/{gym.id}/tasks/{follow_up['id']}/done"
    done = client.post(url, headers=gym[Role.admin].headers)
    assert done.status_code == 200, done.json
    assert (done.json["data"]["status"], done.json["data"]["replayed"]) == ("done", False)
    assert [task["id"] for task in _tasks(client, gym, Role.owner)] == [sooner, later]
    [audit] = audit_rows(session, "task.done")
    assert (audit.actor_user_id, audit.data["because"]) == (gym[Role.admin].user.id, "staff")
    again = client.post(url, headers=gym[Role.owner].headers)
    assert (again.status_code, again.json["data"]["replayed"]) == (200, True)
    assert len(audit_rows(session, "task.done")) == 1  # done once


def test_refusals_change_nothing(client, session, gym):  # noqa: F811
    """A coach (no member billing), another gym's task, a task that is not a task's id, and a
    refund a settlement owes (done once the ledger records it, not by hand)."""
    refund = _file(session, gym, "manual_refund", "s", "high", NOW + timedelta(days=3))
    other = make_gym(session, name="Elsewhere")
    session.commit()
    theirs = _file(session, other, "general", "x", "high", None)
    before = snapshot(session)
    coach = gym[Role.coach].headers
    refused = [
        (client.get(f"/organizations/{gym.id}/tasks", headers=coach), 403, "permission_denied"),
        (client.post(f"/organizations/{gym.id}/tasks/{refund}/done", headers=coach), 403,
         "permission_denied"),
        (client.post(f"/organizations/{gym.id}/tasks/{theirs}/done",
                     headers=gym[Role.owner].headers), 404, "task_not_found"),
        (client.post(f"/organizations/{gym.id}/tasks/{refund}/done",
                     headers=gym[Role.owner].headers), 409, "task_closes_itself"),
    ]  # fmt: skip
    for answer, status, code in refused:
        assert (answer.status_code, answer.json["code"]) == (status, code)
    assert snapshot(session) == before
    assert session.get(Task, uuid.UUID(refund)).status == "open"
