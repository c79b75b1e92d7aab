"""The owners' door to the bridge (spec B 4.6 leaves it "not shown"): the connection, the
issues inbox (parked sync ops), retry and dismiss. Owner only: the connection holds the gym's
credentials at the external system, like the payment integration."""

from __future__ import annotations

import uuid
from datetime import date

from flask import Blueprint, jsonify, request
from pydantic import Field

from gymctl.bridge import classes, connection, cutover, inbound, inbox, queue
from gymctl.errors import invalid, not_found
from gymctl.ids import MAX_ROW_ID
from gymctl.models.bridge import ConnectionStatus, OpStatus
from gymctl.numerals import whole_number
from webhooks import codes
from webhooks.access import membership, owner_route
from webhooks.context import db, now, services
from webhooks.validation import HEADER_TOKEN_PATTERN, Body, parse

bp = Blueprint("bridge", __name__, url_prefix="/organizations/<uuid:org_id>/bridge")
INBOX_PAGE = 50


class Connect(Body):
    api_key: str = Field(
        alias="apiKey", max_length=connection.MAX_KEY_CHARS, pattern=HEADER_TOKEN_PATTERN
    )
    bridge_membership_type_id: str | None = Field(
        None, alias="bridgeMembershipTypeId", min_length=1, max_length=64
    )
    switch_account: bool = Field(False, alias="switchAccount", strict=True)


@bp.get("")
@owner_route
def overview(org_id):
    return jsonify(
        connection=connection.describe(connection.find_connection(db(), org_id)),
        queue=queue.depth(db(), org_id, now=now()),
    )


@bp.put("/connection")
@owner_route
def connect(org_id):
    body = parse(Connect)
    row = connection.connect(
        db(),
        org_id,
        body.api_key,
        settings=services().settings,
        now=now(),
        actor_user_id=membership().user_id,
        membership_type_id=body.bridge_membership_type_id,
        switch_account=body.switch_account,
    )
    status = 202 if row.status is ConnectionStatus.pending else 200
    return jsonify(connection=connection.describe(row)), status


@bp.delete("/connection")
@owner_route
def disconnect(org_id):
    row = connection.disconnect(db(), org_id, now=now(), actor_user_id=membership().user_id)
    return jsonify(connection=connection.describe(row))


@bp.get("/issues")
@owner_route
def issues(org_id):
    cursor = request.args.get("cursor")
    after = None if cursor is None else whole_number(cursor)
    if cursor is not None and after is None:
        raise invalid(codes.CURSOR_INVALID, "cursor is the last op id of the previous page")
    if after is not None:
        after = min(after, MAX_ROW_ID)
    parked = queue.list_ops(
        db(), org_id, status=OpStatus.parked, limit=INBOX_PAGE + 1, after_id=after
    )
    page = parked[:INBOX_PAGE]
    return jsonify(
        connection=connection.describe(connection.find_connection(db(), org_id)),
        issues=[inbox.describe(db(), op) for op in page],
        nextCursor=str(page[-1].id) if len(parked) > INBOX_PAGE else None,
        external=[inbound.describe(issue) for issue in inbound.open_issues(db(), org_id)],
    )


@bp.post("/external-issues/<uuid:issue_id>/dismiss")
@owner_route
def dismiss_external(org_id, issue_id):
    issue = inbound.dismiss_issue(
        db(), org_id, issue_id, now=now(), actor_user_id=membership().user_id
    )
    return jsonify(issue=inbound.describe(issue))


def _op_id(text: str) -> int:
    """Op ids are positive integers; anything else names no op."""
    op_id = whole_number(text)
    if op_id is None or op_id > MAX_ROW_ID:
        raise not_found(codes.BRIDGE_OP_NOT_FOUND, "no such sync op")
    return op_id


@bp.post("/issues/<op_id>/retry")
@owner_route
def retry(org_id, op_id):
    op, queued = queue.retry(
        db(), _op_id(op_id), now=now(), organization_id=org_id, actor_user_id=membership().user_id
    )
    return jsonify(op=queue.describe(op), alreadyQueued=queued)


class Cutover(Body):
    class_type_id: uuid.UUID = Field(alias="classTypeId")
    weekday: int = Field(ge=0, le=6)
    start_time: str = Field(alias="startTime", min_length=5, max_length=5)
    cutover_on: date = Field(alias="cutoverOn")


@bp.get("/cutovers")
@owner_route
def cutovers(org_id):
    return jsonify(cutovers=[cutover.describe(row) for row in cutover.list_cutovers(db(), org_id)])


@bp.put("/cutovers")
@owner_route
def set_cutover(org_id):
    """A recurring series (class type, weekday, local start time) moves its source of truth
    to the platform from `cutoverOn`."""
    body = parse(Cutover)
    row = cutover.set_cutover(
        db(), org_id, body.class_type_id, body.weekday, body.start_time, body.cutover_on,
        now=now(), actor_user_id=membership().user_id,
    )  # fmt: skip
    return jsonify(cutover=cutover.describe(row))


class LinkCandidate(Body):
    external_id: str = Field(alias="externalId", min_length=1, max_length=128)


@bp.post("/issues/<op_id>/link")
@owner_route
def link_candidate(org_id, op_id):
    """identity_conflict or class_unmatched: the owner picks one of the candidates."""
    body = parse(LinkCandidate)
    op = inbox.link(
        db(), org_id, _op_id(op_id), body.external_id, now=now(),
        actor_user_id=membership().user_id,
    )  # fmt: skip
    return jsonify(op=queue.describe(op))


class LinkClass(Body):
    external_class_id: str = Field(alias="externalClassId", min_length=1, max_length=128)


@bp.post("/classes/<uuid:session_id>/link")
@owner_route
def link_class(org_id, session_id):
    """An unmatched class: the owner picks its external class (a candidate the inbox names);
    the parked bookings of the session are sent again."""
    body = parse(LinkClass)
    linked = classes.link_class(
        db(),
        org_id,
        session_id,
        body.external_class_id,
        now=now(),
        actor_user_id=membership().user_id,
    )
    return jsonify(linked)


@bp.post("/issues/<op_id>/dismiss")
@owner_route
def dismiss(org_id, op_id):
    op = queue.dismiss(
        db(), _op_id(op_id), now=now(), organization_id=org_id, actor_user_id=membership().user_id
    )
    return jsonify(op=queue.describe(op))
