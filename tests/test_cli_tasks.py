"""`gymctl tasks list ORG | done ORG TASK` on the demo gym, both engines (s55): the staff's
tasks at a terminal, the same functions as the HTTP door (tests/access/test_tasks_door.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy.orm import Session

from gymctl.db import get_engine
from gymctl.models import Organization
from gymctl.tasks import file_task
from tests.conftest import NOW
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)

OPERATOR = ("--operator", "user_demo_owner")


@pytest.fixture
def demo(home_env, committed_database):  # noqa: F811
    home_env["GYMCTL_DATABASE_URL"] = committed_database
    gymctl(home_env, "quickstart", "--json")
    with Session(get_engine(committed_database)) as session:
        gym = session.query(Organization).filter_by(slug="demo-gym").one()
        ids = {
            kind: str(
                file_task(
                    session, organization_id=gym.id, kind=kind, subject_type="subscription",
                    subject_id=kind, title=f"a {kind} task", priority=priority, due_at=NOW,
                    now=NOW,
                ).id
            )
            for kind, priority in (("manual_refund", "high"), ("payment_follow_up", "urgent"))
        }  # fmt: skip
        session.commit()
    return home_env, ids


def test_an_operator_lists_the_tasks_and_marks_one_done(demo):
    env, ids = demo
    listed = json.loads(gymctl(env, "tasks", "list", "demo-gym", "--json").stdout)
    assert [task["id"] for task in listed] == [ids["payment_follow_up"], ids["manual_refund"]]

    done = gymctl(env, "tasks", "done", "demo-gym", ids["payment_follow_up"], *OPERATOR, "--json")
    assert (json.loads(done.stdout)["status"], json.loads(done.stdout)["replayed"]) == (
        "done",
        False,
    )
    again = gymctl(env, "tasks", "done", "demo-gym", ids["payment_follow_up"], *OPERATOR, "--json")
    assert json.loads(again.stdout)["replayed"] is True
    listed = json.loads(gymctl(env, "tasks", "list", "demo-gym", "--json").stdout)
    assert [task["id"] for task in listed] == [ids["manual_refund"]]


def test_refusals_exit_1_with_their_code(demo):
    env, ids = demo
    for task, code in (
        (ids["manual_refund"], "task_closes_itself"),
        (str(uuid.uuid4()), "task_not_found"),
    ):
        refused = gymctl(env, "tasks", "done", "demo-gym", task, *OPERATOR, "--json", check=False)
        assert refused.returncode == 1, refused.stderr
        assert json.loads(refused.stdout)["code"] == code
    listed = json.loads(gymctl(env, "tasks", "list", "demo-gym", "--json").stdout)
    assert len(listed) == 2  # nothing changed
