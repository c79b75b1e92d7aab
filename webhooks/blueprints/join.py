"""Join links, public side (spec A 4): the link, the join form, a failed checkout, and joining
signed in."""

from __future__ import annotations

from typing import Annotated

from flask import Blueprint, jsonify, request
from pydantic import Field, WithJsonSchema

from gymctl.access import join
from webhooks.access import signed_in_user
from webhooks.context import client_ip, db, now, services
from webhooks.guard import public
from webhooks.validation import EMAIL_PATTERN, WHITESPACE, Body, Email, parse

bp = Blueprint("join", __name__, url_prefix="/join")


@bp.get("/<token>")
@public
def show(token):
    link, organization = join.eligible_link(db(), token)
    return jsonify(join.public_view(link, organization))


class RequestInvite(Body):
    email: Email


@bp.post("/<token>/request-invite")
@public
def request_invite(token):
    body = parse(RequestInvite)
    join.count_request_invite(db(), token, now=now())
    db().commit()  # counted: the counters' rows are not locked through the provider's lookup
    answer = join.request_invite(
        db(),
        services().outreach,
        token,
        email=body.email,
        ip=client_ip(),
        user_agent=request.user_agent.string,
        now=now(),
    )
    return jsonify(answer), 201


# An address as normalize_email reads one (422 email_invalid otherwise), or a blank one, which is
# recorded as no address: the document says so (the check stays the domain's).
OptionalEmail = Annotated[
    str,
    Field(max_length=320),
    WithJsonSchema(
        {"type": "string", "maxLength": 320, "pattern": rf"^[{WHITESPACE}]*$|{EMAIL_PATTERN}"}
    ),
]


class CheckoutFailed(Body):
    email: OptionalEmail | None = Field(None, description="blank or null: no address")
    reason: str | None = Field(None, max_length=500)


@bp.post("/<token>/checkout-failed")
@public
def checkout_failed(token):
    body = parse(CheckoutFailed)
    task = join.checkout_failed(
        db(),
        token,
        email=body.email,
        reason=body.reason,
        ip=client_ip(),
        user_agent=request.user_agent.string,
        now=now(),
    )
    return jsonify(recorded=True, taskId=str(task.id)), 202


@bp.post("/<token>/join")
def join_signed_in(token):
    membership, joined = join.join_signed_in(
        db(),
        token,
        signed_in_user(),
        ip=client_ip(),
        user_agent=request.user_agent.string,
        now=now(),
    )
    return jsonify(
        organizationId=str(membership.organization_id),
        role=membership.role.value,
        status=membership.status.value,
        joined=joined,
    ), 201 if joined else 200
