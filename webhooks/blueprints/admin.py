"""Platform-admin routes (spec A 4, 5.2, 5.3): the ownership trail, Mark email verified, owner
grants for new gyms, removing a gym's owner, appointing one for a gym that has none, a gym's
tier, and publishing legal documents. Each calls the same domain functions as the CLI."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from flask import Blueprint, jsonify
from pydantic import Field

from gymctl.access import (
    invitations,
    legal,
    memberships,
    owner_appointment,
    ownership,
    tiers,
    trail,
)
from gymctl.models import LegalDocumentType, Role
from gymctl.models.organizations import Tier
from webhooks.access import platform_admin_route, signed_in_user
from webhooks.context import db, now, services
from webhooks.validation import Body, Email, explicit_utc, one_of, parse

bp = Blueprint("admin", __name__, url_prefix="/admin")


@bp.get("/users/<ref>/ownership-trail")
@platform_admin_route
def ownership_trail(ref):
    return jsonify(trail.ownership_trail(db(), trail.resolve_user(db(), ref)))


@bp.post("/users/<ref>/mark-email-verified")
@platform_admin_route
def mark_email_verified(ref):
    """Ownership was confirmed out of band; the person's next /users/me links or activates."""
    user = trail.resolve_user(db(), ref)
    operator = signed_in_user()
    changed = ownership.mark_email_verified(
        db(), user, actor_user_id=operator.id, actor=str(operator.id), now=now()
    )
    return jsonify(userId=str(user.id), verified=True, changed=changed)


class OwnerGrantRequest(Body):
    email: Email


@bp.post("/owner-grants")
@platform_admin_route
def owner_grant():
    """The claimable right to create a gym, sent to a future owner."""
    body = parse(OwnerGrantRequest)
    grant = invitations.create_invitation(
        db(),
        services().outreach,
        organization=None,
        actor=None,
        actor_user_id=signed_in_user().id,
        email=body.email,
        role=Role.owner,
        now=now(),
    )
    return jsonify(invitations.describe(grant)), 201


@bp.delete("/organizations/<uuid:org_id>/members/<uuid:user_id>")
@platform_admin_route
def remove_member(org_id, user_id):
    """The one way to remove a gym's owner."""
    target = memberships.remove_member(
        db(),
        org_id,
        user_id,
        actor=None,
        actor_user_id=signed_in_user().id,
        platform_admin=True,
        now=now(),
    )
    return jsonify(userId=str(target.user_id), status=target.status.value)


class OwnerAppointment(Body):
    user_id: uuid.UUID = Field(alias="userId")


@bp.put("/organizations/<uuid:org_id>/owner")
@platform_admin_route
def appoint_owner(org_id):
    """The owner of a gym that has none (removed, or their login deleted): one of its active
    members. A gym with a live owner is 409 owner_exists (a transfer is the owner's own act)."""
    body = parse(OwnerAppointment)
    appointed = owner_appointment.appoint_owner(
        db(), org_id, body.user_id, actor_user_id=signed_in_user().id, now=now()
    )
    former = appointed.former_owner_user_id
    return jsonify(
        userId=str(appointed.membership.user_id),
        role=appointed.membership.role.value,
        changed=appointed.changed,
        formerOwnerUserId=str(former) if former else None,
    )


class TierRequest(Body):
    tier: Tier


@bp.put("/organizations/<uuid:org_id>/tier")
@platform_admin_route
def set_tier(org_id):
    """The gym's platform tier: it caps the active members an import may bring."""
    body = parse(TierRequest)
    change = tiers.set_tier(db(), org_id, body.tier, actor_user_id=signed_in_user().id, now=now())
    return jsonify(change.as_dict())


class LegalDocumentRequest(Body):
    type: Annotated[str, Field(max_length=32), one_of(LegalDocumentType)]
    version: str = Field(min_length=1, max_length=legal.VERSION_MAX)
    url: str = Field(min_length=1, max_length=legal.URL_MAX)
    locale: str = Field("en", min_length=1, max_length=legal.LOCALE_MAX)
    published_at: datetime | None = Field(None, alias="publishedAt")


@bp.post("/legal-documents")
@platform_admin_route
def publish_legal_document():
    """A new version of a legal document (rules: gymctl.access.legal.publish_document); from its
    publishedAt, members who consented only to older versions owe consent again."""
    body = parse(LegalDocumentRequest)
    operator = signed_in_user()
    document = legal.publish_document(
        db(),
        type=body.type,
        version=body.version,
        url=body.url,
        locale=body.locale,
        published_at=explicit_utc(body.published_at) if body.published_at else None,
        actor_user_id=operator.id,
        actor=str(operator.id),
        now=now(),
    )
    return jsonify(legal.describe(db(), document, now=now())), 201


@bp.get("/legal-documents")
@platform_admin_route
def legal_documents():
    """Every legal document, newest first, scheduled, current or superseded."""
    return jsonify(documents=legal.list_documents(db(), now=now()))
