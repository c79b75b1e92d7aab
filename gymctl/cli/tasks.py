"""`gymctl tasks list ORG | done ORG TASK`: the staff's tasks of a gym, at a terminal (the same
functions as GET /organizations/:orgId/tasks and POST .../tasks/:taskId/done)."""

from __future__ import annotations

import uuid

import typer

from gymctl.cli.billing_common import OPERATOR, ORG
from gymctl.cli.output import JSON, print_json, render_rows

app = typer.Typer(no_args_is_help=True)


@app.command("list")
def list_command(organization: str = ORG, as_json: bool = JSON) -> None:
    """A gym's open tasks, the most pressing first (urgent, high, then the rest; by due date)."""
    from gymctl import tasks
    from gymctl.access.gyms import resolve_organization
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        rows = [tasks.task_json(task) for task in tasks.open_tasks(session, gym.id)]
    render_rows(
        rows, ["id", "priority", "kind", "dueAt", "title"], title="open tasks", as_json=as_json
    )


@app.command("done")
def done_command(
    organization: str = ORG,
    task: uuid.UUID = typer.Argument(..., help="The task's id (tasks list)."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Mark an open task done (audited, the operator as the actor). A refund a settlement owes
    is done once the ledger records it, not by hand."""
    from gymctl import clock, tasks
    from gymctl.access.gyms import resolve_organization
    from gymctl.cli.operators import operator_id
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        done, replayed = tasks.mark_done(
            session, gym.id, task, actor_user_id=operator_id(session, operator), now=clock.now()
        )
        answer = {**tasks.task_json(done), "replayed": replayed}
    if as_json:
        print_json(answer)
        return
    render_rows([answer], ["id", "kind", "status", "replayed"], title="task")
