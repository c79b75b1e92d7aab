"""Platform-admin routes (spec A 4, 5.2, 5.3): the ownership trail, Mark email verified, owner
grants for new gyms, and removing a gym's owner. Each calls the same domain functions as the CLI."""

from __future__ import annotations

from flask import Blueprint, jsonify

from gymctl.access import invitations, memberships, ownership, trail
from gymctl.models import Role
from webhooks.access import platform_admin_route, signed_in_user
from webhooks.context import db, now, services
from webhooks.validation import Body, Email, parse

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
