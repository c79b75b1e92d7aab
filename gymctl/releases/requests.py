"""Release requests and the owner's submission intake (spec A 2.14, 9): nullable JSON with an
integer revision that starts at 0 and advances on every save. A save names the revision it was
made from, so two editors never overwrite each other silently; a new revision supersedes the
current candidate."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import conflict, invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models.releases import ReleaseRequest
from gymctl.releases import codes
from gymctl.releases.branded_apps import require_app

# What an owner tells the stores about the app; field -> longest accepted text.
SUBMISSION_FIELDS = {
    "appName": 30,
    "subtitle": 30,
    "description": 4000,
    "keywords": 100,
    "category": 40,
    "supportUrl": 500,
    "privacyPolicyUrl": 500,
    "marketingUrl": 500,
    "contactEmail": 320,
}
URL_FIELDS = ("supportUrl", "privacyPolicyUrl", "marketingUrl")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def find_request(session: Session, organization_id: uuid.UUID) -> ReleaseRequest | None:
    return session.scalar(
        select(ReleaseRequest).where(ReleaseRequest.organization_id == organization_id)
    )


def require_request(session: Session, organization_id: uuid.UUID) -> ReleaseRequest:
    request = find_request(session, organization_id)
    if request is None:
        raise not_found(codes.RELEASE_REQUEST_NOT_FOUND, "no release has been requested")
    return request


def open_request(session: Session, organization_id: uuid.UUID, *, now: datetime) -> ReleaseRequest:
    """The gym's release request (created once, for its dedicated app)."""
    app = require_app(session, organization_id)
    request = find_request(session, organization_id)
    if request is None:
        request = ReleaseRequest(
            organization_id=organization_id,
            branded_app_id=app.id,
            submission=None,
            submission_revision=0,
            created_at=now,
            updated_at=now,
        )
        session.add(request)
        session.flush()
    return request


def validate_submission(submission: dict[str, Any] | None) -> dict[str, Any] | None:
    if submission is None:
        return None
    if not isinstance(submission, dict):
        raise invalid(codes.RELEASE_SUBMISSION_INVALID, "the submission is an object or null")
    for name, value in submission.items():
        limit = SUBMISSION_FIELDS.get(name)
        if limit is None:
            raise invalid(codes.RELEASE_SUBMISSION_INVALID, f"unknown field {name}", field=name)
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise invalid(
                codes.RELEASE_SUBMISSION_INVALID, f"{name}: 1 to {limit} characters", field=name
            )
        if name in URL_FIELDS and not value.startswith("https://"):
            raise invalid(codes.RELEASE_SUBMISSION_INVALID, f"{name} must be https", field=name)
        if name == "contactEmail" and not EMAIL.fullmatch(value):
            raise invalid(codes.RELEASE_SUBMISSION_INVALID, "contactEmail", field=name)
    return dict(submission)


def save_submission(
    session: Session,
    organization_id: uuid.UUID,
    submission: dict[str, Any] | None,
    *,
    revision: int,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> ReleaseRequest:
    checked = validate_submission(submission)
    request = open_request(session, organization_id, now=now)
    session.refresh(request, with_for_update=True)
    if revision != request.submission_revision:
        raise conflict(
            codes.RELEASE_SUBMISSION_REVISION_CONFLICT,
            "the intake changed since you loaded it",
            revision=request.submission_revision,
        )
    request.submission = checked
    request.submission_revision += 1
    request.updated_at = now
    audit(
        session,
        request,
        "release.submission_saved",
        now=now,
        actor_user_id=actor_user_id,
        payload={"revision": request.submission_revision},
    )
    session.flush()
    return request


def audit(
    session: Session,
    request: ReleaseRequest,
    name: str,
    *,
    now: datetime,
    payload: dict[str, Any],
    actor_user_id: uuid.UUID | None = None,
) -> None:
    """An audit record of the gym's release request: every step of the pipeline that an owner
    or an operator takes on it (intake, candidate, approval, check, observed result)."""
    emit(
        session,
        EventKind.audit,
        name,
        at=now,
        aggregate_type="release_request",
        aggregate_id=request.id,
        organization_id=request.organization_id,
        actor_user_id=actor_user_id,
        payload=payload,
    )
