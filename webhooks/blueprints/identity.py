"""POST /webhooks/identity: the provider's user events, signature-checked on the raw body."""

from __future__ import annotations

import logging

import sentry_sdk
from flask import Blueprint, jsonify, request

from gymctl.access.identity_events import apply_identity_event
from gymctl.errors import DomainError, unavailable
from gymctl.identity import webhook_signature
from webhooks import codes
from webhooks.bodies import WEBHOOK_BODY_BYTES, body_limit, read_json
from webhooks.context import db, now, services
from webhooks.guard import public

bp = Blueprint("identity_webhook", __name__)
log = logging.getLogger("gymctl.identity")


@bp.post("/webhooks/identity")
@public
@body_limit(WEBHOOK_BODY_BYTES)
def identity_webhook():
    secret = services().settings.identity_webhook_secret
    if secret is None:
        raise unavailable(codes.WEBHOOK_NOT_CONFIGURED, "IDENTITY_WEBHOOK_SECRET is unset")
    try:
        webhook_signature.decode_secret(secret.get_secret_value())
    except ValueError:
        # A setting that cannot sign anything is not configured: 503 (the provider retries
        # once it is fixed), not a ValueError from inside the check on every delivery (a 500).
        log.error("IDENTITY_WEBHOOK_SECRET is not whsec_ followed by base64")
        raise unavailable(
            codes.WEBHOOK_NOT_CONFIGURED, "IDENTITY_WEBHOOK_SECRET is not whsec_ + base64"
        ) from None
    body = request.get_data(cache=False)
    try:
        delivery = webhook_signature.verify(
            secret.get_secret_value(), request.headers, body, now=now()
        )
        event = read_json(body, code=codes.WEBHOOK_PAYLOAD_INVALID, every_text=False)
        outcome = apply_identity_event(
            db(), delivery.id, event, now=now(), settings=services().settings
        )
    except DomainError as error:
        # Spec A 6.1: failures appear as breadcrumbs and warn/error logs.
        log.warning("identity webhook refused: %s", error.code)
        sentry_sdk.add_breadcrumb(category="identity.webhook", message=error.code, level="warning")
        raise
    sentry_sdk.add_breadcrumb(
        category="identity.webhook",
        message=outcome,
        data={"id": delivery.id, "type": event["type"]},
    )
    return jsonify(received=True, id=delivery.id, outcome=outcome)
