"""GET /users/me."""

from __future__ import annotations

import uuid

from flask import Blueprint, jsonify, request

from gymctl.errors import invalid
from gymctl.identity.me import current_user
from gymctl.versioning import payload_schema
from webhooks import codes
from webhooks.context import auth, db, now, services
from webhooks.validation import uuid_text

bp = Blueprint("users", __name__)


def _organization_id() -> uuid.UUID | None:
    value = request.args.get("organizationId")
    if value is None:
        return None
    found = uuid_text(value)
    if found is None:
        raise invalid(codes.ORGANIZATION_ID_INVALID, "organizationId must be a UUID")
    return found


@bp.get("/users/me")
def me():
    schema = payload_schema(request.args.get("brandingSchema"), parameter="brandingSchema")
    body = current_user(
        db(),
        auth(),
        now=now(),
        identity_admin=services().identity_admin,
        settings=services().settings,
        organization_id=_organization_id(),
        branding_schema=schema,
    )
    return jsonify(body)
