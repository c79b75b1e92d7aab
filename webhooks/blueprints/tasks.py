"""The staff's tasks (spec B 2.3): the open ones, the most pressing first, and marking one done.

Billing, retention and joins file tasks (a failed join checkout's urgent follow-up, a refund
owed after a cancellation, a cancellation to review); these are the staff's door to them."""

from __future__ import annotations

import uuid

from flask import Blueprint, jsonify

from gymctl import tasks
from gymctl.access.permissions import Action, Module
from webhooks.access import membership, org_route
from webhooks.context import db, now

bp = Blueprint("tasks", __name__)
ORG = "/organizations/<uuid:org_id>"


@bp.get(f"{ORG}/tasks")
@org_route(Module.member_billing, Action.view)
def list_tasks(org_id: uuid.UUID):
    return jsonify(data=[tasks.task_json(task) for task in tasks.open_tasks(db(), org_id)])


@bp.post(f"{ORG}/tasks/<uuid:task_id>/done")
@org_route(Module.member_billing, Action.manage)
def mark_done(org_id: uuid.UUID, task_id: uuid.UUID):
    """Done already: answered again (replayed true), nothing written."""
    task, replayed = tasks.mark_done(
        db(), org_id, task_id, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(data={**tasks.task_json(task), "replayed": replayed})
