"""Accepting an invitation in the app (an existing account, signed in)."""

from __future__ import annotations

from flask import Blueprint, jsonify
from pydantic import Field

from gymctl.access import invitations
from webhooks.access import signed_in_user
from webhooks.context import db, now, services
from webhooks.validation import Body, parse

bp = Blueprint("invitations", __name__, url_prefix="/invitations")


class AcceptRequest(Body):
    token: str = Field(min_length=1, max_length=4096)


@bp.post("/accept")
def accept():
    body = parse(AcceptRequest)
    invitation = invitations.accept_invitation(
        db(), services().settings, signed_in_user(), body.token, now=now()
    )
    return jsonify(invitations.describe(invitation))
