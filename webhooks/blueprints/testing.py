"""Operator test hooks (spec B 4.4, 5): run a retention or cancellation sweep now.

Registered only outside production (in production the paths do not exist: 404 whatever the
header), and answered only with the header x-test-seed-secret equal to TEST_SEED_SECRET. A
deployment without the secret configured has the hooks switched off (404 too).
"""

from __future__ import annotations

import hmac

from flask import Blueprint, jsonify, request

from gymctl.errors import forbidden, not_found
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.digest import send_digests
from gymctl.retention.escalation import escalate
from gymctl.retention.refund_tasks import bump_overdue_refund_tasks
from gymctl.retention.settlement import Doors, period_end_sweep
from webhooks import codes
from webhooks.context import db, handover, now, services
from webhooks.guard import public

bp = Blueprint("testing", __name__, url_prefix="/testing")
SEED_HEADER = "x-test-seed-secret"


@bp.before_request
def _seed_secret() -> None:
    configured = services().settings.test_seed_secret
    if configured is None or not configured.get_secret_value():
        raise not_found(codes.NOT_FOUND, "no such route")
    given = request.headers.get(SEED_HEADER, "")
    if not hmac.compare_digest(given.encode(), configured.get_secret_value().encode()):
        raise forbidden(codes.TEST_SEED_SECRET_INVALID, f"{SEED_HEADER} does not match")


@bp.post("/trigger-retention-escalation")
@public
def trigger_retention_escalation():
    return jsonify(escalate(db(), now=now()))


@bp.post("/trigger-retention-digest")
@public
def trigger_retention_digest():
    return jsonify(send_digests(handover(), services().mailer, now=now()))


@bp.post("/trigger-cancellation-sweep")
@public
def trigger_cancellation_sweep():
    svc = services()
    doors = Doors(
        provider=svc.card_provider,
        cipher=svc.billing_cipher,
        documents=LocalDocumentProvider(),
        mailer=svc.mailer,
    )
    result = period_end_sweep(handover(), doors, now=now())
    return jsonify(cancelled=result.cancelled)


@bp.post("/trigger-refund-task-sweep")
@public
def trigger_refund_task_sweep():
    return jsonify(bump_overdue_refund_tasks(db(), now=now()))
