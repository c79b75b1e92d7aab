"""Legal consent (spec A 4): status per required type, and recording a consent."""

from __future__ import annotations

import uuid

from flask import Blueprint, jsonify, request

from gymctl.access import legal
from webhooks.access import signed_in_user
from webhooks.context import client_ip, db, now
from webhooks.validation import Body, parse

bp = Blueprint("legal", __name__, url_prefix="/legal")


@bp.get("/consents/status")
def status():
    return jsonify(consents=legal.consent_status(db(), signed_in_user(), now=now()))


class ConsentRequest(Body):
    documentId: uuid.UUID


@bp.post("/consents")
def record():
    body = parse(ConsentRequest)
    consent = legal.record_consent(
        db(),
        signed_in_user(),
        body.documentId,
        ip=client_ip(),
        user_agent=request.user_agent.string,
        now=now(),
    )
    return jsonify(
        documentId=str(consent.document_id), acceptedAt=consent.accepted_at.isoformat()
    ), 201
